#!/usr/bin/python3
"""Checks scripts/continuation_stats.py on traces small enough to work out by
hand. Run by ctest; standard library only."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "continuation_stats.py")
spec = importlib.util.spec_from_file_location("continuation_stats", SCRIPT)
stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stats)


def run_on_text(text, *flags):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name, *flags], capture_output=True,
                              text=True)
    finally:
        os.unlink(f.name)


def run(records, *flags):
    return run_on_text("".join(
        json.dumps({"timestamp": t, "input_length": length, "hash_ids": ids}) + "\n"
        for t, length, ids in records), *flags)


def turn_rows(stdout):
    """{turn label: (requests, new blocks %, continued %)} from the turn table."""
    rows, in_table = {}, False
    for line in stdout.splitlines():
        if line.split()[:1] == ["turn"]:
            in_table = True
            continue
        if in_table and not line.strip():
            break
        if in_table:
            label, n, new, cont = line.split()
            rows[label] = (int(n), float(new), float(cont))
    return rows


class AucTest(unittest.TestCase):
    def test_perfect_reversed_and_tied_rankings(self):
        self.assertEqual(stats.auc([1, 2, 3], [False, False, True]), 1.0)
        self.assertEqual(stats.auc([3, 2, 1], [False, False, True]), 0.0)
        # One positive tied with one of two negatives, above the other: (1 + 0.5) / 2.
        self.assertEqual(stats.auc([1, 2, 2], [False, False, True]), 0.75)

    def test_undefined_without_both_classes_or_with_a_constant_feature(self):
        self.assertIsNone(stats.auc([1, 2], [True, True]))
        self.assertIsNone(stats.auc([5, 5, 5], [True, False, True]))


class TurnTableTest(unittest.TestCase):
    # Block 0 is a system prompt every request starts with.
    #   A t=0     [0 1 2]   turn 1, adds full block 1 (2 is its partial last block).
    #   B t=10 s  [0 1 7 8] repeats A's full blocks 0 1: A's next turn (turn 2),
    #                       10 s later, so A is continued.
    #   C t=20 s  [0 9]     shares only block 0, which A did not add: turn 1.
    #   D t=400 s [0 1 7 5] repeats B's full blocks 0 1 7: B's next turn (turn 3),
    #                       390 s after B, beyond the default 300 s horizon.
    #   E t=650 s [0 4]     the end. With H = 300 s, A-C are known (start + H <=
    #                       650 s), D (700 s) and E are not.
    # Accesses 3+4+2+4+2 = 15; distinct blocks 0 1 2 7 8 9 5 4 = 8, so 8/15 =
    # 53.3% are first uses; 0, 1 and 7 come back: 3/8 = 37.5%.
    RECORDS = [(0, 1300, [0, 1, 2]), (10_000, 1800, [0, 1, 7, 8]), (20_000, 700, [0, 9]),
               (400_000, 2000, [0, 1, 7, 5]), (650_000, 600, [0, 4])]

    def test_turns_and_continuations(self):
        out = run(self.RECORDS)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("15 block accesses; 53.3% are a block's first use; "
                      "37.5% of blocks are used again", out.stdout)
        self.assertIn("requests with a known outcome: 3", out.stdout)
        # New blocks of the known requests: A 3 (0 1 2), B 2 (7 8), C 1 (9).
        # Turn 1 = A, C (A continued); turn 2 = B (not within 300 s).
        self.assertEqual(turn_rows(out.stdout), {"1": (2, 66.7, 50.0), "2": (1, 33.3, 0.0)})

    def test_longer_horizon_counts_the_late_turn(self):
        # H = 395 s: still A-C known (C: 415 <= 650; D: 795 > 650), and D now
        # continues B within the horizon.
        out = run(self.RECORDS, "--horizon", "395")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(turn_rows(out.stdout), {"1": (2, 66.7, 50.0), "2": (1, 33.3, 100.0)})

    def test_bad_input_is_one_line_naming_the_line(self):
        out = run([(0, 10, [0])])
        self.assertNotEqual(out.returncode, 0)
        bad = run_on_text('{"timestamp": 0, "input_length": 5, "hash_ids": [0]}\n{"timestamp": 1}\n')
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn(":2: not a trace record", bad.stderr)
        self.assertNotIn("Traceback", bad.stderr)


if __name__ == "__main__":
    unittest.main()
