"""A shadow's cost in a real `kvlearn serve --experiment` equals what `kvlearn
compare` says its policy costs on the exported log of the nodes it ran on.

The sidecar runs one live arm (lru) and two shadows (lru, gdsf); loadgen plays
a generated 300-request chat trace (on which lru and gdsf differ) over two
nodes. Then, per node,
`kvlearn export-log --node` writes that node's requests and `kvlearn compare`
replays them at the same pool size: the sums over both nodes of compare's
cost_seconds, loaded and admitted bytes must be the shadows' /metrics series (and the lru
shadow's the live arm's). A bad experiment file stops `kvlearn serve` with one
line naming the field; SIGHUP reloads the file.

usage: experiment_export_test.py PATH_TO_KVLEARN
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from serve_support import start_serve

KVLEARN = sys.argv[1]
POOL_BYTES = 20 * 512 * 131072  # 20 blocks of 512 tokens at Llama-3-8B's 128 KiB a token


def metrics(port):
    """Every series of /metrics, by 'name{labels}'."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        body = r.read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


class ExperimentExportTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="kvlearn_experiment_")
        self.addCleanup(shutil.rmtree, self.work, True)

    def path(self, name):
        return os.path.join(self.work, name)

    def run_ok(self, *args):
        done = subprocess.run([KVLEARN] + list(args), capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout

    def test_a_shadow_costs_what_compare_says_on_the_exported_log(self):
        with open(self.path("x.json"), "w") as f:
            json.dump({"arms": [{"name": "live", "policy": "lru", "share": 1}],
                       "shadows": [{"name": "same", "policy": "lru"},
                                   {"name": "g", "policy": "gdsf"}]}, f)
        data = self.path("data")
        server, port = start_serve(self, KVLEARN, data, ["--experiment", self.path("x.json")],
                                   metrics=True)
        trace = self.path("chat.jsonl")
        self.run_ok("gen", "--kind", "chat", "--requests", "300", "--seed", "5", "--out", trace)
        self.run_ok("loadgen", "--target", f"127.0.0.1:{port}", "--trace", trace, "--nodes", "2",
                    "--pool-bytes", str(POOL_BYTES), "--quiet")
        got = metrics(server.metrics_port)

        want = {"lru": [0.0, 0, 0], "gdsf": [0.0, 0, 0]}  # cost_seconds, loaded, admitted bytes
        for node in ("loadgen-0", "loadgen-1"):
            log = self.path(f"{node}.jsonl")
            self.run_ok("export-log", "--data-dir", data, "--node", node, "--out", log, "--quiet")
            report = json.loads(self.run_ok("compare", "--trace", log, "--policies", "lru,gdsf",
                                            "--pool-bytes", str(POOL_BYTES), "--format", "json",
                                            "--quiet"))
            for row in report["results"]:
                want[row["policy"]][0] += row["cost_seconds"]
                want[row["policy"]][1] += int(row["loaded_bytes"])
                want[row["policy"]][2] += int(row["admitted_bytes"])
        self.assertNotEqual(want["lru"], want["gdsf"])  # the check below can fail
        for shadow, policy in (("same", "lru"), ("g", "gdsf")):
            labels = f'{{shadow="{shadow}",arm="live"}}'
            self.assertAlmostEqual(got["kvlearn_shadow_cost_seconds_total" + labels],
                                   want[policy][0], delta=1e-6, msg=shadow)
            self.assertEqual(got["kvlearn_shadow_loaded_bytes_total" + labels], want[policy][1])
            self.assertEqual(got["kvlearn_shadow_admitted_bytes_total" + labels], want[policy][2])
        self.assertAlmostEqual(got['kvlearn_arm_cost_seconds_total{arm="live"}'],
                               want["lru"][0], delta=1e-6)

    def test_sighup_reloads_the_experiment(self):
        """SIGHUP reads the file again: the renamed arm's series appear (with every pool
        counted there from then on); a broken file keeps the running experiment."""
        exp = self.path("x.json")
        with open(exp, "w") as f:
            json.dump({"arms": [{"name": "first", "policy": "lru", "share": 1}]}, f)
        server, port = start_serve(self, KVLEARN, self.path("data"), ["--experiment", exp],
                                   metrics=True)
        trace = self.path("chat.jsonl")
        self.run_ok("gen", "--kind", "chat", "--requests", "50", "--seed", "5", "--out", trace)
        self.run_ok("loadgen", "--target", f"127.0.0.1:{port}", "--trace", trace, "--quiet")
        with open(exp, "w") as f:
            json.dump({"arms": [{"name": "second", "policy": "gdsf", "share": 1}]}, f)
        server.send_signal(signal.SIGHUP)
        key = 'kvlearn_arm_requests_total{arm="second"}'
        deadline = time.monotonic() + 60
        while key not in metrics(server.metrics_port) and time.monotonic() < deadline:
            time.sleep(0.05)
        got = metrics(server.metrics_port)
        self.assertEqual(got[key], 0)
        self.assertEqual(got['kvlearn_arm_requests_total{arm="first"}'], 50)
        self.assertEqual(got['kvlearn_model_reloads_total{result="ok"}'], 1)
        with open(exp, "w") as f:
            f.write("{")
        server.send_signal(signal.SIGHUP)
        while (metrics(server.metrics_port)['kvlearn_model_reloads_total{result="error"}'] == 0
               and time.monotonic() < deadline):
            time.sleep(0.05)
        self.assertEqual(metrics(server.metrics_port)[
            'kvlearn_model_reloads_total{result="error"}'], 1)
        pools = subprocess.run([KVLEARN, "ctl", "--target", f"127.0.0.1:{port}", "status"],
                               capture_output=True, text=True)
        self.assertIn("policy experiment", pools.stdout)

    def test_a_bad_file_stops_the_start_naming_the_field(self):
        with open(self.path("bad.json"), "w") as f:
            f.write('{"arms": [{"name": "a", "policy": "lru", "share": 1, "weight": 2}]}')
        done = subprocess.run([KVLEARN, "serve", "--listen", "127.0.0.1:0", "--metrics-listen",
                               "", "--data-dir", self.path("data"), "--experiment",
                               self.path("bad.json")], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("arms[0].weight: unknown key", done.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
