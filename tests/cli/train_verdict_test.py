"""`kvlearn train` judges the model it trained and refuses an unfit one.

On a generated chat trace, `kvlearn train --shuffle-labels` trains a model whose labels
were shuffled across samples (no signal): train must exit non-zero with one line saying
why, and write no file. With --force it writes the file, marked unfit in its metadata
(read here straight from the archive's zip, as any tool can), with the validation table
and the training split's traffic summary, whose numbers are recomputed here from the
trace. `kvlearn compare --model` on that file prints the unfit line and the drift line,
and refuses a trace of another block size before replaying it.

usage: train_verdict_test.py PATH_TO_KVLEARN
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

KVLEARN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KVLEARN_BINARY", "")


def run(*args):
    return subprocess.run([KVLEARN, *args], capture_output=True, text=True, timeout=600)


def metadata(path):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/extra/kvlearn_metadata.json"))
        return json.loads(z.read(name))


def training_summary(trace, train_end):
    """The training split's summary, computed independently of kvlearn (exact: the trace has
    far fewer distinct blocks than the summariser tracks before it samples)."""
    rows = []
    with open(trace) as f:
        for line in f:
            rows.append(json.loads(line))
    rows = rows[:train_end]
    seen, accesses, reuses = set(), 0, 0
    for r in rows:
        for b in r["hash_ids"]:
            accesses += 1
            reuses += b in seen
            seen.add(b)
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    return {"requests": len(rows), "request_rate_per_s": (len(rows) - 1) / span,
            "mean_prompt_blocks": accesses / len(rows), "block_reuse_ratio": reuses / accesses,
            "distinct": len(seen)}


class TrainVerdictTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory(prefix="kvlearn_verdict_")
        cls.trace = os.path.join(cls.work.name, "chat.jsonl")
        gen = run("gen", "--kind", "chat", "--requests", "2000", "--seed", "4", "--out", cls.trace)
        assert gen.returncode == 0, gen.stderr
        cls.train = ["train", "--trace", cls.trace, "--epochs", "3", "--shuffle-labels"]

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def test_a_model_without_signal_is_refused(self):
        out = os.path.join(self.work.name, "refused.pt")
        r = run(*self.train, "--out", out)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertFalse(os.path.exists(out))
        refusal = [l for l in r.stderr.splitlines() if l.startswith("kvlearn train: not writing")]
        self.assertEqual(len(refusal), 1, r.stderr)
        # The numbers and what to do, on that one line.
        self.assertIn("learned", refusal[0])
        self.assertIn("lru", refusal[0])
        self.assertIn("--force", refusal[0])
        self.assertIn("verdict: unfit", r.stdout)

    def test_forced_it_is_written_marked_unfit(self):
        out = os.path.join(self.work.name, "forced.pt")
        r = run(*self.train, "--out", out, "--force", "--judge-pool-fractions", "0.05,0.1")
        self.assertEqual(r.returncode, 0, r.stderr)
        meta = metadata(out)
        j = meta["judgement"]
        self.assertEqual(j["verdict"], "unfit")
        # 2000 requests: training [0, 1200), validation [1200, 1600).
        self.assertEqual(j["validation_requests"], [1200, 1600])
        self.assertEqual([p["pool_fraction"] for p in j["pools"]], [0.05, 0.1])
        for p in j["pools"]:
            # Unfit: at some pool learned is not cheaper than both.
            self.assertLessEqual(p["best_heuristic_cost_s"], p["lru_cost_s"])
            self.assertNotEqual(p["best_heuristic"], "learned")
            # learned without a model is priced too: a cost, not a placeholder.
            self.assertGreater(p["no_model_cost_s"], 0)
        self.assertTrue(any(p["learned_cost_s"] >= p["best_heuristic_cost_s"] for p in j["pools"]))
        # With no signal the model adds nothing to learned's heuristic experts.
        self.assertTrue(any(p["learned_cost_s"] >= p["no_model_cost_s"] for p in j["pools"]))
        # The table: every pool's rows, learned first.
        self.assertEqual(r.stdout.count("validation requests [1200, 1600)"), 2)
        self.assertIn("verdict: unfit", r.stdout)

        t = meta["training_traffic"]
        want = training_summary(self.trace, 1200)
        self.assertLess(want["distinct"], 65536)
        self.assertEqual(t["requests"], want["requests"])
        self.assertEqual(t["block_size_tokens"], 512)
        for key in ("request_rate_per_s", "mean_prompt_blocks", "block_reuse_ratio"):
            self.assertAlmostEqual(t[key], want[key], places=9, msg=key)

        # compare says so when it loads it, and prints the drift line.
        c = run("compare", "--trace", self.trace, "--model", out, "--policies", "lru,learned",
                "--eval-from", "0.8")
        self.assertEqual(c.returncode, 0, c.stderr)
        unfit = [l for l in c.stderr.splitlines() if "is marked unfit" in l]
        self.assertEqual(len(unfit), 1, c.stderr)
        drift = [l for l in c.stderr.splitlines() if "traffic drift" in l]
        self.assertEqual(len(drift), 1, c.stderr)
        self.assertIn("block_size 512 / 512 tokens (x1.00)", drift[0])
        # Another block size is refused before the replay, whatever the ratios
        # (model_fit_test checks the refusals of compare and serve in full).
        small = os.path.join(self.work.name, "chat256.jsonl")
        gen = run("gen", "--kind", "chat", "--requests", "300", "--seed", "4", "--block-size",
                  "256", "--out", small)
        self.assertEqual(gen.returncode, 0, gen.stderr)
        c = run("compare", "--trace", small, "--model", out, "--policies", "lru",
                "--block-size", "256")
        self.assertEqual(c.returncode, 1, c.stderr)
        self.assertIn("trained on 512-token blocks but the trace is read as 256-token blocks",
                      c.stderr)
        self.assertEqual(c.stdout, "")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
