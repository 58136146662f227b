"""Bad numeric flags are refused before any work, naming the flag.

Each case was accepted before cli/flag_checks.h: a NaN, infinite or negative value
either fell back silently to the default (negative meant "unset") or became a
garbage byte count in a cast (--pool-fraction nan: a 9.2e9 GB pool). A control
run with valid values for the same flags must still succeed.

usage: bad_flags_test.py PATH_TO_KVLEARN
"""
import os
import subprocess
import sys
import tempfile

KVLEARN = sys.argv[1]

# (subcommand arguments before the bad flag, the flag, its bad value)
COMPARE = ["compare", "--trace", "{trace}", "--policies", "lru", "--eval-from", "0.9"]
CLUSTER = COMPARE + ["--cluster", "--prefill-nodes", "1"]
PLAN = ["plan", "--trace", "{trace}", "--policies", "lru", "--sizes", "2"]
TRAIN = ["train", "--trace", "{trace}", "--out", "{dir}/model.pt"]
CASES = [
    (CLUSTER, "--hbm-gb", "1e30"),
    (CLUSTER, "--hbm-gb", "nan"),
    (CLUSTER, "--dram-gb", "-3"),
    (CLUSTER, "--cache-threshold", "7"),
    (CLUSTER, "--balance-rel-threshold", "-2"),
    (CLUSTER, "--decode-nodes", "0"),
    (CLUSTER, "--replicate-targets", "0"),
    (CLUSTER, "--burst-window", "nan"),
    (COMPARE, "--mfu", "-1"),
    (COMPARE, "--mfu", "nan"),
    (COMPARE, "--transfer-latency-ms", "-1"),
    (COMPARE, "--alpha-bw", "inf"),
    (COMPARE, "--l-cross", "-1"),
    (COMPARE, "--kv-bytes-per-token", "-4"),
    (COMPARE, "--pool-fraction", "nan"),
    (COMPARE, "--pool-bytes", "0"),
    (COMPARE, "--eval-from", "nan"),
    (COMPARE, "--transfer-weight", "nan"),
    # learned-model cannot run without --model (learned can: see below).
    (["compare", "--trace", "{trace}", "--eval-from", "0.9"], "--policies", "learned-model"),
    (PLAN, "--min-fraction", "nan"),
    (PLAN, "--max-fraction", "0"),
    (PLAN, "--pool-fraction", "inf"),
    (PLAN, "--target", "0"),
    (PLAN, "--gpu-hour-price", "-1"),
    (PLAN, "--sizes", "0"),
    (TRAIN, "--pool-fraction", "-1"),
    (TRAIN, "--horizon", "-5"),
    (TRAIN, "--horizons", "15,nan"),
    (TRAIN, "--epochs", "0"),
    (TRAIN, "--record-policy", "no-such-policy"),
    (TRAIN, "--train-until", "nan"),
    (TRAIN, "--judge-pool-fractions", "nan"),
    (["serve", "--data-dir", "{dir}/data"], "--stream-idle-timeout-seconds", "nan"),
    (["model", "evaluate", "1", "--data-dir", "{dir}/data"], "--pool-fraction", "nan"),
    (["model", "promote", "1", "--data-dir", "{dir}/data"], "--timeout-seconds", "nan"),
    (["model", "evaluate", "1", "--data-dir", "{dir}/data"], "--window-requests", "0"),
]


def run(args, fill):
    argv = [KVLEARN] + [a.format(**fill) for a in args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.jsonl")
        gen = run(["gen", "--kind", "chat", "--requests", "300", "--seed", "3", "--out", trace], {})
        if gen.returncode != 0:
            sys.exit(f"gen failed: {gen.stderr}")
        fill = {"trace": trace, "dir": d}
        for prefix, flag, value in CASES:
            r = run(prefix + [flag, value], fill)
            if r.returncode == 0 or flag not in r.stderr:
                failures.append(f"{flag} {value}: exit {r.returncode}, stderr {r.stderr!r}")
        if os.path.exists(os.path.join(d, "model.pt")) or os.path.exists(os.path.join(d, "data")):
            failures.append("a refused command left output behind")
        # Valid values of the same flags run to the end.
        good = run(CLUSTER + ["--hbm-gb", "54.3", "--dram-gb", "0", "--cache-threshold", "0.3",
                              "--balance-rel-threshold", "1.5", "--mfu", "0.5",
                              "--transfer-latency-ms", "0.05", "--pool-fraction", "0.1",
                              "--transfer-weight", "1", "--format", "json"], fill)
        if good.returncode != 0 or '"results"' not in good.stdout:
            failures.append(f"valid flags failed: exit {good.returncode}, {good.stderr!r}")
        # learned runs without a model, on its lru and gdsf experts.
        learned = run(["compare", "--trace", "{trace}", "--policies", "lru,learned",
                       "--eval-from", "0.5", "--format", "json"], fill)
        if learned.returncode != 0 or '"learned"' not in learned.stdout:
            failures.append(f"learned without --model failed: exit {learned.returncode}, "
                            f"{learned.stderr!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(CASES) - len(failures)} of {len(CASES)} bad flags refused, control run ok"
          if not failures else f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
