"""`kvlearn ctl` against a real sidecar on 127.0.0.1.

status names the policy and that no model is loaded; pools shows one line per
node the load generator played, with the requests each received (200 requests
dealt over 2 nodes: 100 each); reload of a missing file fails with the server's
reason and exit status 1; a dead address gets one line naming it. metrics finds
/metrics through GetStatus (or is given --metrics-address) and prints the
series asked for: 200 request arrivals after loadgen played 200 requests; a
sidecar without /metrics is named as such.

usage: ctl_test.py PATH_TO_KVLEARN SAMPLE_TRACE
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

from serve_support import head_trace, start_serve

KVLEARN, SAMPLE = sys.argv[1], sys.argv[2]


def ctl(port, *args):
    return subprocess.run([KVLEARN, "ctl", "--target", f"127.0.0.1:{port}"] + list(args),
                          capture_output=True, text=True)


class CtlTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="kvlearn_ctl_")
        self.addCleanup(shutil.rmtree, self.work, True)

    def test_status_pools_reload_against_a_real_sidecar(self):
        _, port = start_serve(self, KVLEARN, os.path.join(self.work, "data"))
        status = ctl(port, "status")
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("policy lru\n", status.stdout)
        self.assertIn("model (none)\n", status.stdout)
        self.assertIn("pools 0\n", status.stdout)

        trace = head_trace(SAMPLE, os.path.join(self.work, "head.jsonl"), 200)
        loadgen = subprocess.run([KVLEARN, "loadgen", "--target", f"127.0.0.1:{port}",
                                  "--trace", trace, "--nodes", "2", "--quiet"],
                                 capture_output=True, text=True)
        self.assertEqual(loadgen.returncode, 0, loadgen.stderr)
        pools = ctl(port, "pools")
        self.assertEqual(pools.returncode, 0, pools.stderr)
        rows = {line.split()[0]: line.split() for line in pools.stdout.splitlines()[1:]}
        self.assertEqual(sorted(rows), ["loadgen-0", "loadgen-1"])
        for node in rows:
            self.assertEqual(rows[node][5], "100", pools.stdout)  # the requests column

        missing = os.path.join(self.work, "no-model.pt")
        reload = ctl(port, "reload", missing)
        self.assertEqual(reload.returncode, 1)
        self.assertIn("ReloadModel: ", reload.stderr)
        self.assertEqual(len(reload.stderr.strip().splitlines()), 1, reload.stderr)

    def test_metrics_are_found_and_filtered(self):
        server, port = start_serve(self, KVLEARN, os.path.join(self.work, "data"), metrics=True)
        trace = head_trace(SAMPLE, os.path.join(self.work, "head.jsonl"), 200)
        loadgen = subprocess.run([KVLEARN, "loadgen", "--target", f"127.0.0.1:{port}",
                                  "--trace", trace, "--quiet"], capture_output=True, text=True)
        self.assertEqual(loadgen.returncode, 0, loadgen.stderr)
        name = "kvlearn_events_ingested_total"
        found = ctl(port, "metrics", name)
        self.assertEqual(found.returncode, 0, found.stderr)
        lines = found.stdout.splitlines()
        self.assertIn(f"# TYPE {name} counter", lines)
        self.assertIn(f'{name}{{kind="request_arrival"}} 200', lines)
        for line in lines:  # only that series
            self.assertTrue(line.startswith((name, f"# HELP {name}", f"# TYPE {name}")), line)

        everything = ctl(port, "metrics")
        self.assertEqual(everything.returncode, 0, everything.stderr)
        self.assertIn("kvlearn_rpcs_total{", everything.stdout)
        self.assertGreater(len(everything.stdout.splitlines()), len(lines))

        # The port the server printed at start, given by hand (the gRPC
        # target then is never asked): the same series.
        given = subprocess.run([KVLEARN, "ctl", "--target", "127.0.0.1:1", "metrics",
                                "--metrics-address", f"127.0.0.1:{server.metrics_port}",
                                name], capture_output=True, text=True)
        self.assertEqual(given.returncode, 0, given.stderr)
        self.assertIn(f'{name}{{kind="request_arrival"}} 200', given.stdout.splitlines())

        _, quiet_port = start_serve(self, KVLEARN, os.path.join(self.work, "no-metrics"))
        none = ctl(quiet_port, "metrics")
        self.assertEqual(none.returncode, 1)
        self.assertIn(f"the sidecar at 127.0.0.1:{quiet_port} serves no /metrics", none.stderr)

    def test_a_dead_address_is_named(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        result = ctl(port, "--timeout-seconds", "1", "status")
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"cannot reach 127.0.0.1:{port}", result.stderr)
        self.assertIn("is `kvlearn serve` running there?", result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
