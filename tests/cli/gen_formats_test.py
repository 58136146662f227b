"""`kvlearn gen --format`: the same seed written in Mooncake's and in Bailian's
shape holds the same requests, so `compare` reads both to the same rows. And a
Bailian trace replays with compare, train and plan at its format's 16-token
blocks without --block-size; a model trained on it is refused on a Mooncake
trace read at 512.

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

    def compare_rows(self, path, *flags):
        r = run(["compare", "--trace", path, "--pool-fraction", "0.1", "--policies", "lru,gdsf",
                 "--format", "json"] + list(flags))
        self.assertEqual(r.returncode, 0, r.stderr)
        return {row["policy"]: (row["cost_seconds"], row["block_hit_ratio"])
                for row in json.loads(r.stdout)["results"]}

    def test_both_shapes_of_one_seed_compare_alike(self):
        mooncake = self.gen("m.jsonl", "--block-size", "16")
        bailian = self.gen("b.jsonl", "--format", "bailian")
        # The Bailian file at its format's block size, without --block-size.
        want = self.compare_rows(mooncake, "--block-size", "16")
        self.assertEqual(self.compare_rows(bailian), want)
        self.assertEqual(self.compare_rows(bailian, "--trace-format", "bailian"), want)
        # Read at Mooncake's 512, its 16-token ids do not fit the prompts.
        r = run(["compare", "--trace", bailian, "--block-size", "512", "--policies", "lru"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(bailian + ":1: field 'hash_ids': expected", r.stderr)

    def test_a_named_format_that_is_wrong_names_file_line_and_field(self):
        bailian = self.gen("b.jsonl", "--format", "bailian")
        r = run(["compare", "--trace", bailian, "--trace-format", "mooncake", "--policies", "lru"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(bailian + ":1: field 'timestamp'", r.stderr)
        r = run(["compare", "--trace", bailian, "--trace-format", "csv"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--trace-format", r.stderr)

    def test_a_bailian_trace_trains_and_plans_at_16_token_blocks(self):
        path = os.path.join(self.work, "b.jsonl")
        r = run(["gen", "--kind", "chat", "--requests", "600", "--seed", "9", "--format",
                 "bailian", "--out", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        model = os.path.join(self.work, "b.pt")
        r = run(["train", "--trace", path, "--out", model, "--epochs", "2", "--horizons",
                 "15,60", "--force", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(model))
        # The model records the blocks it was trained on: the format's 16.
        r = run(["compare", "--trace", path, "--model", model, "--policies", "lru,learned-model",
                 "--format", "json", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual({row["policy"] for row in json.loads(r.stdout)["results"]},
                         {"lru", "learned-model"})
        r = run(["plan", "--trace", path, "--model", model, "--sizes", "2", "--policies",
                 "lru,learned-model", "--format", "json", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for size in json.loads(r.stdout)["sizes"]:
            self.assertEqual(size["comparison"]["requests"], 600)
        # A Mooncake trace is read at 512-token blocks: the 16-token model is
        # refused before the trace is replayed, by compare and by plan alike.
        mooncake = self.gen("m.jsonl")
        for command in ("compare", "plan"):
            r = run([command, "--trace", mooncake, "--model", model, "--policies",
                     "lru,learned-model", "--quiet"])
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("trained on 16-token blocks but the trace is read as 512-token blocks",
                          r.stderr)

    def test_an_unknown_format_is_refused_naming_the_choices(self):
        r = run(["gen", "--format", "csv", "--out", os.path.join(self.work, "x")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--format", r.stderr)
        self.assertIn("bailian", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
