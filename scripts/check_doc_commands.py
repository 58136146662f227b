#!/usr/bin/python3
"""Runs every shell block of README.md and docs/*.md (not docs/history/) against
a build, so a documented command that no longer works fails the build.

    scripts/check_doc_commands.py [--build DIR] [--slow] [--list] [--doc FILE]... [ROOT]

ROOT is the repository (default: this script's parent folder); DIR the build
(default ROOT/build).

Which blocks: fenced blocks labelled sh, bash, shell or console. A fenced block
without a label whose first line reads like a command (`$ `, `kvlearn `,
`build/`, `./`, `scripts/`, `python3`, `PYTHONPATH=`) is a problem: label it sh
to run it, or text if it is a synopsis or output. A command in inline code inside
a Markdown table that holds `\\|` is a problem too (the escape is pasted with it):
give the command its own block.

Where they run (the one rule the docs follow): commands are written as typed at
the repository root after building, with `kvlearn` on PATH (the install step of
docs/design.md#building). Each doc runs in a fresh scratch directory that holds
links to the repository's top-level folders and files, with `build` linked to the
build under test, so `datasets/...`, `scripts/...`, `clients/...` and `build/...`
resolve as at the root while files a doc writes by a relative path land in the
scratch directory (those it writes under build/ land in the build). PATH starts
with the build's cli/ and clients/. A doc's blocks run in order in one scratch
directory, so a block may read what an earlier one wrote. Each block runs as
`bash -e -o pipefail` in its own process group, killed when the block ends (a
server a block starts with `&` lives as long as that block). The docs use the
default ports (50051, 9464, 5557, 5558), so a run holds a lock file in the temp
directory and runs from other checkouts on the machine wait for it.

Markers, an HTML comment on the line(s) right above a block:
  <!-- doc-test: skip: REASON -->   not run; the reason is printed (required)
  <!-- doc-test: slow: REASON -->   run only with --slow (the reason: how long)
  <!-- doc-test: output: tolerance N% -->   the next fenced block is the output
  <!-- doc-test: output: machine-dependent --> expected (for console blocks: the
                                    lines not starting with `$ `).
Output is compared line by line: each expected line must match a line of the
actual stdout+stderr, in order (other lines may come between). Two lines match
when their text outside numbers is equal (runs of spaces count as one) and each
number is within N% of the expected one (or half a unit of its last printed
digit, whichever is larger); machine-dependent compares the text and the count
of numbers only.

Prints one line per block (ran, skipped, slow, FAIL with the block's last output
lines) and exits 1 if any block failed or any problem was found, 0 otherwise.
"""

import argparse
import dataclasses
import fcntl
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SHELL_LABELS = ("sh", "bash", "shell", "console")
LOOKS_LIKE_COMMAND = re.compile(r"^\s*(\$ |kvlearn |build/|\./|scripts/|python3|PYTHONPATH=)")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
CODE_SPAN = re.compile(r"`([^`]+)`")
COMMAND_SPAN = re.compile(r"^(\$ |kvlearn |build/|\./|scripts/|python3|PYTHONPATH=|time |valgrind )")
BLOCK_TIMEOUT_S = 1800  # a hung server must not hang the build; the slowest block is far below


@dataclasses.dataclass
class Block:
    path: str            # relative to ROOT
    line: int            # line of the opening fence
    label: str
    text: str
    skip: str = ""       # reason, if marked skip
    slow: str = ""       # reason, if marked slow
    output: str = ""     # "tolerance N%" or "machine-dependent", if output is compared
    expected: str = ""   # the expected output

    def commands(self):
        """The script to run: a console block's `$ ` lines (and their continuations)."""
        return self.text if self.label != "console" else split_console(self.text)[0]


def split_console(text):
    """(commands, output) of a console block: `$ ` lines and the lines continuing
    them after a trailing backslash are commands, the rest output."""
    commands, output, continuing = [], [], False
    for line in text.splitlines():
        if continuing or line.startswith("$ "):
            commands.append(line if continuing else line[2:])
            continuing = line.rstrip().endswith("\\")
        else:
            output.append(line)
    return "\n".join(commands) + "\n", "\n".join(output) + "\n"


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def fenced_blocks(lines):
    """(opening line index, label, body lines) of each fenced block."""
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if stripped.startswith("```"):
            label = stripped[3:].strip().lower()
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            yield i, label, lines[i + 1:j]
            i = j + 1
        else:
            i += 1


def markers_above(lines, index):
    """The doc-test markers on the lines right above line `index` (blank lines between allowed)."""
    found, i = [], index - 1
    while i >= 0 and (not lines[i].strip() or MARKER.match(lines[i])):
        m = MARKER.match(lines[i])
        if m:
            found.append((i + 1, m.group(1)))
        i -= 1
    return found


def parse_doc(root, path):
    """(blocks to consider, problems) of one Markdown file."""
    rel = os.path.relpath(path, root)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, problems = [], []
    fences = list(fenced_blocks(lines))
    in_code = set()
    for start, _, body in fences:
        in_code.update(range(start, start + len(body) + 2))
    for number, line in enumerate(lines, start=1):
        if number - 1 in in_code or not line.lstrip().startswith("|"):
            continue
        if any("\\|" in span and COMMAND_SPAN.match(span) for span in CODE_SPAN.findall(line)):
            problems.append(f"{rel}:{number}: a command in a table cell holds `\\|`, which is "
                            "pasted with it: give the command its own ```sh block")
    for k, (start, label, body) in enumerate(fences):
        where = f"{rel}:{start + 1}"
        first = next((b for b in body if b.strip()), "")
        if label not in SHELL_LABELS:
            if label == "" and LOOKS_LIKE_COMMAND.match(first):
                problems.append(f"{where}: an unlabelled block that reads like a command: "
                                "label it ```sh to run it or ```text if it is not runnable")
            continue
        block = Block(rel, start + 1, label, "\n".join(body) + "\n")
        for marker_line, marker in markers_above(lines, start):
            kind, _, arg = marker.partition(":")
            kind, arg = kind.strip(), arg.strip()
            if kind in ("skip", "slow") and not arg:
                problems.append(f"{rel}:{marker_line}: doc-test {kind} needs a reason "
                                f"(<!-- doc-test: {kind}: why -->)")
            elif kind == "skip":
                block.skip = arg
            elif kind == "slow":
                block.slow = arg
            elif kind == "output" and (arg == "machine-dependent"
                                       or re.fullmatch(r"tolerance \d+(\.\d+)?%", arg)):
                block.output = arg
            else:
                problems.append(f"{rel}:{marker_line}: unknown doc-test marker '{marker}' "
                                "(skip: REASON, slow: REASON, output: tolerance N%, "
                                "output: machine-dependent)")
        if block.output and label == "console":
            block.expected = split_console(block.text)[1]
        elif block.output:
            if k + 1 >= len(fences):
                problems.append(f"{where}: marked output but no block follows with the output")
            else:
                block.expected = "\n".join(fences[k + 1][2]) + "\n"
        elif label == "console" and split_console(block.text)[1].strip():
            problems.append(f"{where}: a console block shows output: say how to compare it "
                            "(<!-- doc-test: output: tolerance N% --> or machine-dependent)")
        blocks.append(block)
    return blocks, problems


def collect(root, only=None):
    blocks, problems = [], []
    for path in markdown_files(root):
        if only and os.path.relpath(path, root) not in only:
            continue
        b, p = parse_doc(root, path)
        blocks += b
        problems += p
    return blocks, problems


def segments(line):
    """(text outside numbers with runs of spaces as one, the numbers as strings)."""
    numbers = NUMBER.findall(line)
    text = " ".join(NUMBER.sub("#", line).split())
    return text, numbers


def numbers_match(expected, actual, tolerance):
    e, a = float(expected), float(actual)
    decimals = len(expected.split(".")[1]) if "." in expected and "e" not in expected.lower() else 0
    half_unit = 0.5 * 10 ** -decimals
    return abs(a - e) <= max(tolerance * abs(e), half_unit)


def line_matches(expected, actual, mode):
    e_text, e_numbers = segments(expected)
    a_text, a_numbers = segments(actual)
    if e_text != a_text or len(e_numbers) != len(a_numbers):
        return False
    if mode == "machine-dependent":
        return True
    tolerance = float(mode.split()[1].rstrip("%")) / 100
    return all(numbers_match(e, a, tolerance) for e, a in zip(e_numbers, a_numbers))


def output_mismatch(expected, actual, mode):
    """The first expected line no later actual line matches, or None."""
    actual_lines = [l for l in actual.splitlines() if l.strip()]
    position = 0
    for line in (l for l in expected.splitlines() if l.strip()):
        while position < len(actual_lines) and not line_matches(line, actual_lines[position], mode):
            position += 1
        if position == len(actual_lines):
            return line
        position += 1
    return None


PORTS_LOCK = os.path.join(tempfile.gettempdir(), "kvlearn-doc-commands.lock")


def make_scratch(root, build):
    scratch = tempfile.mkdtemp(prefix="doc-test-")
    for name in os.listdir(root):
        if name.startswith(".") or name == "build":
            continue
        os.symlink(os.path.join(root, name), os.path.join(scratch, name))
    os.symlink(os.path.abspath(build), os.path.join(scratch, "build"))
    return scratch


def run_block(block, scratch, build):
    """(ok, seconds, what went wrong) of running one block in scratch."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.join(os.path.abspath(build), "cli"),
                                   os.path.join(os.path.abspath(build), "clients"),
                                   env.get("PATH", "")])
    script = os.path.join(scratch, ".doc-test-block.sh")
    with open(script, "w", encoding="utf-8") as f:
        f.write(block.commands())
    log_path = os.path.join(scratch, ".doc-test-output")
    began = time.monotonic()
    with open(log_path, "w+", encoding="utf-8") as log:
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", script],
                                cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = proc.wait(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            status = None
        for sig in (signal.SIGTERM, signal.SIGKILL):  # servers the block left behind
            try:
                os.killpg(proc.pid, sig)
                time.sleep(0.2)
            except ProcessLookupError:
                break
        if proc.poll() is None:
            proc.wait()
        log.seek(0)
        output = log.read()
    seconds = time.monotonic() - began
    tail = "\n".join("    " + l for l in output.splitlines()[-12:])
    if status is None:
        return False, seconds, f"still running after {BLOCK_TIMEOUT_S} s\n{tail}"
    if status != 0:
        return False, seconds, f"exit status {status}\n{tail}"
    if block.output:
        missing = output_mismatch(block.expected, output, block.output)
        if missing is not None:
            return False, seconds, (f"output differs ({block.output}); no line matches "
                                    f"expected:\n    {missing}\n  got:\n{tail}")
    return True, seconds, ""


def run(root, build, slow, only=None, listing=False, out=sys.stdout):
    """Runs (or lists) the blocks; returns the number of failures and problems."""
    blocks, problems = collect(root, only)
    for p in problems:
        print(f"problem: {p}", file=out)
    failures = 0
    scratch_of = {}
    for block in blocks:
        where = f"{block.path}:{block.line}"
        if block.skip:
            print(f"{where}: skipped: {block.skip}", file=out)
            continue
        if block.slow and not slow:
            print(f"{where}: slow, not run (--slow runs it): {block.slow}", file=out)
            continue
        if listing:
            print(f"{where}: would run", file=out)
            continue
        if block.path not in scratch_of:
            scratch_of[block.path] = make_scratch(root, build)
        ok, seconds, why = run_block(block, scratch_of[block.path], build)
        if ok:
            print(f"{where}: ok ({seconds:.1f} s)", file=out)
        else:
            failures += 1
            print(f"{where}: FAIL ({seconds:.1f} s): {why}", file=out)
        out.flush()
    for scratch in scratch_of.values():
        subprocess.run(["rm", "-rf", scratch], check=False)
    return failures + len(problems)


def main():
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("root", nargs="?", default=default_root, help="the repository")
    parser.add_argument("--build", help="the build to run against (default ROOT/build)")
    parser.add_argument("--slow", action="store_true", help="also run blocks marked slow")
    parser.add_argument("--list", action="store_true",
                        help="print what would run, skip or wait for --slow; run nothing")
    parser.add_argument("--doc", action="append",
                        help="only this file (relative to ROOT, e.g. docs/sidecar.md); repeatable")
    args = parser.parse_args()
    build = args.build or os.path.join(args.root, "build")
    if not args.list and not os.path.isdir(build):
        print(f"check_doc_commands: no build at {build}: build first or pass --build DIR",
              file=sys.stderr)
        return 2
    if args.list:
        return 1 if run(args.root, build, args.slow, args.doc, True) else 0
    # The documented commands use the default ports (50051, 9464, 5557): runs from
    # several checkouts on one machine take turns instead of colliding.
    with open(PORTS_LOCK, "w", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"check_doc_commands: waiting for {PORTS_LOCK} (another run holds the "
                  "documented ports)", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        return 1 if run(args.root, build, args.slow, args.doc) else 0


if __name__ == "__main__":
    sys.exit(main())
