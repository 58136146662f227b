#!/usr/bin/python3
"""Checks that every shell script in scripts/ answers -h and --help with its
header comment and does nothing else (no package check, no build), and that
setup.sh refuses an argument it does not know. Run by ctest; standard
library only."""
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ["run.sh", "test.sh", "build.sh", "ci_stages.sh", "fuzz.sh", "setup.sh"]


def header_first_line(script):
    lines = (ROOT / "scripts" / script).read_text().splitlines()
    return lines[1].removeprefix("# ")  # line 1 is the shebang


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # Were --help not honoured, build.sh would configure this directory.
        build_dir = pathlib.Path(tmp) / "build"
        env = dict(os.environ, KVLEARN_BUILD_DIR=str(build_dir),
                   KVLEARN_CI_BUILD_PREFIX=str(build_dir),
                   KVLEARN_FUZZ_BUILD_DIR=str(build_dir))
        for script in SCRIPTS:
            for flag in ("-h", "--help"):
                r = subprocess.run(["bash", str(ROOT / "scripts" / script), flag], env=env,
                                   capture_output=True, text=True, timeout=60)
                out = r.stdout.splitlines()
                if r.returncode != 0:
                    failures.append(f"{script} {flag}: exit {r.returncode}: {r.stderr.strip()}")
                elif not out or out[0] != header_first_line(script):
                    failures.append(f"{script} {flag}: first line {out[:1]}, "
                                    f"want {header_first_line(script)!r}")
                elif any(line.startswith(("setup: ", "-- ", "ninja:", "ci: ")) for line in out):
                    failures.append(f"{script} {flag}: did more than print its usage")
        if build_dir.exists():
            failures.append(f"a script's --help created {build_dir}")
    r = subprocess.run(["bash", str(ROOT / "scripts/setup.sh"), "--bogus"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 2 or "--bogus" not in r.stderr:
        failures.append(f"setup.sh --bogus: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(SCRIPTS) * 2 + 1 - len(failures)} of {len(SCRIPTS) * 2 + 1} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
