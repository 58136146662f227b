#!/usr/bin/python3
"""Checks scripts/check_guarantees.py on a planted document and test list: a
row backed by a GoogleTest name, a parameterised one, a `...` continuation,
a test binary, a Python test or a CI fuzzer passes; a row naming only a
bench, a stale name, a disabled test or a fuzzer CI does not run is
reported, each on its line; tables without a "proved by" or "test" column
are not read. Run by ctest; standard library only."""
import importlib.util
import pathlib
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_guarantees",
                                              ROOT / "scripts/check_guarantees.py")
check_guarantees = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_guarantees)

DOC = """# Planted

| promise | proved by |
| --- | --- |
| plain | `tests/a/a_test.cc` `ATest.Works` |
| continued | `ATest.Works`, `...AlsoWorks`, `.AlsoWorks` |
| parameterised | `Every/PTest.Holds/*`, `PTest.Holds/{lru,gdsf}` |
| a binary | `tests/a/a_test.cc` |
| a script | `tests/cli/b_test.py` (ctest `b_test`) |
| a fuzzer | fuzzer `fuzz/x_fuzzer.cc` |
| a bench only | `bench/serve_memory.cc`, `--log-max-bytes`, `kvlearn_nodes` |
| stale | `ATest.Gone` |
| disabled | `ATest.Skipped` |
| unrun fuzzer | `fuzz/y_fuzzer.cc` |
| glob | `ATest.*Works` |

| who | may |
| --- | --- |
| anyone | nothing, and no test named |
"""

TESTS = {
    "ATest.Works": {"command": ["/b/tests/a/a_test"], "disabled": False},
    "ATest.AlsoWorks": {"command": ["/b/tests/a/a_test"], "disabled": False},
    "ATest.Skipped": {"command": ["/b/tests/a/a_test"], "disabled": True},
    'Every/PTest.Holds/lru  # GetParam() = "lru"': {"command": ["/b/p"], "disabled": False},
    'Every/PTest.Holds/gdsf  # GetParam() = "gdsf"': {"command": ["/b/p"], "disabled": False},
    "b_test": {"command": ["/usr/bin/python3", "/src/tests/cli/b_test.py"], "disabled": False},
}


class CheckGuaranteesTest(unittest.TestCase):
    def test_a_planted_document_shows_exactly_its_unbacked_rows(self):
        problems = check_guarantees.check(DOC, TESTS, {"x_fuzzer"})
        lines = DOC.splitlines()
        reported = {lines[line - 1].split("|")[1].strip() for line, _ in problems}
        self.assertEqual(reported, {"a bench only", "stale", "disabled", "unrun fuzzer"})
        text = "\n".join(p for _, p in problems)
        self.assertIn("ATest.Gone: no such test", text)
        self.assertIn("ATest.Skipped: disabled", text)
        self.assertIn("fuzz/y_fuzzer.cc: not a fuzzer the CI fuzz stage runs", text)
        self.assertIn("names no test that ctest runs", text)

    def test_a_parameter_outside_the_list_is_stale(self):
        problems = check_guarantees.check(
            "| promise | test |\n| --- | --- |\n| p | `PTest.Holds/{lru,arc}` |\n", TESTS, set())
        self.assertEqual([p for _, p in problems], ["PTest.Holds/arc: no such test in ctest's list"])

    def test_the_fuzz_stage_list_is_read_from_fuzz_sh(self):
        fuzzers = check_guarantees.ci_fuzzers(str(ROOT))
        self.assertIn("sidecar_handlers_fuzzer", fuzzers)
        self.assertIn("auth_metadata_fuzzer", fuzzers)


if __name__ == "__main__":
    unittest.main()
