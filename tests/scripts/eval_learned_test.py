#!/usr/bin/python3
"""Checks how scripts/eval_learned.py judges a cell, on result rows made by hand (no replay),
how --robustness refuses flags that do not apply, and, given the kvlearn binary as the first
argument (as ctest passes it), the robustness grid's rows, summary and exit status on a tiny
grid. Run by ctest; standard library only."""
import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import tempfile
import unittest

# ctest passes the binary; unittest must not see it.
KVLEARN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "eval_learned.py")
spec = importlib.util.spec_from_file_location("eval_learned", SCRIPT)
evaluate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evaluate)


def rows(learned_cost, learned_xfer=80.0, gap=0.5, arc_cost=100.0):
    """A cell's rows: every online baseline at 200 s and 100 bytes except arc, and `learned`."""
    out = {p: {"policy": p, "cost_seconds": 200.0, "transfer_bytes": 100.0,
               "cost_gap_closed": 0.0} for p in evaluate.ONLINE}
    out["arc"]["cost_seconds"] = arc_cost
    out["learned"] = {"policy": "learned", "cost_seconds": learned_cost,
                      "transfer_bytes": learned_xfer, "cost_gap_closed": gap}
    return out


class JudgeTest(unittest.TestCase):
    def test_passes_only_below_every_other_policy_with_no_more_transfer_than_lru(self):
        tested, best, xfer, ok = evaluate.judge(rows(99.0), "learned")
        self.assertEqual(best["policy"], "arc")
        self.assertAlmostEqual(xfer, 0.8)
        self.assertTrue(ok)
        self.assertFalse(evaluate.judge(rows(100.0), "learned")[3])  # a tie is no win
        self.assertFalse(evaluate.judge(rows(99.0, learned_xfer=101.0), "learned")[3])
        self.assertTrue(evaluate.judge(rows(99.0, learned_xfer=100.0), "learned")[3])

    def test_the_tested_policy_is_not_its_own_best_other(self):
        # Judging arc: its rival is the cheapest of the others (200 s), not itself.
        tested, best, _, ok = evaluate.judge(rows(150.0), "arc")
        self.assertEqual(tested["policy"], "arc")
        self.assertNotEqual(best["policy"], "arc")
        self.assertEqual(best["cost_seconds"], 200.0)
        self.assertTrue(ok)


class JudgeOverModelsTest(unittest.TestCase):
    def test_mean_sd_passes_and_largest_transfer_over_models(self):
        # Costs 96, 100, 104: mean 100, sample sd 4; only 96 is below arc's 100.
        runs = [rows(96.0, 80.0, 0.6), rows(100.0, 90.0, 0.4), rows(104.0, 70.0, None)]
        cell = evaluate.judge_over_models(runs, "learned")
        self.assertAlmostEqual(cell["mean"], 100.0)
        self.assertAlmostEqual(cell["sd"], 4.0)
        self.assertEqual(cell["passed"], 1)
        self.assertEqual(cell["models"], 3)
        self.assertAlmostEqual(cell["xfer"], 0.9)
        self.assertAlmostEqual(cell["gap"], 0.5)  # the run without a gap is left out
        self.assertEqual(cell["best"]["policy"], "arc")

    def test_one_model_is_the_single_judgement(self):
        cell = evaluate.judge_over_models([rows(99.0)], "learned")
        self.assertEqual((cell["mean"], cell["sd"], cell["passed"], cell["models"]),
                         (99.0, 0.0, 1, 1))


def cluster_run(ttft):
    """One cluster run's rows: TTFT mean and p95 (ms) per policy; unlisted online ones 50 s."""
    out = {p: {"policy": p, "ttft_mean_ms": 50000.0, "ttft_p95_ms": 50000.0}
           for p in evaluate.ONLINE + ["learned"]}
    for p, ms in ttft.items():
        out[p]["ttft_mean_ms"] = out[p]["ttft_p95_ms"] = ms
    return out


class JudgeClusterFieldTest(unittest.TestCase):
    def test_means_over_runs_and_runs_where_the_tested_policy_is_lowest(self):
        # learned 10, 30, 20 s (mean 20); gdsf 15, 15, 21 (mean 17); lru 25 always.
        runs = [cluster_run({"learned": 10000.0, "gdsf": 15000.0, "lru": 25000.0}),
                cluster_run({"learned": 30000.0, "gdsf": 15000.0, "lru": 25000.0}),
                cluster_run({"learned": 20000.0, "gdsf": 21000.0, "lru": 25000.0})]
        mean, best, best_mean, lowest, excess, se = evaluate.judge_cluster_field(
            runs, "learned", "ttft_mean_ms")
        self.assertAlmostEqual(mean, 20000.0)
        self.assertEqual(best, "gdsf")
        self.assertAlmostEqual(best_mean, 17000.0)
        self.assertEqual(lowest, 2)  # runs 1 and 3
        # Paired with gdsf run by run: 10/15, 30/15 and 20/21 of it, less 1, in percent.
        paired = [100 * (10 / 15 - 1), 100 * (30 / 15 - 1), 100 * (20 / 21 - 1)]
        self.assertAlmostEqual(excess, sum(paired) / 3)
        spread = sum((d - excess) ** 2 for d in paired) / 2  # sample variance
        self.assertAlmostEqual(se, (spread / 3) ** 0.5)

    def test_one_run_has_no_standard_error(self):
        runs = [cluster_run({"learned": 12000.0, "gdsf": 10000.0})]
        judged = evaluate.judge_cluster_field(runs, "learned", "ttft_mean_ms")
        self.assertAlmostEqual(judged[4], 20.0)  # 12 s against 10 s
        self.assertEqual(judged[5], 0.0)

    def test_a_tie_is_not_lowest(self):
        runs = [cluster_run({"learned": 10000.0, "arc": 10000.0})]
        self.assertEqual(evaluate.judge_cluster_field(runs, "learned", "ttft_p95_ms")[3], 0)


def costs(lru, gdsf, belady=50.0, arc=None):
    """A robustness cell's rows: online baselines at 300 s, lru, gdsf (and arc) as given."""
    out = {p: {"policy": p, "cost_seconds": 300.0} for p in evaluate.ONLINE}
    out["lru"]["cost_seconds"] = lru
    out["gdsf"]["cost_seconds"] = gdsf
    if arc is not None:
        out["arc"]["cost_seconds"] = arc
    out["belady"] = {"policy": "belady", "cost_seconds": belady}
    return out


class SafetyTest(unittest.TestCase):
    def test_one_percent_above_the_cheaper_of_lru_and_gdsf(self):
        # gdsf cheaper than lru: the 1% rule against gdsf binds.
        self.assertTrue(evaluate.safety(101.0, 120.0, 100.0)[2])   # exactly 1.01 x gdsf
        self.assertFalse(evaluate.safety(101.1, 120.0, 100.0)[2])  # 1.011 x gdsf
        to_min, to_lru, _ = evaluate.safety(101.0, 120.0, 100.0)
        self.assertAlmostEqual(to_min, 1.01)
        self.assertAlmostEqual(to_lru, 101.0 / 120.0)

    def test_half_a_percent_above_lru(self):
        # lru the cheaper: within 1% of it, but above 0.5%, fails.
        self.assertFalse(evaluate.safety(100.8, 100.0, 120.0)[2])
        self.assertTrue(evaluate.safety(100.5, 100.0, 120.0)[2])
        self.assertTrue(evaluate.safety(90.0, 100.0, 95.0)[2])

    def test_cell_best_other_cheapest_and_gap(self):
        rows = costs(200.0, 190.0, belady=100.0, arc=180.0)
        cell = evaluate.robustness_cell(rows, {"policy": "learned", "cost_seconds": 175.0},
                                        "learned")
        self.assertEqual(cell["best"]["policy"], "arc")
        self.assertTrue(cell["cheapest"])
        self.assertAlmostEqual(cell["gap"], 0.25)  # (200 - 175) / (200 - 100)
        self.assertTrue(cell["safe"])
        # Judging arc itself: its rival is gdsf, and a tie with belady's lru leaves no gap.
        cell = evaluate.robustness_cell(costs(200.0, 190.0, belady=200.0, arc=180.0),
                                        {"policy": "arc", "cost_seconds": 180.0}, "arc")
        self.assertEqual(cell["best"]["policy"], "gdsf")
        self.assertIsNone(cell["gap"])
        cell = evaluate.robustness_cell(rows, {"policy": "learned", "cost_seconds": 180.0},
                                        "learned")
        self.assertFalse(cell["cheapest"])  # a tie with arc is no win


class AblationDiffTest(unittest.TestCase):
    def cell(self, mode, name, lru, gdsf, learned):
        return {"mode": mode, "model": "same-trace", "cell": name, "lru": lru, "gdsf": gdsf,
                "learned": learned}

    def test_bound_is_the_tighter_of_the_two_safety_rules(self):
        self.assertAlmostEqual(evaluate.bound(self.cell("a", "x", 100.0, 120.0, 0)), 100.5)
        self.assertAlmostEqual(evaluate.bound(self.cell("a", "x", 200.0, 190.0, 0)), 191.9)

    def test_mean_change_worst_cell_and_cells_moved(self):
        plain = [self.cell("a", "x 0.1", 100.0, 120.0, 100.0),
                 self.cell("a", "y 0.1", 200.0, 190.0, 180.0)]
        ablated = [self.cell("a", "x 0.1", 100.0, 120.0, 100.3),
                   self.cell("a", "y 0.1", 200.0, 190.0, 180.0)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            evaluate.print_ablation_diff(plain, ablated)
        # (+0.3% + 0) / 2; x is the worst cell in both (100 / 100.5, then 100.3 / 100.5); one
        # cell moved by more than 0.2%, up.
        self.assertIn("mode a: mean cost change +0.15%", out.getvalue())
        self.assertIn("worst cell / bound 0.9950 (same-trace x 0.1) -> 0.9980 (same-trace x 0.1)",
                      out.getvalue())
        self.assertIn("cells moved > 0.2%: 1 up, 0 down of 2", out.getvalue())


def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


class RobustnessArgumentsTest(unittest.TestCase):
    def test_flags_that_do_not_apply_are_refused_before_any_run(self):
        for args, message in [
                (["--robustness", "--held-out"], "--held-out does not apply to --robustness"),
                (["--robustness", "--train-seeds", "3"], "--train-seeds does not apply"),
                (["--robustness", "--cluster"], "--cluster does not apply"),
                (["--robustness", "--kinds", "chat,nope"], "unknown kind 'nope'"),
                (["--robustness", "--modes", "a,d"], "unknown mode 'd'"),
                (["--robustness", "--requests", "5"], "--requests must be at least 10"),
                (["--modes", "a"], "--modes applies to --robustness only"),
                (["--requests", "100"], "--requests applies to --robustness only"),
                (["--seeds", "tuning"], "--seeds applies to --robustness only"),
                (["--ablate", "ledger"], "--ablate applies to --robustness only"),
                (["--held-out", "--kinds", "rag"], "'rag' has no held-out seeds")]:
            with self.subTest(args=args):
                # A binary that does not exist: any run would fail differently.
                r = run_script(*args, "--kvlearn", "/nonexistent/kvlearn",
                               "--work", "/nonexistent/work")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)

    def test_judging_seeds_are_new_and_distinct_from_tuning_seeds(self):
        judging = [s for seeds in evaluate.ROBUSTNESS_SEEDS.values() for s in seeds]
        tuning = [s for seeds in evaluate.TUNING_SEEDS.values() for s in seeds]
        tuning += [s for seeds in evaluate.ROBUSTNESS_TUNING_SEEDS.values() for s in seeds]
        spent = [s for sets in evaluate.HELD_OUT_SEEDS.values() for seeds in sets.values()
                 for s in seeds] + [s for seeds in evaluate.SHAPE_SEEDS.values() for s in seeds]
        self.assertEqual(len(set(judging)), len(judging))
        self.assertFalse(set(judging) & (set(tuning) | set(spent)))
        self.assertFalse(set(tuning) & set(spent))
        # Mode b's chat model is trained on the first chat tuning seed; the tuning grid's chat
        # trace must be another.
        self.assertNotIn(evaluate.TUNING_SEEDS["chat"][0],
                         evaluate.ROBUSTNESS_TUNING_SEEDS["chat"])
        kinds = set(evaluate.ROBUSTNESS_KINDS) - {"sample"}
        self.assertEqual(set(evaluate.ROBUSTNESS_SEEDS), kinds)
        self.assertEqual(set(evaluate.ROBUSTNESS_TUNING_SEEDS), kinds)
        self.assertTrue({"rag", "coder", "shift"} <= set(evaluate.TUNING_SEEDS))


ROW = re.compile(r"^(?P<mode>[abc])\s+(?P<model>\S+)\s+(?P<trace>\S+) (?P<pool>[0-9.]+)\s+"
                 r"(?P<lru>[0-9.]+)\s+(?P<gdsf>[0-9.]+)\s+(?P<best>\S+) (?P<best_cost>[0-9.]+)\s+"
                 r"(?P<learned>[0-9.]+)\s+(?P<to_min>[0-9.]+)\s+(?P<to_lru>[0-9.]+)\s+"
                 r"(?P<gap>-?[0-9.]+|-)\s+(?P<safe>yes|NO)\s+(?P<cheapest>yes|no)$")


@unittest.skipIf(KVLEARN is None, "needs the kvlearn binary as the first argument")
class TinyRobustnessGridTest(unittest.TestCase):
    def test_rows_summary_and_exit_status_agree(self):
        with tempfile.TemporaryDirectory() as work:
            # Tuning seeds: a test must not look at the judging ones.
            r = run_script("--robustness", "--seeds", "tuning", "--kinds", "chat,rag",
                           "--robustness-traces", "1", "--requests", "300",
                           "--pools", "0.1", "--modes", "a,b,c", "--kvlearn", KVLEARN,
                           "--work", work)
            self.assertIn(r.returncode, (0, 1), r.stderr)
            lines = r.stdout.splitlines()
            rows = [m.groupdict() for m in map(ROW.match, lines) if m]
            # Mode a on both traces; b: the sample's model on both generated traces and the
            # chat tuning trace's model on rag only (never a chat model on chat traffic).
            self.assertEqual(sorted((x["mode"], x["model"], x["trace"]) for x in rows
                                    if x["mode"] != "c"),
                             [("a", "same-trace", "chat-202"), ("a", "same-trace", "rag-301"),
                              ("b", "chat-201", "rag-301"), ("b", "sample", "chat-202"),
                              ("b", "sample", "rag-301")])
            for x in rows:
                lru, gdsf, learned = float(x["lru"]), float(x["gdsf"]), float(x["learned"])
                self.assertAlmostEqual(float(x["to_min"]), learned / min(lru, gdsf), delta=2e-3)
                self.assertAlmostEqual(float(x["to_lru"]), learned / lru, delta=2e-3)
                self.assertLessEqual(float(x["best_cost"]), min(lru, gdsf))
                # Costs print to 0.1 s, so a verdict is checked to that rounding.
                if x["cheapest"] == "yes":
                    self.assertLessEqual(learned, float(x["best_cost"]))
                else:
                    self.assertGreaterEqual(learned, float(x["best_cost"]) - 0.1)
            unrunnable = any(line.startswith("c    not yet runnable: ") for line in lines)
            if unrunnable:
                self.assertIn("mode c: not yet runnable", r.stdout)
            else:
                self.assertEqual(sum(x["mode"] == "c" for x in rows), 2)
            # The summary counts the rows' verdicts, and the exit status follows them.
            for mode in "abc":
                judged = [x for x in rows if x["mode"] == mode]
                if judged:
                    safe = sum(x["safe"] == "yes" for x in judged)
                    self.assertIn(f"mode {mode}: safety passed in {safe}/{len(judged)} cells",
                                  r.stdout)
            failed = unrunnable or any(x["safe"] == "NO" for x in rows)
            self.assertEqual(r.returncode, 1 if failed else 0, r.stdout)
            # Traces and models are cached under --work, named by trace and size.
            cached = sorted(os.listdir(work))
            self.assertIn("chat-202-300.jsonl", cached)
            self.assertIn("chat-201-300.pt", cached)
            self.assertIn("sample.pt", cached)
            # An ablation replays the tested policy alone against the cached baselines and
            # compares its cells with the plain run's; an unknown part stops the run.
            r = run_script("--robustness", "--seeds", "tuning", "--kinds", "chat",
                           "--robustness-traces", "1", "--requests", "300", "--pools", "0.1",
                           "--modes", "a", "--kvlearn", KVLEARN, "--work", work,
                           "--ablate", "ledger")
            self.assertIn(r.returncode, (0, 1), r.stderr)
            self.assertIn("vs plain, mode a: mean cost change", r.stdout)
            self.assertIn("robustness-tuning-ledger.json", os.listdir(work))
            r = run_script("--robustness", "--seeds", "tuning", "--kinds", "chat",
                           "--robustness-traces", "1", "--requests", "300", "--pools", "0.1",
                           "--modes", "a", "--kvlearn", KVLEARN, "--work", work,
                           "--ablate", "nope")
            self.assertEqual(r.returncode, 1)
            self.assertIn("unknown part 'nope'", r.stderr)


if __name__ == "__main__":
    unittest.main()
