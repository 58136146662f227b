"""`kvlearn model promote` and `rollback` on a sidecar running `--experiment`, against a
real sidecar.

The experiment's arms: lru, "follow" (learned, model registry:serving) and "pinned"
(learned, model registry:v1). A generated chat trace is played in by `kvlearn loadgen`
and two versions are trained from the log (`kvlearn train --data-dir`). Then:
- promote moves registry.json's pointer and the sidecar reloads its experiment: the
  following arm serves the promoted version, the pinned one stays on v1; rollback
  switches back; a restarted sidecar serves what the pointer names;
- a promote killed (SIGKILL) at each step leaves registry.json naming the old or the new
  version, and the sidecar's reload then serves that version (never neither); promoting
  again completes;
- a sidecar that refuses the reload (its experiment file broken meanwhile) leaves the
  registry as it was.

usage: experiment_promote_test.py PATH_TO_KVLEARN
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from serve_support import start_serve

KVLEARN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KVLEARN_BINARY", "")
TRAIN = ["--epochs", "2", "--force", "--quiet"]
WINDOW = ["--window-requests", "600", "--warmup-requests", "900", "--quiet"]
EXPERIMENT = {"arms": [
    {"name": "lru", "policy": "lru", "share": 0.4},
    {"name": "follow", "policy": "learned", "model": "registry:serving", "share": 0.3},
    {"name": "pinned", "policy": "learned", "model": "registry:v1", "share": 0.3}]}


def run(*args, env=None):
    return subprocess.run([KVLEARN, *args], capture_output=True, text=True, timeout=900, env=env)


def write_experiment(path, with_pinned=True):
    """EXPERIMENT, or without its pinned arm (before v1 exists)."""
    experiment = EXPERIMENT if with_pinned else {
        "arms": [dict(EXPERIMENT["arms"][0], share=0.7), EXPERIMENT["arms"][1]]}
    with open(path, "w") as f:
        json.dump(experiment, f)


class ExperimentPromoteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        """A data dir whose log holds the trace and whose registry holds v1 and v2, trained
        from that log while nothing served; each test starts from a copy."""
        cls.work = tempfile.mkdtemp(prefix="kvlearn_experiment_promote_")
        trace = os.path.join(cls.work, "chat.jsonl")
        gen = run("gen", "--kind", "chat", "--requests", "1500", "--seed", "4", "--out", trace)
        assert gen.returncode == 0, gen.stderr
        cls.template = os.path.join(cls.work, "template")
        experiment = os.path.join(cls.work, "first.json")
        write_experiment(experiment, with_pinned=False)
        server = subprocess.Popen([KVLEARN, "serve", "--listen", "127.0.0.1:0", "--metrics-listen",
                                   "", "--data-dir", cls.template, "--experiment", experiment],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            port = server.stdout.readline().decode().split()[1]
            load = run("loadgen", "--target", f"127.0.0.1:{port}", "--trace", trace, "--nodes",
                       "4", "--quiet")
            assert load.returncode == 0, load.stderr
            for seed in (1, 2):
                out = os.path.join(cls.work, f"model{seed}.pt")
                r = run("train", "--data-dir", cls.template, "--out", out, "--seed", str(seed),
                        *TRAIN)
                assert r.returncode == 0, r.stderr
                assert f"registered as v{seed}" in r.stdout, r.stdout
        finally:
            server.terminate()
            server.wait()
            server.stdout.close()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, True)

    def setUp(self):
        self.data = tempfile.mkdtemp(prefix="data_", dir=self.work)
        shutil.rmtree(self.data)
        shutil.copytree(self.template, self.data)
        self.experiment = os.path.join(self.data, "experiment.json")
        write_experiment(self.experiment)
        self.server, self.port = start_serve(self, KVLEARN, self.data,
                                             ["--experiment", self.experiment])

    def restart(self):
        self.server.terminate()
        self.server.wait()
        self.server, self.port = start_serve(self, KVLEARN, self.data,
                                             ["--experiment", self.experiment])

    def target(self):
        return f"127.0.0.1:{self.port}"

    def promote(self, version, env=None):
        return run("model", "promote", str(version), "--data-dir", self.data, "--sidecar",
                   self.target(), "--force", *WINDOW, env=env)

    def arm(self, name, version):
        """The arm as the sidecar describes it when it serves registered `version`."""
        with open(os.path.join(self.data, "models", f"v{version}.json")) as f:
            return f"{name}=learned:v{version}.pt@" + json.load(f)["checksum"]

    def arms(self):
        """The sidecar's arms after reloading its experiment."""
        r = run("ctl", "--target", self.target(), "reload-experiment")
        self.assertEqual(r.returncode, 0, r.stderr)
        return re.search(r"arms (\S+)", r.stdout).group(1)

    def registry_serving(self):
        with open(os.path.join(self.data, "models", "registry.json")) as f:
            return json.load(f)["serving"]

    def expected(self, follow):
        follow = "follow=learned" if follow is None else self.arm("follow", follow)
        return f"lru=lru,{follow},{self.arm('pinned', 1)}"

    def test_promote_and_rollback_switch_the_following_arm_and_survive_a_restart(self):
        self.assertEqual(self.arms(), self.expected(None))
        for version in (1, 2):
            p = self.promote(version)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(f"reloaded its experiment: arms {self.expected(version)}\n", p.stdout)
            self.assertEqual(self.registry_serving(), version)
        r = run("model", "rollback", "--data-dir", self.data, "--sidecar", self.target())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"arms {self.expected(1)}\n", r.stdout)
        self.assertEqual(self.registry_serving(), 1)
        p = self.promote(2)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.restart()
        self.assertEqual(self.arms(), self.expected(2))

    def test_a_promote_killed_at_any_step_leaves_the_old_or_the_new_version_serving(self):
        self.assertEqual(self.promote(1).returncode, 0)
        old, new = 1, 2
        for point in ("after-evaluate", "before-record", "registry-rename",
                      "before-experiment-reload"):
            with self.subTest(point=point):
                env = dict(os.environ, KVLEARN_REGISTRY_CRASH_AT=point)
                p = self.promote(new, env=env)
                self.assertEqual(p.returncode, -9, p.stderr)
                serving = self.registry_serving()
                self.assertIn(serving, (old, new))
                # What the sidecar loads now (a reload, or a restart) is that version.
                self.assertEqual(self.arms(), self.expected(serving))
                if serving != new:
                    p = self.promote(new)
                    self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(self.arms(), self.expected(new))
                old, new = new, old

    def test_a_refused_reload_leaves_the_registry_as_it_was(self):
        self.assertEqual(self.promote(1).returncode, 0)
        with open(self.experiment, "w") as f:
            f.write('{"arms": [')
        p = self.promote(2)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("did not reload its experiment", p.stderr)
        self.assertIn("the registry was restored", p.stderr)
        self.assertEqual(self.registry_serving(), 1)
        listing = run("model", "list", "--data-dir", self.data)
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertNotIn("promote v2", listing.stdout)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[2:])
