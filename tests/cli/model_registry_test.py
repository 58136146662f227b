"""Retraining from a sidecar's event log, and the model registry, against a real sidecar.

A generated chat trace is played into `kvlearn serve --policy learned` by `kvlearn loadgen`.
While the sidecar runs:
- `kvlearn train --data-dir` records, byte for byte, the samples (--samples-out) that
  `kvlearn train --trace` records from `kvlearn export-log`'s JSONL of the same log, and
  trains the same weights; with --since/--until too, and with chain sampling
  (--max-accesses below the log's accesses: both keep the same branches).
- `kvlearn model promote` refuses a model trained on shuffled labels (it costs more than
  the serving model or lru on the newest window); promote and rollback round-trip, the
  sidecar serving each version as the registry says (`kvlearn ctl status`), and again after
  a restart.
- `kvlearn model evaluate` prices the newest requests of the exported trace (it holds
  only those).
- A damaged entry (bad JSON, a missing or changed model file) or registry.json is refused
  with a message naming it, and the serving model stays.
- A promote killed (SIGKILL) at each step leaves the old or the new version serving, in the
  registry and in the sidecar, never neither; promoting again completes.

usage: model_registry_test.py PATH_TO_KVLEARN
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

from serve_support import start_serve

KVLEARN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KVLEARN_BINARY", "")
TRAIN = ["--epochs", "2", "--force", "--quiet"]
WINDOW = ["--window-requests", "600", "--warmup-requests", "900", "--quiet"]


def run(*args, env=None):
    return subprocess.run([KVLEARN, *args], capture_output=True, text=True, timeout=900, env=env)


def metadata(path):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/extra/kvlearn_metadata.json"))
        return json.loads(z.read(name))


def registered(stdout):
    m = re.search(r"registered as v(\d+)", stdout)
    assert m, stdout
    return int(m.group(1))


class ModelRegistryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_registry_")
        cls.trace = os.path.join(cls.work, "chat.jsonl")
        gen = run("gen", "--kind", "chat", "--requests", "1500", "--seed", "4", "--out", cls.trace)
        assert gen.returncode == 0, gen.stderr
        # The model the sidecar starts with (learned needs one).
        cls.first = os.path.join(cls.work, "first.pt")
        r = run("train", "--trace", cls.trace, "--out", cls.first, *TRAIN)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, True)

    def setUp(self):
        self.data = tempfile.mkdtemp(prefix="data_", dir=self.work)
        self.server, self.port = self.serve()
        load = run("loadgen", "--target", f"127.0.0.1:{self.port}", "--trace", self.trace,
                   "--quiet")
        self.assertEqual(load.returncode, 0, load.stderr)

    def serve(self):
        return start_serve(self, KVLEARN, self.data, ["--policy", "learned", "--model", self.first])

    def train_from_log(self, *extra):
        out = os.path.join(self.data, f"model{len(os.listdir(self.data))}.pt")
        r = run("train", "--data-dir", self.data, "--out", out, *TRAIN, *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        return registered(r.stdout)

    def model(self, *args, env=None):
        return run("model", args[0], "--data-dir", self.data, *args[1:], env=env)

    def promote(self, version, *extra, env=None):
        return self.model("promote", str(version), "--sidecar", f"127.0.0.1:{self.port}",
                          *WINDOW, *extra, env=env)

    def serving(self):
        """(the registry's serving version or None, the sidecar's model version)."""
        with open(os.path.join(self.data, "models", "registry.json")) as f:
            registry = json.load(f)
        status = run("ctl", "--target", f"127.0.0.1:{self.port}", "status")
        self.assertEqual(status.returncode, 0, status.stderr)
        model = re.search(r"^model (\S+)", status.stdout, re.M).group(1)
        return registry["serving"], model

    def file_version(self, version):
        """The model version the sidecar reports for registered version `version`."""
        with open(os.path.join(self.data, "models", f"v{version}.json")) as f:
            return f"v{version}.pt@" + json.load(f)["checksum"]

    def test_samples_from_the_log_equal_those_from_its_export(self):
        cases = [([], []), (["--since", "200000", "--until", "900000"], []),
                 ([], ["--max-accesses", "12000"])]
        for window, sample in cases:
            with self.subTest(window=window, sample=sample):
                exported = os.path.join(self.work, "exported.jsonl")
                e = run("export-log", "--data-dir", self.data, "--out", exported, *window)
                self.assertEqual(e.returncode, 0, e.stderr)
                a, b = (os.path.join(self.work, n) for n in ("a.csv", "b.csv"))
                ta = run("train", "--trace", exported, "--out", os.path.join(self.work, "a.pt"),
                         "--samples-out", a, *TRAIN, *sample)
                self.assertEqual(ta.returncode, 0, ta.stderr)
                tb = run("train", "--data-dir", self.data, "--out",
                         os.path.join(self.work, "b.pt"), "--samples-out", b, *TRAIN, *window,
                         *sample)
                self.assertEqual(tb.returncode, 0, tb.stderr)
                with open(a) as fa, open(b) as fb:
                    rows_a, rows_b = fa.read(), fb.read()
                self.assertGreater(rows_a.count("\n"), 1000)
                self.assertTrue(rows_a == rows_b, "the samples differ")
                if sample:
                    # Sampled: both say so, and kept at most the budget.
                    for r in (ta, tb):
                        m = re.search(r"sampled branches: .*, (\d+) of (\d+) block accesses",
                                      r.stderr)
                        self.assertIsNotNone(m, r.stderr)
                        self.assertLessEqual(int(m.group(1)), 12000)
                        self.assertLess(int(m.group(1)), int(m.group(2)))
                ma, mb = (metadata(os.path.join(self.work, n)) for n in ("a.pt", "b.pt"))
                self.assertEqual(ma["trace_fingerprint"], mb["trace_fingerprint"])
                self.assertEqual(ma["judgement"], mb["judgement"])  # weights fingerprint too
                if window:
                    with open(exported) as f:
                        stamps = [json.loads(line)["timestamp"] for line in f]
                    self.assertTrue(all(200000 <= t < 900000 for t in stamps))
                    self.assertIn(f"read {len(stamps)} requests", tb.stderr)

    def test_evaluate_prices_the_newest_requests_of_the_export(self):
        # evaluate holds only the newest window + warm-up requests of the log;
        # they must be the last lines of the whole exported trace.
        version = self.train_from_log()
        exported = os.path.join(self.work, "all.jsonl")
        e = run("export-log", "--data-dir", self.data, "--out", exported)
        self.assertEqual(e.returncode, 0, e.stderr)
        with open(exported) as f:
            stamps = [json.loads(line)["timestamp"] for line in f]
        r = self.model("evaluate", str(version), *WINDOW)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.search(r"window: the newest 600 logged requests \((\d+)\.\.(\d+) ms\), after 900",
                      r.stdout)
        self.assertIsNotNone(m, r.stdout)
        self.assertEqual((int(m.group(1)), int(m.group(2))), (stamps[-600], stamps[-1]))

    def test_promote_refuses_a_model_trained_on_shuffled_labels(self):
        good = self.train_from_log()
        p = self.promote(good, "--force")
        self.assertEqual(p.returncode, 0, p.stderr)
        shuffled = self.train_from_log("--shuffle-labels", "--seed", "3")
        before = self.serving()
        p = self.promote(shuffled)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn(f"refused: v{shuffled} costs more than", p.stderr)
        self.assertIn("the serving model stays", p.stderr)
        self.assertEqual(self.serving(), before)
        self.assertEqual(before, (good, self.file_version(good)))
        # The table it decided on: candidate, serving, then lru among the heuristics.
        # Rows "vN (candidate)" / "vN (serving)" as they serve, "vN alone" the model
        # alone, "lru": the refusal is one of the three comparisons the rule names.
        rows = {" ".join(l.split()[:-2]): float(l.split()[-2]) for l in p.stdout.splitlines()
                if l.startswith("  v") or l.startswith("  lru ")}
        as_served = rows[f"v{shuffled} (candidate)"]
        self.assertTrue(as_served > rows[f"v{good} (serving)"] or as_served > rows["lru"] or
                        rows[f"v{shuffled} alone"] > rows[f"v{good} alone"], p.stdout)

    def test_promote_and_rollback_round_trip(self):
        a = self.train_from_log()
        b = self.train_from_log("--seed", "2")
        for version in (a, b):
            p = self.promote(version, "--force")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(self.serving(), (version, self.file_version(version)))
        r = self.model("rollback", "--sidecar", f"127.0.0.1:{self.port}", "--by", "tester")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.serving(), (a, self.file_version(a)))
        # a was promoted when nothing was registered as serving: nothing before it.
        again = self.model("rollback", "--sidecar", f"127.0.0.1:{self.port}")
        self.assertEqual(again.returncode, 1)
        self.assertEqual(self.serving(), (a, self.file_version(a)))
        listing = self.model("list")
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertRegex(listing.stdout, rf"\n  v{a} +\* ")
        self.assertIn(f"rollback v{a} (from v{b}) by tester", listing.stdout)
        # A restarted sidecar serves what it served (the reloads are journaled).
        self.server.terminate()
        self.server.wait()
        self.server, self.port = self.serve()
        self.assertEqual(self.serving(), (a, self.file_version(a)))
        self.assertEqual(os.stat(os.path.join(self.data, "models")).st_mode & 0o777, 0o700)
        # b's parent is the version serving when it was registered: none yet.
        with open(os.path.join(self.data, "models", f"v{b}.json")) as f:
            entry = json.load(f)
        self.assertIsNone(entry["parent"])
        self.assertGreater(entry["window"]["requests"], 1000)

    def test_a_damaged_entry_is_refused_and_the_serving_model_stays(self):
        good = self.train_from_log()
        self.assertEqual(self.promote(good, "--force").returncode, 0)
        damaged = [self.train_from_log("--seed", str(s)) for s in (5, 6, 7)]
        models = os.path.join(self.data, "models")
        with open(os.path.join(models, f"v{damaged[0]}.json"), "w") as f:
            f.write('{"version": ')
        os.remove(os.path.join(models, f"v{damaged[1]}.pt"))
        with open(os.path.join(models, f"v{damaged[2]}.pt"), "r+b") as f:
            f.seek(100)
            f.write(b"\x00\x01")
        before = self.serving()
        for version, why in zip(damaged, ("not valid JSON", "missing", "has checksum")):
            p = self.promote(version, "--force")
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn(f"registry entry version {version} (", p.stderr)
            self.assertIn(why, p.stderr)
            self.assertEqual(self.serving(), before)
        listing = self.model("list")
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertEqual(listing.stdout.count("refused: "), 3, listing.stdout)
        # A registry.json that does not parse refuses every command; nothing is rewritten.
        registry = os.path.join(models, "registry.json")
        with open(registry, "w") as f:
            f.write("{]")
        for args in (["list"], ["rollback"]):
            r = self.model(*args)
            self.assertEqual(r.returncode, 1)
            self.assertIn("registry.json: not valid JSON", r.stderr)
        with open(registry) as f:
            self.assertEqual(f.read(), "{]")
        status = run("ctl", "--target", f"127.0.0.1:{self.port}", "status")
        self.assertIn(f"model {before[1]}", status.stdout)

    def test_a_promote_killed_at_any_step_leaves_the_old_or_the_new_model_serving(self):
        old = self.train_from_log()
        self.assertEqual(self.promote(old, "--force").returncode, 0)
        for point in ("after-evaluate", "before-record", "registry-rename"):
            with self.subTest(point=point):
                new = self.train_from_log("--seed", str(10 + len(point)))
                env = dict(os.environ, KVLEARN_REGISTRY_CRASH_AT=point)
                p = self.promote(new, "--force", env=env)
                self.assertEqual(p.returncode, -9, p.stderr)
                registry, sidecar = self.serving()
                self.assertIn(registry, (old, new))
                self.assertIn(sidecar, (self.file_version(old), self.file_version(new)))
                listing = self.model("list", "--sidecar", f"127.0.0.1:{self.port}")
                self.assertEqual(listing.returncode, 0, listing.stderr)
                self.assertNotIn("refused", listing.stdout)
                # list names the registered version the sidecar serves.
                shown = re.search(r"serves (\S+) \(v(\d+)\)", listing.stdout)
                self.assertEqual(shown.group(1), sidecar, listing.stdout)
                self.assertEqual(self.file_version(int(shown.group(2))), sidecar)
                # Promoting again completes.
                p = self.promote(new, "--force")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(self.serving(), (new, self.file_version(new)))
                old = new
        # A registration killed between the model file and its entry leaves no entry.
        env = dict(os.environ, KVLEARN_REGISTRY_CRASH_AT="register-entry")
        out = os.path.join(self.data, "crashed.pt")
        r = run("train", "--data-dir", self.data, "--out", out, *TRAIN, env=env)
        self.assertEqual(r.returncode, -9, r.stderr)
        listing = self.model("list")
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertNotIn("refused", listing.stdout)
        self.assertEqual(self.train_from_log("--seed", "30") - old, 1)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[2:])
