#!/usr/bin/python3
"""Checks scripts/check_doc_commands.py on a planted tree: which blocks it takes
(sh, bash, console; not docs/history/), the problems it reports (an unlabelled block
that reads like a command, a table cell's `\\|`, a marker without a reason, an unknown
marker, console output with no comparison rule), the markers (skip, slow, output with
a tolerance or machine-dependent), that a doc's blocks share one scratch directory that
sees the repository's folders and the build's programs, and that a failing block or
output outside the tolerance fails the run. Run by ctest; standard library only (the
planted build's `kvlearn` is a shell script)."""
import importlib.util
import io
import os
import pathlib
import stat
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_doc_commands",
                                              ROOT / "scripts/check_doc_commands.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

README = """# Planted
| what | command |
| --- | --- |
| bench | `build/bench/b --filter='(a\\|b)'` |
| a flag | `--nodes N\\|auto` |

```sh
kvlearn hello > greeting.txt
```

```text
kvlearn synopsis [--flag]
```

```
kvlearn unlabelled
```
"""

DOC_A = """# A
```bash
cat greeting.txt 2>/dev/null && echo "README's file leaked"; cat data/input.txt > copy.txt
```

<!-- doc-test: skip: needs a GPU -->
```sh
exit 1
```

<!-- doc-test: slow: an hour -->
```sh
echo slow-ran > slow.txt
```

<!-- doc-test: output: tolerance 5% -->
```sh
cat copy.txt; echo "took 10.4 s"
```

```text
input 100 rows
took 10 s
```

<!-- doc-test: output: machine-dependent -->
```console
$ echo "wall 99.99 s, rate 7 M/s"; \\
  echo done
wall 1.5 s, rate 3 M/s
done
```
"""

DOC_B = """# B
<!-- doc-test: output: tolerance 1% -->
```sh
echo "cost 110"
```

```text
cost 100
```

<!-- doc-test: skip: -->
```sh
true
```

<!-- doc-test: maybe -->
```console
$ false
some output
```
"""

HISTORY = """```sh
exit 1
```
"""


def plant(tree):
    (tree / "docs/history").mkdir(parents=True)
    (tree / "data").mkdir()
    (tree / "data/input.txt").write_text("input 102 rows\n")
    (tree / "README.md").write_text(README)
    (tree / "docs/a.md").write_text(DOC_A)
    (tree / "docs/b.md").write_text(DOC_B)
    (tree / "docs/history/old.md").write_text(HISTORY)
    kvlearn = tree / "build/cli/kvlearn"
    kvlearn.parent.mkdir(parents=True)
    kvlearn.write_text("#!/bin/sh\necho \"kvlearn says $1\"\n")
    kvlearn.chmod(kvlearn.stat().st_mode | stat.S_IXUSR)


class CheckDocCommandsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.tree = pathlib.Path(self.tmp.name)
        plant(self.tree)

    def tearDown(self):
        self.tmp.cleanup()

    def run_all(self, slow):
        out = io.StringIO()
        bad = check.run(str(self.tree), str(self.tree / "build"), slow, out=out)
        return bad, out.getvalue().splitlines()

    def test_blocks_taken_and_markers_read(self):
        blocks, _ = check.collect(str(self.tree))
        self.assertEqual([(b.path, b.line, b.label) for b in blocks],
                         [("README.md", 7, "sh"), ("docs/a.md", 2, "bash"),
                          ("docs/a.md", 7, "sh"), ("docs/a.md", 12, "sh"),
                          ("docs/a.md", 17, "sh"), ("docs/a.md", 27, "console"),
                          ("docs/b.md", 3, "sh"), ("docs/b.md", 12, "sh"),
                          ("docs/b.md", 17, "console")])
        a = {b.line: b for b in blocks if b.path == "docs/a.md"}
        self.assertEqual(a[7].skip, "needs a GPU")
        self.assertEqual(a[12].slow, "an hour")
        self.assertEqual(a[17].output, "tolerance 5%")
        self.assertEqual(a[17].expected, "input 100 rows\ntook 10 s\n")
        self.assertEqual(a[27].commands(), 'echo "wall 99.99 s, rate 7 M/s"; \\\n  echo done\n')
        self.assertEqual(a[27].expected, "wall 1.5 s, rate 3 M/s\ndone\n")

    def test_problems_name_file_line_and_fix(self):
        _, problems = check.collect(str(self.tree))
        self.assertEqual([p.split(": ")[0] for p in problems],
                         ["README.md:4", "README.md:15", "docs/b.md:11", "docs/b.md:16",
                          "docs/b.md:17"])
        self.assertIn("own ```sh block", problems[0])
        self.assertIn("label it ```sh", problems[1])
        self.assertIn("needs a reason", problems[2])
        self.assertIn("unknown doc-test marker 'maybe'", problems[3])
        self.assertIn("say how to compare it", problems[4])

    def test_runs_in_order_in_one_scratch_per_doc(self):
        bad, lines = self.run_all(slow=False)
        by_place = {l.split(": ")[0]: l for l in lines if not l.startswith("problem")}
        self.assertIn(": ok", by_place["README.md:7"])   # kvlearn on PATH, wrote its file
        self.assertIn(": ok", by_place["docs/a.md:2"])   # data/ seen, README's file not
        self.assertIn("skipped: needs a GPU", by_place["docs/a.md:7"])
        self.assertIn("slow, not run", by_place["docs/a.md:12"])
        self.assertIn(": ok", by_place["docs/a.md:17"])  # 102 within 5% of 100, 10.4 of 10
        self.assertIn(": ok", by_place["docs/a.md:27"])  # numbers differ, words agree
        self.assertIn("FAIL", by_place["docs/b.md:3"])   # 110 is not within 1% of 100
        self.assertIn("no line matches expected:", by_place["docs/b.md:3"])
        self.assertIn("FAIL", by_place["docs/b.md:17"])  # exit status 1
        self.assertIn("exit status 1", by_place["docs/b.md:17"])
        self.assertEqual(bad, 2 + 5)  # two failed blocks, five problems

    def test_slow_runs_slow_blocks(self):
        _, lines = self.run_all(slow=True)
        self.assertTrue(any(l.startswith("docs/a.md:12: ok") for l in lines), lines)

    def test_numbers_within_tolerance_or_half_a_printed_unit(self):
        match = check.line_matches
        self.assertTrue(match("took 10 s", "took 10.4 s", "tolerance 0%"))   # half of 1
        self.assertFalse(match("took 10.0 s", "took 10.4 s", "tolerance 0%"))
        self.assertTrue(match("took 10.0 s", "took 10.4 s", "tolerance 5%"))
        self.assertFalse(match("took 10 s", "took 10 ms", "machine-dependent"))
        self.assertFalse(match("a 1 b 2", "a 1 b", "machine-dependent"))
        self.assertTrue(match("a   1  b", "a 7 b", "machine-dependent"))

    def test_a_server_left_running_is_ended_with_its_block(self):
        # gone, or a zombie its new parent has not reaped yet
        (self.tree / "docs/a.md").write_text("```sh\nsleep 1000 &\necho $! > pid\n```\n"
                                             "```sh\nstate=$(cut -d' ' -f3 /proc/$(cat pid)/stat 2>/dev/null || echo gone)\n"
                                             "[ \"$state\" = gone ] || [ \"$state\" = Z ]\n```\n")
        (self.tree / "docs/b.md").unlink()
        (self.tree / "README.md").write_text("# R\n")
        bad, lines = self.run_all(slow=False)
        self.assertEqual(bad, 0, lines)

    def test_the_real_docs_have_no_problem(self):
        _, problems = check.collect(str(ROOT))
        self.assertEqual(problems, [], "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
