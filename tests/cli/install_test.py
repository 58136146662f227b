"""`cmake --install` gives a bin/ where `kvlearn train` finds kvlearn-train.

`kvlearn train` runs the kvlearn-train executable beside its own
(cli/train_forwarder.cc), so an install that left it out, or a kvlearn copied
alone, would break training only. Checks both: the installed pair forwards
(kvlearn-train's own help comes back), and a lone kvlearn says which file it
could not run.

usage: install_test.py CMAKE_COMMAND BUILD_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

CMAKE, BUILD = sys.argv[1], sys.argv[2]


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as prefix:
        r = run([CMAKE, "--install", BUILD, "--prefix", prefix])
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return 1
        bin_dir = os.path.join(prefix, "bin")
        for name in ["kvlearn", "kvlearn-train", "kvlearn-engine-publisher"]:
            if not os.access(os.path.join(bin_dir, name), os.X_OK):
                failures.append(f"{name} is not installed in {bin_dir}")
        proto = os.path.join(prefix, "share/kvlearn/proto/kvlearn/v1/retention.proto")
        if not os.path.isfile(proto):
            failures.append(f"{proto} is not installed")

        # The installed kvlearn forwards to the installed kvlearn-train: the
        # help text is kvlearn-train's (it names the --trace flag train needs).
        r = run([os.path.join(bin_dir, "kvlearn"), "train", "--help"])
        if r.returncode != 0 or "--trace" not in r.stdout:
            failures.append(f"installed `kvlearn train --help`: exit {r.returncode}\n{r.stdout}{r.stderr}")

        # kvlearn alone: train fails, naming the program it looked for.
        with tempfile.TemporaryDirectory() as alone:
            lone = os.path.join(alone, "kvlearn")
            shutil.copy(os.path.join(bin_dir, "kvlearn"), lone)
            r = run([lone, "train", "--help"])
            expected = os.path.join(os.path.realpath(alone), "kvlearn-train")
            if r.returncode == 0 or expected not in r.stderr:
                failures.append(f"lone kvlearn train: exit {r.returncode}, stderr {r.stderr!r}, "
                                f"expected it to name {expected}")
            # Every other command still works without kvlearn-train.
            r = run([lone, "gen", "--help"])
            if r.returncode != 0:
                failures.append(f"lone kvlearn gen --help: exit {r.returncode}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
