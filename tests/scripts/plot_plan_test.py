#!/usr/bin/python3
"""scripts/plot_plan.py draws both PNGs from a small plan JSON (the shape
`kvlearn plan --format json` writes, cut to what the script reads), and exits
non-zero naming the file when the JSON is broken or not a plan. Run by ctest;
skipped where Debian's /usr/bin/python3 has no matplotlib."""
import json
import os
import pathlib
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "plot_plan.py"


def has_matplotlib():
    return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


def size(fraction, costs):
    return {"pool_fraction": fraction, "pool_bytes": int(fraction * 4e9),
            "comparison": {"results": [{"policy": p, "cost_seconds": c}
                                       for p, c in costs.items()]}}


PLAN = {
    "trace": "hand.jsonl", "window_seconds": 100, "distinct_block_bytes": 4e9,
    "transfer_weight": 1, "pool_fraction": 0.1,
    "policies": ["lru", "gdsf", "belady", "no-cache"], "oracles": ["belady"],
    "sizes": [size(0.01, {"lru": 90, "gdsf": 85, "belady": 70, "no-cache": 100}),
              size(0.1, {"lru": 70, "gdsf": 66, "belady": 55, "no-cache": 100}),
              size(1.0, {"lru": 50, "gdsf": 50, "belady": 48, "no-cache": 100})],
}


@unittest.skipUnless(has_matplotlib(), "python3-matplotlib missing (scripts/setup.sh installs it)")
class PlotPlanTest(unittest.TestCase):
    def plot(self, text, tmp):
        path = os.path.join(tmp, "plan.json")
        with open(path, "w") as f:
            f.write(text)
        out = os.path.join(tmp, "png")
        return subprocess.run([str(SCRIPT), path, "--out-dir", out], capture_output=True,
                              text=True, timeout=120), out, path

    def test_writes_both_pngs(self):
        with tempfile.TemporaryDirectory() as tmp:
            r, out, _ = self.plot(json.dumps(PLAN), tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            for name in ("plan_cost.png", "plan_saving.png"):
                png = pathlib.Path(out) / name
                self.assertTrue(png.exists(), name)
                self.assertGreater(png.stat().st_size, 0, name)
                self.assertEqual(png.read_bytes()[:8], b"\x89PNG\r\n\x1a\n", name)

    def test_bad_json_exits_nonzero_naming_the_file(self):
        no_sizes = dict(PLAN, sizes=[])
        no_cost = json.loads(json.dumps(PLAN))
        del no_cost["sizes"][1]["comparison"]["results"][0]["cost_seconds"]
        no_lru = json.loads(json.dumps(PLAN))
        no_lru["policies"].remove("lru")
        for text in ("{not json", "[1, 2]", json.dumps(no_sizes), json.dumps(no_cost),
                     json.dumps(no_lru)):
            with self.subTest(text=text[:40]), tempfile.TemporaryDirectory() as tmp:
                r, out, path = self.plot(text, tmp)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(path, r.stderr)
                self.assertFalse((pathlib.Path(out) / "plan_cost.png").exists())


if __name__ == "__main__":
    unittest.main()
