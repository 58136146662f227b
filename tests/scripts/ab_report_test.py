#!/usr/bin/python3
"""scripts/ab_report.py on generated compare JSON files: a policy cheaper by
construction gets an interval above 0 and the verdict says it saves; identical
inputs give a difference of 0 inside its interval and "no significant
difference"; the HTML embeds its PNGs and names every row. Its port of the
node -> arm hash equals the sidecar's (node_arm_print, built from
server/experiment.cc) on a list of ids; with a real sidecar, --data-dir gives
each node the arm /metrics charged. Run by ctest; skipped where Debian's
/usr/bin/python3 has no matplotlib.

usage: ab_report_test.py PATH_TO_NODE_ARM_PRINT PATH_TO_KVLEARN
"""
import base64
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cli"))
from serve_support import start_serve  # noqa: E402

SCRIPT = ROOT / "scripts" / "ab_report.py"
NODE_ARM_PRINT, KVLEARN = sys.argv[1], sys.argv[2]


def has_matplotlib():
    return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib, numpy"],
                          capture_output=True).returncode == 0


def compare_json(costs, requests=100, accesses=1000):
    """The fields of compare's JSON the report reads; cost s by policy."""
    return {"requests": requests, "block_accesses": accesses,
            "results": [{"policy": p, "cost_seconds": c, "block_hit_ratio": 0.5,
                         "transfer_bytes": 1e9} for p, c in costs.items()]}


def python_arms(arms, ids):
    """(point, arm name) of each id by the script's own functions, run by
    Debian's interpreter (the one with matplotlib, which the script imports)."""
    code = ("import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('ab_report', {str(SCRIPT)!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "arms, ids = json.load(sys.stdin)\n"
            "print(json.dumps([[m.node_hash_unit(i), arms[m.arm_of(arms, i)]['name']] "
            "for i in ids]))\n")
    r = subprocess.run(["/usr/bin/python3", "-c", code], input=json.dumps([arms, ids]),
                       capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout)


@unittest.skipUnless(has_matplotlib(), "python3-matplotlib missing (scripts/setup.sh installs it)")
class AbReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ab_report_test_")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def report(self, units):
        paths = []
        for i, costs in enumerate(units):
            paths.append(os.path.join(self.tmp, f"unit{i}.json"))
            with open(paths[-1], "w") as f:
                json.dump(compare_json(costs), f)
        out = os.path.join(self.tmp, "out")
        r = subprocess.run([str(SCRIPT), *paths, "--out", out], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "report.json")) as f:
            return r.stdout, json.load(f), out

    def test_a_cheaper_policy_saves_with_an_interval_above_zero(self):
        rng = random.Random(3)
        # learned costs 10 s less than lru on every unit, whose costs vary.
        units = []
        for _ in range(12):
            lru = rng.uniform(200, 400)
            units.append({"lru": lru, "learned": lru - 10, "gdsf": lru + rng.uniform(-5, 5)})
        stdout, report, _ = self.report(units)
        point, low, high = report["differences"]["learned"]["cost_per_request"]
        self.assertAlmostEqual(point, -0.1)  # 10 s over 100 requests a unit
        self.assertLess(high, 0)
        self.assertLessEqual(low, point)
        self.assertTrue(stdout.startswith("learned saves 0.1 (95% CI"), stdout)
        self.assertIn("against lru over 12 files", stdout)

    def test_identical_inputs_differ_by_zero_inside_the_interval(self):
        rng = random.Random(4)
        units = []
        for _ in range(10):
            c = rng.uniform(200, 400)
            units.append({"lru": c, "learned": c + rng.uniform(-20, 20)})
        units = [dict(u, learned=u["lru"]) for u in units]
        stdout, report, _ = self.report(units)
        for field, (point, low, high) in report["differences"]["learned"].items():
            self.assertEqual(point, 0, field)
            self.assertLessEqual(low, 0, field)
            self.assertGreaterEqual(high, 0, field)
        self.assertTrue(stdout.startswith("no significant difference"), stdout)
        # Mixed signs: a learned row that wins on some units and loses on others.
        mixed = [{"lru": 300, "learned": 300 + (15 if i % 2 else -15)} for i in range(10)]
        stdout, report, _ = self.report(mixed)
        self.assertTrue(stdout.startswith("no significant difference"), stdout)

    def test_the_html_embeds_its_pngs_and_names_every_row(self):
        _, report, out = self.report([{"lru": 300, "learned": 280, "s3fifo": 290}] * 3)
        page = pathlib.Path(out, "report.html").read_text()
        images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
        self.assertEqual(len(images), 3)
        for image in images:
            self.assertEqual(base64.b64decode(image)[:8], b"\x89PNG\r\n\x1a\n")
        for row in ("lru", "learned", "s3fifo"):
            self.assertIn(f"<td>{row}</td>", page)
        self.assertIn(report["verdict"], page)

    def test_a_file_that_is_not_compare_json_is_refused_naming_it(self):
        path = os.path.join(self.tmp, "bad.json")
        with open(path, "w") as f:
            json.dump({"trace": "x"}, f)
        r = subprocess.run([str(SCRIPT), path, "--out", os.path.join(self.tmp, "o")],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(path, r.stderr)

    def test_the_python_hash_is_the_sidecars(self):
        experiment = os.path.join(self.tmp, "x.json")
        arms = [{"name": "a", "policy": "lru", "share": 0.2},
                {"name": "b", "policy": "gdsf", "share": 0.5},
                {"name": "c", "policy": "lru", "share": 0.3}]
        with open(experiment, "w") as f:
            json.dump({"arms": arms}, f)
        ids = [f"node-{i}" for i in range(300)] + ["loadgen-0", "a", "x" * 128, "10.0.0.1:8000"]
        r = subprocess.run([NODE_ARM_PRINT, experiment, *ids], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), len(ids))
        seen = set()
        for node, line, (py_unit, py_arm) in zip(ids, lines, python_arms(arms, ids)):
            got_id, unit, arm = line.split("\t")
            self.assertEqual(got_id, node)
            self.assertEqual(py_unit, float(unit), node)
            self.assertEqual(py_arm, arm, node)
            seen.add(arm)
        self.assertEqual(seen, {"a", "b", "c"})  # every branch of the lookup ran

    def test_a_data_dir_report_charges_each_arm_what_the_sidecar_did(self):
        """Arms lru and gdsf over six nodes, shadows lru and s3fifo: the report's
        whole-log rows are the sidecar's per-arm and per-shadow /metrics."""
        experiment = os.path.join(self.tmp, "x.json")
        with open(experiment, "w") as f:
            json.dump({"arms": [{"name": "lru", "policy": "lru", "share": 0.5},
                                {"name": "gdsf", "policy": "gdsf", "share": 0.5}],
                       "shadows": [{"name": "shadow-lru", "policy": "lru"},
                                   {"name": "s3fifo", "policy": "s3fifo"}]}, f)
        data = os.path.join(self.tmp, "data")
        server, port = start_serve(self, KVLEARN, data, ["--experiment", experiment],
                                   metrics=True)
        trace = os.path.join(self.tmp, "chat.jsonl")
        pool = 20 * 512 * 131072  # 20 blocks of 512 tokens at Llama-3-8B's 128 KiB a token
        for args in (["gen", "--kind", "chat", "--requests", "400", "--seed", "5", "--out", trace],
                     ["loadgen", "--target", f"127.0.0.1:{port}", "--trace", trace, "--nodes",
                      "6", "--pool-bytes", str(pool), "--quiet"]):
            done = subprocess.run([KVLEARN, *args], capture_output=True, text=True, timeout=300)
            self.assertEqual(done.returncode, 0, done.stderr)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                    timeout=30) as r:
            metrics = {}
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#"):
                    key, value = line.rsplit(" ", 1)
                    metrics[key] = float(value)
        out = os.path.join(self.tmp, "out")
        r = subprocess.run([str(SCRIPT), "--data-dir", data, "--experiment", experiment,
                            "--kvlearn", KVLEARN, "--pool-bytes", str(pool), "--windows", "3",
                            "--learned", "gdsf", "--resamples", "200", "--out", out],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
        rows = {row["row"]: row for row in report["rows"]}
        self.assertEqual(len(report["units"]), 6)
        for arm in ("lru", "gdsf"):
            self.assertEqual(rows[arm]["requests"],
                             metrics[f'kvlearn_arm_requests_total{{arm="{arm}"}}'])
            self.assertAlmostEqual(rows[arm]["cost_seconds"],
                                   metrics[f'kvlearn_arm_cost_seconds_total{{arm="{arm}"}}'],
                                   delta=1e-5)
        for shadow in ("shadow-lru", "s3fifo"):
            want = sum(v for k, v in metrics.items()
                       if k.startswith(f'kvlearn_shadow_cost_seconds_total{{shadow="{shadow}"'))
            self.assertAlmostEqual(rows[shadow]["cost_seconds"], want, delta=1e-5)
        self.assertEqual(rows["shadow-lru"]["requests"], 400)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
