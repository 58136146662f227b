"""`kvlearn plan` against `kvlearn compare` on a generated trace.

The plan replays every policy at a sweep of pools; at any pool its rows must be
compare's rows there (same trace, cost model and prefill instances): cost, hits,
transfers and TTFT, everything but the machine-dependent replay speed. Its
files (--out-dir) hold what stdout printed, and its refusals name the flag.

usage: plan_test.py PATH_TO_KVLEARN
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

KVLEARN = sys.argv[1]


def run(args):
    return subprocess.run([KVLEARN] + args, capture_output=True, text=True)


def rows_by_policy(comparison):
    return {r["policy"]: r for r in comparison["results"]}


class PlanTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_plan_")
        cls.trace = os.path.join(cls.work, "chat.jsonl")
        gen = run(["gen", "--kind", "chat", "--requests", "400", "--seed", "5",
                   "--out", cls.trace])
        assert gen.returncode == 0, gen.stderr
        cls.out_dir = os.path.join(cls.work, "plan")
        cls.plan_run = run(["plan", "--trace", cls.trace, "--sizes", "4", "--pool-fraction",
                            "0.07", "--eval-from", "0.2", "--format", "json", "--out-dir",
                            cls.out_dir, "--quiet"])
        assert cls.plan_run.returncode == 0, cls.plan_run.stderr
        cls.plan = json.loads(cls.plan_run.stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def size_at(self, fraction):
        sizes = [s for s in self.plan["sizes"] if s["pool_fraction"] == fraction]
        self.assertEqual(len(sizes), 1, [s["pool_fraction"] for s in self.plan["sizes"]])
        return sizes[0]

    def assert_rows_equal(self, planned, compared):
        self.assertEqual(sorted(planned), sorted(compared))
        for policy, want in compared.items():
            got = planned[policy]
            for field, value in want.items():
                if field == "accesses_per_second":
                    continue  # replay speed: the machine's, not the policy's
                self.assertEqual(got[field], value, f"{policy} {field}")

    def test_the_sweep_holds_the_users_pool_and_both_ends(self):
        fractions = [s["pool_fraction"] for s in self.plan["sizes"]]
        self.assertEqual(fractions, sorted(fractions))
        self.assertEqual(fractions[0], 0.01)
        self.assertEqual(fractions[-1], 1)
        self.assertIn(0.07, fractions)
        self.assertEqual(len(fractions), 5)  # 4 log-spaced + --pool-fraction

    def test_the_users_pool_is_compares_run_at_that_fraction(self):
        # Same flags, auto prefill instances: compare sizes them at its pool,
        # plan at --pool-fraction.
        compare = run(["compare", "--trace", self.trace, "--pool-fraction", "0.07",
                       "--eval-from", "0.2", "--format", "json", "--quiet"])
        self.assertEqual(compare.returncode, 0, compare.stderr)
        want = json.loads(compare.stdout)
        got = self.size_at(0.07)["comparison"]
        self.assertEqual(got["pool_bytes"], want["pool_bytes"])
        self.assertEqual(got["prefill_nodes"], want["prefill_nodes"])
        self.assert_rows_equal(rows_by_policy(got), rows_by_policy(want))

    def test_every_other_pool_is_compares_run_on_the_plans_cluster(self):
        nodes = str(self.plan["prefill_nodes"])
        for size in self.plan["sizes"]:
            with self.subTest(pool_fraction=size["pool_fraction"]):
                compare = run(["compare", "--trace", self.trace, "--pool-fraction",
                               repr(size["pool_fraction"]), "--eval-from", "0.2",
                               "--prefill-nodes", nodes, "--format", "json", "--quiet"])
                self.assertEqual(compare.returncode, 0, compare.stderr)
                want = json.loads(compare.stdout)
                self.assertEqual(size["pool_bytes"], want["pool_bytes"])
                self.assert_rows_equal(rows_by_policy(size["comparison"]),
                                       rows_by_policy(want))

    def test_answers_follow_from_the_rows(self):
        largest = rows_by_policy(self.plan["sizes"][-1]["comparison"])
        self.assertEqual(self.plan["no_pool_cost_seconds"], largest["no-cache"]["cost_seconds"])
        self.assertEqual(self.plan["full_pool_cost_seconds"], largest["lru"]["cost_seconds"])
        saving = self.plan["full_pool_saving_seconds"]
        self.assertGreater(saving, 0)
        for t in self.plan["target_pools"]:
            costs = [rows_by_policy(s["comparison"])[t["policy"]]["cost_seconds"]
                     for s in self.plan["sizes"]]
            reached = [s["pool_fraction"] for s, c in zip(self.plan["sizes"], costs)
                       if self.plan["no_pool_cost_seconds"] - c >= 0.9 * saving]
            self.assertEqual(t["pool_fraction"], reached[0] if reached else None, t["policy"])
        users = rows_by_policy(self.size_at(0.07)["comparison"])
        window = users["lru"]["window_seconds"]
        for s in self.plan["savings_vs_lru"]:
            saved = users["lru"]["cost_seconds"] - users[s["policy"]]["cost_seconds"]
            self.assertAlmostEqual(s["gpu_hours_per_hour"], saved / window)
            self.assertIsNone(s["money_per_hour"])  # no --gpu-hour-price

    def test_no_row_is_below_the_lower_bound_and_the_shares_follow(self):
        for size in self.plan["sizes"]:
            bound = size["cost_lower_bound_seconds"]
            self.assertIsNotNone(bound)
            for policy, row in rows_by_policy(size["comparison"]).items():
                self.assertGreaterEqual(row["cost_seconds"], bound * (1 - 1e-12),
                                        f"{policy} at {size['pool_fraction']}")
        users = rows_by_policy(self.size_at(0.07)["comparison"])
        bound = self.size_at(0.07)["cost_lower_bound_seconds"]
        self.assertEqual(self.plan["cost_lower_bound_seconds"], bound)
        lru = users["lru"]["cost_seconds"]
        shares = {s["policy"]: s for s in self.plan["bound_gap_closed"]}
        self.assertEqual(set(shares), set(users) - {"lru", "no-cache"})
        for policy, s in shares.items():
            self.assertAlmostEqual(s["share"], (lru - users[policy]["cost_seconds"]) / (lru - bound))
            self.assertAlmostEqual(
                s["belady_share"],
                (lru - users[policy]["cost_seconds"]) / (lru - users["belady"]["cost_seconds"]))
            self.assertLessEqual(s["share"], 1 + 1e-12, policy)

    def test_out_dir_holds_what_stdout_printed(self):
        with open(os.path.join(self.out_dir, "plan.json")) as f:
            self.assertEqual(json.load(f), self.plan)
        with open(os.path.join(self.out_dir, "plan.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), len(self.plan["sizes"]) * len(self.plan["policies"]))
        self.assertEqual({r["policy"] for r in rows}, set(self.plan["policies"]))
        bounds = {s["pool_fraction"]: s["cost_lower_bound_seconds"] for s in self.plan["sizes"]}
        for r in rows:
            self.assertAlmostEqual(float(r["cost_lower_bound_seconds"]),
                                   bounds[float(r["pool_fraction"])])

    def test_table_prices_the_savings_with_a_gpu_hour_price(self):
        table = run(["plan", "--trace", self.trace, "--sizes", "3", "--policies", "lru,belady",
                     "--gpu-hour-price", "2.5", "--quiet"])
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("belady*", table.stdout)
        self.assertIn("no-cache", table.stdout)  # always run: the no-pool baseline
        self.assertIn("at 2.5 per GPU-hour", table.stdout)
        self.assertIn(" per h\n", table.stdout)
        self.assertIn("\n>", table.stdout)  # the row of --pool-fraction

    def test_a_bailian_trace_plans_at_its_16_token_blocks(self):
        # The same requests in Bailian's shape (seconds, chat ids) plan as the
        # Mooncake file does with --block-size 16.
        mooncake = os.path.join(self.work, "chat16.jsonl")
        gen = run(["gen", "--kind", "chat", "--requests", "150", "--seed", "2", "--block-size",
                   "16", "--out", mooncake])
        self.assertEqual(gen.returncode, 0, gen.stderr)
        bailian = os.path.join(self.work, "bailian.jsonl")
        with open(mooncake) as f, open(bailian, "w") as out:
            for i, line in enumerate(f):
                r = json.loads(line)
                out.write(json.dumps({
                    "chat_id": i, "parent_chat_id": -1, "timestamp": r["timestamp"] / 1000,
                    "input_length": r["input_length"], "output_length": r["output_length"],
                    "type": "text", "turn": 1, "hash_ids": r["hash_ids"]}) + "\n")
        flags = ["--sizes", "3", "--policies", "lru,gdsf,belady", "--format", "json", "--quiet"]
        a = run(["plan", "--trace", bailian] + flags)
        b = run(["plan", "--trace", mooncake, "--block-size", "16"] + flags)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(b.returncode, 0, b.stderr)
        got, want = json.loads(a.stdout), json.loads(b.stdout)
        self.assertEqual(got["distinct_block_bytes"], want["distinct_block_bytes"])
        for x, y in zip(got["sizes"], want["sizes"]):
            self.assertEqual(x["pool_bytes"], y["pool_bytes"])
            self.assert_rows_equal(rows_by_policy(x["comparison"]),
                                   rows_by_policy(y["comparison"]))

    def test_sample_of_rate_one_is_the_whole_run(self):
        # Rate 1 keeps every request, warms nothing and scales by 1: the
        # sampling's mapping of pools and costs must then be the identity.
        r = run(["plan", "--trace", self.trace, "--sizes", "4", "--pool-fraction", "0.07",
                 "--eval-from", "0.2", "--format", "json", "--quiet", "--sample", "1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        sampled = json.loads(r.stdout)
        self.assertEqual(sampled["sample"]["kept_requests"], 400)
        self.assertEqual(sampled["sample"]["warmup_requests"], 0)
        self.assertIsNone(self.plan["sample"])
        self.assertEqual(sampled["distinct_block_bytes"], self.plan["distinct_block_bytes"])
        for got, want in zip(sampled["sizes"], self.plan["sizes"]):
            self.assertEqual(got["pool_bytes"], want["pool_bytes"])
            self.assert_rows_equal(rows_by_policy(got["comparison"]),
                                   rows_by_policy(want["comparison"]))

    def test_a_sample_reads_as_the_whole_trace(self):
        r = run(["plan", "--trace", self.trace, "--sizes", "4", "--format", "json", "--quiet",
                 "--sample", "0.5", "--sample-salt", "3"])
        self.assertEqual(r.returncode, 0, r.stderr)
        sampled = json.loads(r.stdout)
        s = sampled["sample"]
        self.assertLess(s["kept_requests"], 400)
        self.assertGreater(s["kept_requests"], 0)
        # Header and pools are the whole trace's; rows are estimates of it.
        self.assertEqual(sampled["requests"], 400)
        self.assertEqual(sampled["distinct_block_bytes"], self.plan["distinct_block_bytes"])
        self.assertEqual([x["pool_bytes"] for x in sampled["sizes"]],
                         [int(x["pool_fraction"] * sampled["distinct_block_bytes"])
                          for x in sampled["sizes"]])
        table = run(["plan", "--trace", self.trace, "--sizes", "4", "--quiet", "--sample", "0.5",
                     "--sample-salt", "3"])
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("sampled at rate 0.5", table.stdout)

    def test_refusals_name_the_flag(self):
        cases = [
            (["--min-fraction", "0.5", "--max-fraction", "0.1"],
             "--min-fraction 0.5 is above --max-fraction 0.1"),
            (["--pool-fraction", "0.001"], "--pool-fraction 0.001 is outside the sweep"),
            (["--policies", "learned-model"], "needs a trained model: add --model FILE"),
            (["--policies", "lru,bogus"], "--policies"),
            (["--target", "1.5"], "--target"),
            (["--sample", "1.5"], "--sample"),
            (["--sample", "1e-9"], "--sample 1e-09 kept none of the trace's 400 requests"),
        ]
        for extra, words in cases:
            with self.subTest(extra=extra):
                r = run(["plan", "--trace", self.trace, "--quiet"] + extra)
                self.assertNotEqual(r.returncode, 0, r.stdout)
                self.assertIn(words, r.stderr)
        missing = os.path.join(self.work, "missing.jsonl")
        r = run(["plan", "--trace", missing, "--quiet"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(missing, r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
