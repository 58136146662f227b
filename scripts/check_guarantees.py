#!/usr/bin/python3
"""Checks that every promise of docs/guarantees.md is backed by something CI
runs: each row of a table whose last column is "proved by" or "test" must
name at least one test that ctest runs in the build (not disabled) or a
fuzzer that the CI fuzz stage runs (scripts/fuzz.sh's default list), and
every test name it gives must still exist.

    scripts/check_guarantees.py --build BUILD [ROOT]

ROOT is the repository (default: this script's parent folder); BUILD a
configured and built directory, whose tests are listed with
`ctest --show-only=json-v1`. What a row may name, in backticks:
  Suite.Test, Suite.*, Prefix/Suite.Test/*, Suite.Test/{a,b}, ...Test or
  .Test (the previous name's suite): GoogleTest names, matched against
  ctest's list (a parameterised test's prefix and parameter may be left out)
  tests/DIR/NAME.cc     every test of the binary NAME
  tests/DIR/NAME.py     the ctest test that runs that script
  fuzz/NAME_fuzzer.cc   that fuzzer, if the CI fuzz stage runs it
  ctest NAME, or NAME   a ctest test of that name
Anything else (flags, metrics, bench/ programs) backs nothing. Prints one
line per problem, docs/guarantees.md:LINE: what is wrong, and exits 1 if
there is any, 0 otherwise.
"""

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys

PROOF_HEADERS = ("proved by", "test")
CODE_SPAN = re.compile(r"`([^`]+)`")
# A GoogleTest name: [Prefix/]Suite.Test[/Param], globs allowed; a suite
# name ends in "Test" (every suite of this project does), which keeps
# metric names and file names out.
GTEST_REF = re.compile(r"^(?:([\w*]+)/)?(\w*Test)\.([\w*]+)(?:/(.+))?$")
CONTINUATION = re.compile(r"^(?:\.\.\.|\.)([\w*]+)(?:/(.+))?$")
GTEST_NAME = re.compile(r"^(?:(\w+)/)?(\w+)\.(\w+)(?:/(\S+))?")


def split_row(line):
    """The cells of a Markdown table row (pipes inside code spans kept)."""
    cells, cell, in_code = [], "", False
    for c in line.strip().strip("|"):
        if c == "`":
            in_code = not in_code
        if c == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += c
    cells.append(cell.strip())
    return cells


def proof_cells(text):
    """(line number, cell) of the last cell of every row of the tables whose
    last column is headed "proved by" or "test"."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        is_table = (lines[i].startswith("|") and i + 1 < len(lines)
                    and re.match(r"^\|[\s:|-]+\|\s*$", lines[i + 1]))
        if not is_table:
            i += 1
            continue
        header = split_row(lines[i])
        checked = header[-1].lower() in PROOF_HEADERS
        i += 2
        while i < len(lines) and lines[i].startswith("|"):
            if checked:
                out.append((i + 1, split_row(lines[i])[-1]))
            i += 1
    return out


def expand_braces(s):
    """'a/{x,y}' -> ['a/x', 'a/y'] (one level, as the doc writes them)."""
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    return [s[:m.start()] + alt + s[m.end():] for alt in m.group(1).split(",")]


def gtest_matches(prefix, suite, test, param, names):
    """The registered GoogleTest names a reference matches."""
    found = []
    for name in names:
        m = GTEST_NAME.match(name)
        if not m:
            continue
        n_prefix, n_suite, n_test, n_param = m.groups()
        if n_suite != suite or not fnmatch.fnmatchcase(n_test, test):
            continue
        if prefix is not None and not fnmatch.fnmatchcase(n_prefix or "", prefix):
            continue
        if param is not None and not fnmatch.fnmatchcase(n_param or "", param):
            continue
        found.append(name)
    return found


def check_row(cell, tests, fuzzers):
    """Problems of one row's proof cell. `tests`: {name: {"command": [...],
    "disabled": bool}} as ctest lists them; `fuzzers`: those CI runs."""
    problems = []
    running = [name for name, t in tests.items() if not t["disabled"]]
    backed = False
    suite = None
    for span in CODE_SPAN.findall(cell):
        span = span.strip()
        if span.startswith("ctest "):
            span = span[len("ctest "):]
        cont = CONTINUATION.match(span)
        if cont and suite is not None:
            span = f"{suite}.{cont.group(1)}" + (f"/{cont.group(2)}" if cont.group(2) else "")
        gtest = GTEST_REF.match(span)
        if gtest:
            suite = gtest.group(2)
            for ref in expand_braces(span):
                prefix, s, test, param = GTEST_REF.match(ref).groups()
                matched = gtest_matches(prefix, s, test, param, tests)
                live = [n for n in matched if not tests[n]["disabled"]]
                if not matched:
                    problems.append(f"{ref}: no such test in ctest's list")
                elif not live:
                    problems.append(f"{ref}: disabled")
                else:
                    backed = True
            continue
        m = re.fullmatch(r"fuzz/(\w+_fuzzer)\.cc", span)
        if m:
            if m.group(1) in fuzzers:
                backed = True
            else:
                problems.append(f"{span}: not a fuzzer the CI fuzz stage runs (scripts/fuzz.sh)")
            continue
        m = re.fullmatch(r"tests/[\w/]+/(\w+)\.(cc|py)", span)
        if m:
            base, kind = m.groups()
            if kind == "cc":
                runs = [n for n in running
                        if os.path.basename(tests[n]["command"][0]) == base]
            else:
                runs = [n for n in running
                        if any(arg.endswith(span) for arg in tests[n]["command"])]
            if runs:
                backed = True
            elif kind == "py":
                problems.append(f"{span}: ctest runs no test from it (a Python test needing a "
                                "package is registered only where the package is: "
                                "scripts/setup.sh installs it)")
            else:
                problems.append(f"{span}: ctest runs no test from it")
            continue
        if span in tests:
            if tests[span]["disabled"]:
                problems.append(f"{span}: disabled")
            else:
                backed = True
    if not backed and not problems:
        problems.append("names no test that ctest runs and no fuzzer of the CI fuzz stage")
    return problems


def check(text, tests, fuzzers):
    """(line number, problem) of every row of the document."""
    return [(line, p) for line, cell in proof_cells(text) for p in check_row(cell, tests, fuzzers)]


def ctest_tests(build):
    """{name: {"command": [...], "disabled": bool}} of the build's tests."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    tests = {}
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        tests[t["name"]] = {"command": t.get("command", [""]),
                            "disabled": bool(props.get("DISABLED", False))}
    return tests


def ci_fuzzers(root):
    """The fuzzers scripts/fuzz.sh runs when given none (what CI's stage runs)."""
    with open(os.path.join(root, "scripts", "fuzz.sh"), encoding="utf-8") as f:
        text = f.read()
    # fuzzers=("$@") takes the arguments; the list is the other assignment.
    lists = [m for m in re.findall(r"^\s*fuzzers=\(([^)]*)\)", text, re.M) if "$" not in m]
    return set(lists[0].split()) if lists else set()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("root", nargs="?",
                        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args()
    doc = os.path.join(args.root, "docs", "guarantees.md")
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    problems = check(text, ctest_tests(args.build), ci_fuzzers(args.root))
    for line, problem in problems:
        print(f"docs/guarantees.md:{line}: {problem}")
    rows = len(proof_cells(text))
    print(f"{rows} rows checked, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
