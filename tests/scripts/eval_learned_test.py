#!/usr/bin/python3
"""Checks how scripts/eval_learned.py judges a cell, on result rows made by hand (no replay).
Run by ctest; standard library only."""
import importlib.util
import os
import unittest

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


if __name__ == "__main__":
    unittest.main()
