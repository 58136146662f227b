"""What the tests of tests/cli that need a real sidecar share: a short trace cut
from the sample, and `kvlearn serve` on a free port of 127.0.0.1, ended when
the test ends."""
import os
import select
import subprocess


def head_trace(sample, path, requests):
    """Writes the first `requests` lines of the trace `sample` to `path`."""
    with open(sample) as full, open(path, "w") as head:
        for _, request in zip(range(requests), full):
            head.write(request)
    return path


def start_serve(test, kvlearn, data_dir, extra=(), metrics=False):
    """(process, port) of `kvlearn serve` on data_dir with the flags `extra`;
    stopped at the test's cleanup. With `metrics`, /metrics on a free port
    (the process's metrics_port)."""
    listen = "127.0.0.1:0" if metrics else ""
    server = subprocess.Popen([kvlearn, "serve", "--listen", "127.0.0.1:0",
                               "--metrics-listen", listen, "--data-dir", data_dir] + list(extra),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    test.addCleanup(server.wait)
    test.addCleanup(server.terminate)
    test.addCleanup(server.stdout.close)
    # First stdout line: "port P metrics_port M" (docs/sidecar.md).
    ready, _, _ = select.select([server.stdout], [], [], 60)
    line = server.stdout.readline().decode() if ready else ""
    test.assertTrue(line.startswith("port "), f"kvlearn serve printed {line!r}")
    server.metrics_port = line.split()[3]
    return server, line.split()[1]
