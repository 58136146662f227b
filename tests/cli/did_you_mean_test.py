"""Typos on the command line get the fix named, and --version says what was built.

CLI11 alone answered `kvlearn comapre` with "A subcommand is required" and
`--pool-fration 0.1` with "The following arguments were not expected".

usage: did_you_mean_test.py PATH_TO_KVLEARN
"""
import re
import subprocess
import sys
import unittest

KVLEARN = sys.argv.pop(1)


def run(*args):
    return subprocess.run([KVLEARN, *args], capture_output=True, text=True, timeout=120)


class DidYouMeanTest(unittest.TestCase):
    def test_a_misspelt_command_names_the_closest_one(self):
        r = run("comapre", "--trace", "x.jsonl")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unknown command 'comapre'; did you mean 'compare'?", r.stderr)

    def test_a_word_far_from_every_command_gets_the_list_not_a_guess(self):
        r = run("frobnicate")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertNotIn("did you mean", r.stderr)
        for command in ("compare", "gen", "train", "serve", "loadgen", "export-log"):
            self.assertIn(command, r.stderr)

    def test_a_misspelt_flag_names_the_flag_of_that_command(self):
        r = run("compare", "--trace", "x.jsonl", "--pool-fration", "0.1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("kvlearn compare: unknown flag --pool-fration: did you mean --pool-fraction?",
                      r.stderr)
        r = run("gen", "--kind=chat", "--sed=3", "--out", "x.jsonl")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("did you mean --seed?", r.stderr)

    def test_an_unknown_flag_far_from_any_keeps_the_parsers_message(self):
        r = run("compare", "--trace", "x.jsonl", "--zzzzzzzzzzzz", "1")
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("did you mean", r.stderr)
        self.assertIn("--zzzzzzzzzzzz", r.stderr + r.stdout)

    def test_help_still_succeeds(self):
        r = run("compare", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--pool-fraction", r.stdout)

    def test_version_names_the_commit_and_build_type(self):
        r = run("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        # git describe (a hash, a tag, or "unknown" outside a checkout), then the build type.
        self.assertRegex(r.stdout.strip(), r"^\S+ \((Release|Debug|RelWithDebInfo|MinSizeRel|no build type)\)$")


if __name__ == "__main__":
    unittest.main()
