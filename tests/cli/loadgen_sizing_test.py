"""`kvlearn loadgen` runs, and reports, the prefill instances `compare` sizes.

It used to print "cost model ; 0 prefill instances" (and "prefill_nodes": 0 in
JSON) while its TTFT accounting ran on the hardware profile's 16. On the same
trace and pool, with one node (the pool compare replays), loadgen against a real
sidecar on 127.0.0.1 must now report compare's cost model and instance count,
and its LRU row must carry compare's utilisation and TTFT, which depend on that
count; a fixed --prefill-nodes is used as given by both.

usage: loadgen_sizing_test.py PATH_TO_KVLEARN SAMPLE_TRACE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from serve_support import head_trace, start_serve

KVLEARN, SAMPLE = sys.argv[1], sys.argv[2]


class LoadgenSizingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_loadgen_sizing_")
        cls.trace = head_trace(SAMPLE, os.path.join(cls.work, "head.jsonl"), 300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def both(self, data_dir, extra):
        _, port = start_serve(self, KVLEARN, os.path.join(self.work, data_dir))
        flags = ["--trace", self.trace, "--pool-fraction", "0.05", "--format", "json"] + extra
        loadgen = subprocess.run([KVLEARN, "loadgen", "--target", f"127.0.0.1:{port}"] + flags,
                                 capture_output=True, text=True, check=True)
        compare = subprocess.run([KVLEARN, "compare", "--policies", "lru"] + flags,
                                 capture_output=True, text=True, check=True)
        return json.loads(loadgen.stdout), json.loads(compare.stdout), loadgen.stderr

    def assert_same_accounting(self, lg, cmp):
        for key in ("cost_model", "prefill_nodes", "prefill_nodes_auto", "pool_bytes"):
            self.assertEqual(lg[key], cmp[key], key)
        lg_row, cmp_row = lg["results"][0], cmp["results"][0]
        for key in ("block_hit_ratio", "utilization", "ttft_mean_ms", "ttft_p95_ms",
                    "cost_seconds"):
            self.assertAlmostEqual(lg_row[key], cmp_row[key], places=6, msg=key)

    def test_auto_sizes_as_compare_does(self):
        lg, cmp, stderr = self.both("auto", [])
        self.assertEqual(cmp["cost_model"], "flops")
        self.assertTrue(cmp["prefill_nodes_auto"])
        # Sized, not the a100 profile's 16 (the 300 requests keep far fewer busy).
        self.assertLess(cmp["prefill_nodes"], 16)
        self.assertGreater(cmp["prefill_nodes"], 0)
        self.assert_same_accounting(lg, cmp)
        self.assertIn(f"prefill nodes auto: {cmp['prefill_nodes']} ", stderr)

    def test_a_given_count_is_used_by_both(self):
        lg, cmp, _ = self.both("fixed", ["--prefill-nodes", "3"])
        self.assertEqual(cmp["prefill_nodes"], 3)
        self.assertFalse(cmp["prefill_nodes_auto"])
        self.assert_same_accounting(lg, cmp)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
