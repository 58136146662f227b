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


def start_serve(test, kvlearn, data_dir):
    """(process, port) of `kvlearn serve` on data_dir; stopped at the test's cleanup."""
    server = subprocess.Popen([kvlearn, "serve", "--listen", "127.0.0.1:0",
                               "--metrics-listen", "", "--data-dir", data_dir],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    test.addCleanup(server.wait)
    test.addCleanup(server.terminate)
    test.addCleanup(server.stdout.close)
    # First stdout line: "port P metrics_port M" (docs/sidecar.md).
    ready, _, _ = select.select([server.stdout], [], [], 60)
    line = server.stdout.readline().decode() if ready else ""
    test.assertTrue(line.startswith("port "), f"kvlearn serve printed {line!r}")
    return server, line.split()[1]
