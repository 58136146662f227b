"""`cmake --install` gives a bin/ where `kvlearn train` finds kvlearn-train,
and the Python client where that prefix's Python finds it.

`kvlearn train` runs the kvlearn-train executable beside its own
(cli/train_forwarder.cc), so an install that left it out, or a kvlearn copied
alone, would break training only. Checks both: the installed pair forwards
(kvlearn-train's own help comes back), and a lone kvlearn says which file it
could not run. From a directory outside the checkout and the build, the
installed kvlearn answers --version, and Debian's python3, given the prefix as
its user base (as ~/.local is by default), imports kvlearn_client and the
generated stubs with no PYTHONPATH, and runs the installed example's --help.

usage: install_test.py CMAKE_COMMAND BUILD_DIR
"""
import glob
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

        # From elsewhere: nothing read from the checkout or the build.
        with tempfile.TemporaryDirectory() as elsewhere:
            r = subprocess.run([os.path.join(bin_dir, "kvlearn"), "--version"], cwd=elsewhere,
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0 or not r.stdout.strip():
                failures.append(f"installed kvlearn --version: exit {r.returncode} {r.stderr}")
            sites = glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages"))
            if len(sites) != 1:
                failures.append(f"no single lib/python3*/site-packages under the prefix: {sites}")
            else:
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                env["PYTHONUSERBASE"] = prefix
                r = subprocess.run(
                    ["/usr/bin/python3", "-c",
                     "import kvlearn_client, kvlearn.v1.retention_pb2_grpc; "
                     "print(kvlearn_client.__file__)"],
                    cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
                if r.returncode != 0 or not r.stdout.startswith(sites[0]):
                    failures.append(f"import kvlearn_client from the user base: {r.stdout}{r.stderr}")
                example = os.path.join(prefix, "share/kvlearn/examples/replay_trace.py")
                r = subprocess.run([example, "--help"], cwd=elsewhere, env=env,
                                   capture_output=True, text=True, timeout=60)
                if r.returncode != 0 or "--target" not in r.stdout:
                    failures.append(f"installed replay_trace.py --help: {r.stdout}{r.stderr}")

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
