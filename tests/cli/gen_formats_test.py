"""`kvlearn gen --format`: the same seed written in Mooncake's and in Bailian's
shape holds the same requests, so `compare` reads both to the same rows.

usage: gen_formats_test.py PATH_TO_KVLEARN
"""
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


class GenFormatsTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="kvlearn_gen_formats_")

    def tearDown(self):
        shutil.rmtree(self.work)

    def gen(self, name, *flags):
        path = os.path.join(self.work, name)
        r = run(["gen", "--kind", "chat", "--requests", "120", "--seed", "9", "--out", path]
                + list(flags))
        self.assertEqual(r.returncode, 0, r.stderr)
        return path

    def test_bailian_lines_carry_seconds_ids_and_16_token_blocks(self):
        path = self.gen("b.jsonl", "--format", "bailian")
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), 120)
        for i, line in enumerate(lines):
            self.assertEqual(line["chat_id"], i)  # generated requests: their index
            self.assertEqual(line["parent_chat_id"], -1)
            self.assertEqual(line["type"], "text")
            # 16 tokens per block unless --block-size says otherwise.
            self.assertEqual(len(line["hash_ids"]), -(-line["input_length"] // 16))
        self.assertIsInstance(lines[-1]["timestamp"], float)

    def test_both_shapes_of_one_seed_compare_alike(self):
        mooncake = self.gen("m.jsonl", "--block-size", "16")
        bailian = self.gen("b.jsonl", "--format", "bailian")
        rows = []
        for path in (mooncake, bailian):
            r = run(["compare", "--trace", path, "--block-size", "16", "--pool-fraction", "0.1",
                     "--policies", "lru,gdsf", "--format", "json"])
            self.assertEqual(r.returncode, 0, r.stderr)
            rows.append({row["policy"]: (row["cost_seconds"], row["block_hit_ratio"])
                         for row in json.loads(r.stdout)["results"]})
        self.assertEqual(rows[0], rows[1])

    def test_an_unknown_format_is_refused_naming_the_choices(self):
        r = run(["gen", "--format", "csv", "--out", os.path.join(self.work, "x")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--format", r.stderr)
        self.assertIn("bailian", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
