#!/usr/bin/env python3
"""Judges a learned policy on traffic it was not trained on (docs/generalisation.md).

For each trace: trains a model on its first 60% (validation to 80%) with `kvlearn train`,
then replays its last 20% with `kvlearn compare --eval-from 0.8` at each pool fraction
against every online baseline and Belady, and (with --cluster) through the cluster
simulator with the cache-aware router (--cluster-router picks another, e.g.
cache-aware-approx, sgl-router's default memory of what it routed). Prints one row per cell:

  cell        trace kind/seed and pool fraction
  tested      cost_seconds of the policy under test (prefill GPU-s + transfer s)
  best other  the cheapest other online policy and its cost_seconds
  margin %    (best other - tested) / best other, percent; > 0 means the tested policy is cheaper
  xfer/lru    the tested policy's transfer_bytes / LRU's
  gap %       the tested policy's cost_gap_closed (share of LRU -> Belady cost gap), percent
  pass        yes when tested is the cheapest online policy and xfer/lru <= 1

and, with --cluster, one row per trace: TTFT mean and p95 (seconds) and the cluster's
cost_seconds (prefill GPU-s + transfer s over every tier's loads and admissions) of the tested
policy, each beside the lowest of the other online policies. Cluster TTFT under the cache-aware router is decided
by where bursts queue, which a change of HBM size too small to move any policy's prefill time
moves by a few percent (10-20% before the router's fallback counted the blocks on their way;
docs/learned_policy.md, "Cluster TTFT"), so --cluster-hbm-runs K replays
the cluster at K HBM sizes 0.4% apart around the default and the row gives, per statistic,
the tested policy's average over the K runs, the other policy with the lowest average,
and in how many of the K runs the tested policy was the lowest of all (k/K); a second table
gives, per statistic, the tested policy's excess over that other policy in percent, paired
run by run, as its mean ± standard error over the K runs. The last lines
give the cells passed and the mean gap. --cluster-only runs the cluster rows alone (no pool
cells, no Belady replays). Tuning seeds run by default; --held-out runs a held-out seed set
instead: --held-out-set N, the latest written down by default, which nothing may be tuned
on (an earlier N reruns a spent set; pass N every time, so that a set written down after
the run you meant is not spent by mistake). The sample trace runs either way, unless --kinds
leaves it out. --kinds fanout,batch judges two traffic shapes outside issue 12's grid, on
seeds of their own (SHAPE_SEEDS below), never tuned on, with or without --held-out.
Generated traces and models are cached under --work; --retrain retrains.

One model's cost on a cell moves by about 1% with its training seed alone
(docs/generalisation.md, Protocol), so --train-seeds N trains N models per trace
(`kvlearn train --seed 1..N`) and judges the cell over them. The row then has:

  tested      mean cost_seconds of the tested policy over the N models
  sd          their standard deviation (sample, seconds)
  margin %    as above, of the mean
  xfer/lru    the largest ratio over the N models
  gap %       the mean cost_gap_closed over the N models, percent
  pass        k/N: how many of the N models pass the cell (the rule above)

and the last lines count the passes over every (cell, model) pair and the cells whose mean
beats the best other policy. The other policies do not read the model, so they are
replayed once per cell. --cluster uses the seed-1 model.

--robustness runs the robustness grid instead (docs/generalisation.md, "Robustness grid"):
every kind of `kvlearn gen` on its judging seeds (ROBUSTNESS_SEEDS, or with --seeds tuning
ROBUSTNESS_TUNING_SEEDS, to tune on; --robustness-traces N traces per kind, default 2) and
the shipped sample, at each pool fraction, judged on the
last 20%, in three training modes (--modes, default a,b,c):

  a  trained on the same trace's first 60% (validation to 80%)
  b  trained on other traffic: the sample's model on every generated trace, and a chat
     model (trained on the chat tuning trace TUNING_SEEDS["chat"][0], as large as the grid's
     chat trace) on every other trace, the sample included
  c  no model (`learned` without --model); a mode that cannot run prints why, one line, and
     fails the gate

One row per (mode, model, trace, pool):

  lru, gdsf     cost_seconds of LRU and GDSF
  best online   the cheapest online policy other than the tested one, and its cost_seconds
  learned       cost_seconds of the tested policy (--policy)
  l/min         learned / min(lru, gdsf)
  l/lru         learned / lru
  gap %         share of the LRU -> Belady cost gap the tested policy closes, percent
                (lru - learned) / (lru - belady); negative: costlier than LRU
  safe          yes when l/min <= 1.01 and l/lru <= 1.005 (the issue's safety condition)
  cheapest      yes when learned is strictly the cheapest online policy

Summary lines: per mode, the cells that pass safety; for mode a, the share of cells where
learned is the cheapest online policy and the mean gap closed; for b (and c), the mean gap
closed; then the wall time. Exits 1 when any cell fails safety or a mode cannot run, so the
grid can gate. Generated traces have ROBUSTNESS_REQUESTS requests per kind (--requests N
overrides every kind); traces and models are cached under --work (default build/eval-robust).

--ablate PART[,PART] measures what parts of `learned` are worth (docs/learned_policy.md,
"What each part is worth"): it sets KVLEARN_LEARNED_ABLATE for the tested policy, replays
only that policy per cell (the baselines' rows come from the cache the last plain run wrote
under --work), writes every cell to WORK/robustness-SEEDS-PART.json (a plain run to
...-plain.json) and prints, per mode, against the plain run's cells: the mean change of the
tested policy's cost, the worst cell's cost / bound before and after (bound: the most a cell
may cost and pass safety), and the cells whose cost moved by more than 0.2% up and down.

Usage: scripts/eval_learned.py [--held-out --held-out-set N] [--kinds mixed,chat,sample] [--pools 0.05,0.1,0.2]
       [--policy learned] [--train-seeds 1] [--cluster | --cluster-only] [--cluster-hbm-runs 1]
       [--cluster-router cache-aware]
       [--kvlearn build/cli/kvlearn]
       [--work build/eval] [--retrain] [--train-arg=--epochs=20 ...]
       [--cost-arg=--model-profile=llama3.3-70b ...]
       scripts/eval_learned.py --robustness [--seeds judging|tuning|spent] [--modes a,b,c]
       [--kinds chat,...,sample]
       [--robustness-traces 2] [--requests N] [--pools 0.05,0.1,0.2] [--work build/eval-robust]
       [--ablate PART[,PART]] [--cells-out FILE]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ONLINE = ["lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc", "kvlearn-cars"]
TUNING_SEEDS = {"mixed": [101, 102], "chat": [201, 202]}
# Held-out seed sets (docs/generalisation.md). Sets 1 to 19 are spent; set 20 is the current
# one, which nothing may be tuned on.
HELD_OUT_SEEDS = {
    1: {"mixed": [9101, 9102], "chat": [9201, 9202]},
    2: {"mixed": [9301, 9302], "chat": [9401, 9402]},
    3: {"mixed": [9501, 9502], "chat": [9601, 9602]},
    4: {"mixed": [9701, 9702], "chat": [9801, 9802]},
    5: {"mixed": [9901, 9902], "chat": [10001, 10002]},
    6: {"mixed": [10101, 10102], "chat": [10201, 10202]},
    7: {"mixed": [10301, 10302], "chat": [10401, 10402]},
    8: {"mixed": [10501, 10502], "chat": [10601, 10602]},
    9: {"mixed": [10701, 10702], "chat": [10801, 10802]},
    10: {"mixed": [10901, 10902], "chat": [11001, 11002]},
    11: {"mixed": [11101, 11102], "chat": [11201, 11202]},
    12: {"mixed": [11301, 11302], "chat": [11401, 11402]},
    13: {"mixed": [11501, 11502], "chat": [11601, 11602]},
    14: {"mixed": [11701, 11702], "chat": [11801, 11802]},
    15: {"mixed": [11901, 11902], "chat": [12001, 12002]},
    16: {"mixed": [12101, 12102], "chat": [12201, 12202]},
    17: {"mixed": [12301, 12302], "chat": [12401, 12402]},
    18: {"mixed": [12501, 12502], "chat": [12601, 12602]},
    19: {"mixed": [12701, 12702], "chat": [12801, 12802]},
    20: {"mixed": [12901, 12902], "chat": [13001, 13002]},
}
# Pure fan-out and pure batch traffic (`kvlearn gen --kind fanout|batch`): not in issue
# 12's grid, so judged apart, on seeds written down before their first run (6 December 2026,
# docs/generalisation.md "Other traffic shapes"), which nothing is tuned on.
SHAPE_SEEDS = {"fanout": [14101, 14102], "batch": [14201, 14202]}
# Tuning seeds of the kinds added for the robustness grid: anyone may tune on these
# (--kinds rag,coder,shift); never judged.
TUNING_SEEDS.update({"rag": [301, 302], "coder": [401, 402], "shift": [501, 502]})
# The robustness grid on tuning seeds (--robustness --seeds tuning), to tune on: the chat
# trace is 202 because mode b's chat model is trained on 201; fanout and batch have tuning
# seeds of their own here (SHAPE_SEEDS were judged once and are not for tuning).
ROBUSTNESS_TUNING_SEEDS = {
    "chat": [202, 203], "fanout": [601, 602], "batch": [701, 702], "mixed": [101, 102],
    "rag": [301, 302], "coder": [401, 402], "shift": [501, 502],
}
# Judging seeds of the robustness grid (--robustness; docs/generalisation.md, "Robustness
# grid"), written down on 2026-12-08 at 00:59 UTC before any trace was generated from
# them. Nothing may be tuned on them. --robustness-traces 2 (the default) judges both seeds
# of each kind, 1 the first.
ROBUSTNESS_SEEDS = {
    "chat": [17101, 17102], "fanout": [17201, 17202], "batch": [17301, 17302],
    "mixed": [17401, 17402], "rag": [17501, 17502], "coder": [17601, 17602],
    "shift": [17701, 17702],
}
# Spent judging seeds (--seeds spent: the latest; spent-first: the grid's first set): no
# longer unseen, so anyone may read them to find why a cell failed; never a judgement again.
ROBUSTNESS_SPENT_SEEDS = {
    "chat": [16101, 16102], "fanout": [16201, 16202], "batch": [16301, 16302],
    "mixed": [16401, 16402], "rag": [16501, 16502], "coder": [16601, 16602],
    "shift": [16701, 16702],
}
ROBUSTNESS_FIRST_SPENT_SEEDS = {
    "chat": [15101, 15102], "fanout": [15201, 15202], "batch": [15301, 15302],
    "mixed": [15401, 15402], "rag": [15501, 15502], "coder": [15601, 15602],
    "shift": [15701, 15702],
}
# Requests per generated trace of the robustness grid, sized so the whole grid (two traces
# per kind and the sample, 3 pools, modes a and b) runs in at most 25 minutes on the 2-core
# build machine (one trace per kind took 482 s with other builds running;
# docs/generalisation.md, "Robustness grid").
ROBUSTNESS_REQUESTS = {"chat": 20000, "fanout": 20000, "batch": 20000, "mixed": 20000,
                       "rag": 20000, "coder": 20000, "shift": 20000}
ROBUSTNESS_KINDS = ["chat", "fanout", "batch", "mixed", "rag", "coder", "shift", "sample"]
SAMPLE = "datasets/mooncake_conversation_trace.jsonl"
# The research switches of the learned policy (policies/learned/ablation.h).
ABLATE_VARIABLE = "KVLEARN_LEARNED_ABLATE"


def run(cmd, quiet=True):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"eval_learned: {' '.join(cmd)} failed:\n{result.stderr[-2000:]}")
    return result.stdout


def traces(args):
    seeds = HELD_OUT_SEEDS[args.held_out_set] if args.held_out else TUNING_SEEDS
    for kind in args.kinds:
        if kind == "sample":
            yield "sample", SAMPLE
            continue
        for seed in SHAPE_SEEDS[kind] if kind in SHAPE_SEEDS else seeds[kind]:
            path = os.path.join(args.work, f"{kind}-{seed}.jsonl")
            if not os.path.exists(path):
                run([args.kvlearn, "gen", "--kind", kind, "--requests", "20000", "--seed",
                     str(seed), "--out", path])
            yield f"{kind}-{seed}", path


def pin_blas_kernels():
    """OpenBLAS's AVX-512 and AVX2 kernels round differently, so one seed trains slightly
    different weights on different machines; where the CPU has AVX2 and FMA and the caller
    chose no kernels, train with the AVX2 ones (as scripts/run.sh does)."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return
    if {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def model_for(args, name, path, seed=1):
    """The model trained on `path` with training seed `seed` (kvlearn train's default is 1,
    whose file keeps the name it had before --train-seeds)."""
    model = os.path.join(args.work, f"{name}.pt" if seed == 1 else f"{name}-seed{seed}.pt")
    if args.retrain or not os.path.exists(model):
        pin_blas_kernels()
        seed_arg = [] if seed == 1 else ["--seed", str(seed)]
        # --force: the grid judges every model, train's verdict included.
        run([args.kvlearn, "train", "--trace", path, "--train-until", "0.6", "--valid-until",
             "0.8", "--out", model, "--force"] + seed_arg + args.cost_arg + args.train_arg)
    return model


def compare(args, path, model, extra, policies=None, whole=False):
    """The result rows of one `kvlearn compare` (with whole=True, its whole JSON); with
    model None, no --model."""
    policies = ",".join(policies or ONLINE + [args.policy, "belady"])
    model_arg = ["--model", model] if model else []
    out = run([args.kvlearn, "compare", "--trace", path] + model_arg + ["--eval-from", "0.8",
               "--policies", policies, "--format", "json"] + args.cost_arg + extra)
    return json.loads(out) if whole else json.loads(out)["results"]


def cluster_runs(args, path, model):
    """{policy: row} of the cluster replay (--cluster-router) at the default HBM size,
    then at --cluster-hbm-runs - 1 more sizes, 0.4% apart, centred on the default."""
    base = ["--cluster", "--router", args.cluster_router]
    first = compare(args, path, model, base, ONLINE + [args.policy], whole=True)
    runs = [{r["policy"]: r for r in first["results"]}]
    hbm_gb = first["hbm_bytes_per_node"] / 1e9
    k = args.cluster_hbm_runs
    for i in range(k):
        step = i - (k - 1) // 2
        if step == 0:
            continue  # the default, run above
        size = f"{hbm_gb * (1 + 0.004 * step):.4f}"
        rows = compare(args, path, model, base + ["--hbm-gb", size], ONLINE + [args.policy])
        runs.append({r["policy"]: r for r in rows})
    return runs


def judge_cluster_field(runs, policy, field):
    """Cluster runs [{policy: row}] -> (tested policy's mean of `field` (a TTFT statistic or
    cost_seconds) over the runs, the other online policy with the lowest mean and that mean,
    runs where the tested policy's `field` is strictly the lowest of all, and the tested
    policy's excess over that policy in percent, paired run by run: its mean and standard
    error (0 for one run))."""
    def mean(p):
        return sum(r[p][field] for r in runs) / len(runs)
    others = [p for p in ONLINE if p != policy and p in runs[0]]
    best = min(others, key=mean)
    lowest = sum(all(r[policy][field] < r[p][field] for p in others) for r in runs)
    excess = [100 * (r[policy][field] / r[best][field] - 1) for r in runs]
    se = statistics.stdev(excess) / math.sqrt(len(excess)) if len(excess) > 1 else 0.0
    return mean(policy), best, mean(best), lowest, statistics.mean(excess), se


def judge(rows, policy):
    """One model on one cell: {policy: result row} -> (tested row, best other row, xfer/lru,
    passed). Passed: cheaper than every other online policy, transfer bytes at most LRU's."""
    tested = rows[policy]
    best = min((rows[p] for p in ONLINE if p != policy), key=lambda r: r["cost_seconds"])
    xfer = tested["transfer_bytes"] / max(rows["lru"]["transfer_bytes"], 1)
    return tested, best, xfer, tested["cost_seconds"] < best["cost_seconds"] and xfer <= 1.0


def judge_over_models(runs, policy):
    """The same cell under several models: `runs` is one {policy: row} per model (the other
    policies' rows are the same in each). Returns a dict: mean and sd of the tested cost (sd 0
    for one model), the best other row, the largest xfer/lru, the mean gap (None if no run has
    one), the passes and the model count."""
    judged = [judge(rows, policy) for rows in runs]
    costs = [tested["cost_seconds"] for tested, _, _, _ in judged]
    gaps = [t["cost_gap_closed"] for t, _, _, _ in judged if t["cost_gap_closed"] is not None]
    return {
        "mean": statistics.mean(costs),
        "sd": statistics.stdev(costs) if len(costs) > 1 else 0.0,
        "best": judged[0][1],
        "xfer": max(x for _, _, x, _ in judged),
        "gap": statistics.mean(gaps) if gaps else None,
        "passed": sum(ok for _, _, _, ok in judged),
        "models": len(judged),
    }


def safety(learned, lru, gdsf):
    """The issue's safety condition on one cell: (learned / min(lru, gdsf), learned / lru,
    passed). Passed: at most 1% above the cheaper of lru and gdsf and at most 0.5% above lru."""
    to_min = learned / min(lru, gdsf)
    to_lru = learned / lru
    return to_min, to_lru, to_min <= 1.01 and to_lru <= 1.005


def robustness_cell(rows, learned, policy):
    """One cell of the robustness grid: `rows` {policy: row} of the online baselines, lru,
    gdsf and belady on it, `learned` the tested policy's row (from whichever model).
    Returns a dict: lru, gdsf, learned (cost_seconds), best (the cheapest online policy other
    than the tested one: its row), to_min, to_lru, safe, cheapest (learned strictly below
    every other online policy), gap (cost gap closed, a fraction, None when lru ties
    belady)."""
    lru, gdsf = rows["lru"]["cost_seconds"], rows["gdsf"]["cost_seconds"]
    cost = learned["cost_seconds"]
    best = min((rows[p] for p in ONLINE if p != policy and p in rows),
               key=lambda r: r["cost_seconds"])
    to_min, to_lru, safe = safety(cost, lru, gdsf)
    belady = rows["belady"]["cost_seconds"]
    gap = (lru - cost) / (lru - belady) if lru != belady else None
    return {"lru": lru, "gdsf": gdsf, "learned": cost, "best": best, "to_min": to_min,
            "to_lru": to_lru, "safe": safe, "cheapest": cost < best["cost_seconds"], "gap": gap}


def robustness_traces(args):
    """(name, path) of the grid's traces, generated under --work when missing; the sample
    last."""
    for kind in args.kinds:
        if kind == "sample":
            continue
        seeds = {"judging": ROBUSTNESS_SEEDS, "tuning": ROBUSTNESS_TUNING_SEEDS,
                 "spent": ROBUSTNESS_SPENT_SEEDS,
                 "spent-first": ROBUSTNESS_FIRST_SPENT_SEEDS}[args.seeds]
        for seed in seeds[kind][:args.robustness_traces]:
            yield f"{kind}-{seed}", generated(args, kind, seed)
    if "sample" in args.kinds:
        yield "sample", SAMPLE


def trace_stem(path):
    """A trace's file name without .jsonl: names its model under --work, so a model is
    retrained when the trace's size changes."""
    return "sample" if path == SAMPLE else os.path.splitext(os.path.basename(path))[0]


def generated(args, kind, seed):
    """The trace `kvlearn gen --kind kind --seed seed` at the grid's size, cached under --work."""
    requests = args.requests or ROBUSTNESS_REQUESTS[kind]
    path = os.path.join(args.work, f"{kind}-{seed}-{requests}.jsonl")
    if not os.path.exists(path):
        run([args.kvlearn, "gen", "--kind", kind, "--requests", str(requests), "--seed",
             str(seed), "--out", path])
    return path


def no_model_rows(args, path, pool):
    """The tested policy's row with no model (mode c), or the error kvlearn printed."""
    cmd = [args.kvlearn, "compare", "--trace", path, "--eval-from", "0.8", "--policies",
           args.policy, "--format", "json", "--pool-fraction", pool] + args.cost_arg
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit status {result.returncode}"
    return json.loads(result.stdout)["results"][0], None


def baseline_path(args):
    return os.path.join(args.work, "robustness-baseline-rows.json")


def load_baseline(args):
    """The baselines' rows cached by plain runs (a plain run replays its own cells again)."""
    if not os.path.exists(baseline_path(args)):
        return {}
    with open(baseline_path(args)) as f:
        return json.load(f)


def bound(cell):
    """The safety bound of a cell: the most `learned` may cost and pass."""
    return min(1.01 * min(cell["lru"], cell["gdsf"]), 1.005 * cell["lru"])


def print_ablation_diff(plain, ablated, moved=0.002):
    """Per mode, the ablated run against the plain one, cell by cell: the mean change of the
    tested policy's cost, the worst cell's cost / bound in each, and the cells whose cost
    moved by more than `moved` (a fraction)."""
    before = {(c["mode"], c["model"], c["cell"]): c for c in plain}
    for mode in sorted({c["mode"] for c in ablated}):
        pairs = [(before[k], c) for c in ablated if c["mode"] == mode
                 for k in [(c["mode"], c["model"], c["cell"])] if k in before]
        if not pairs:
            continue
        changes = [a["learned"] / p["learned"] - 1 for p, a in pairs]
        worst_p = max(pairs, key=lambda pa: pa[0]["learned"] / bound(pa[0]))[0]
        worst_a = max(pairs, key=lambda pa: pa[1]["learned"] / bound(pa[1]))[1]
        up = sum(c > moved for c in changes)
        down = sum(c < -moved for c in changes)
        print(f"vs plain, mode {mode}: mean cost change {100 * statistics.mean(changes):+.2f}% "
              f"(largest {100 * max(changes):+.2f}%, smallest {100 * min(changes):+.2f}%); "
              f"worst cell / bound {worst_p['learned'] / bound(worst_p):.4f} "
              f"({worst_p['model']} {worst_p['cell']}) -> {worst_a['learned'] / bound(worst_a):.4f} "
              f"({worst_a['model']} {worst_a['cell']}); cells moved > {100 * moved:.1f}%: "
              f"{up} up, {down} down of {len(pairs)}")


def robustness(args):
    """Runs the robustness grid; returns the exit status (1 when a cell fails safety or a
    mode cannot run)."""
    started = time.monotonic()
    header = (f"{'mode':<4} {'model':<14} {'cell':<17} {'lru':>8} {'gdsf':>8} "
              f"{'best online':>19} {'learned':>8} {'l/min':>6} {'l/lru':>6} {'gap %':>7} "
              f"{'safe':>4} {'cheapest':>8}")
    print(header, flush=True)
    cells = {mode: [] for mode in args.modes}
    written = []  # every cell, for --cells-out
    unrunnable = {}
    traces_list = list(robustness_traces(args))
    trained = {}  # trace path -> model, so --retrain trains each model once per run

    def model_of(path):
        if path not in trained:
            trained[path] = model_for(args, trace_stem(path), path)
        return trained[path]

    baseline = load_baseline(args)

    def baseline_rows(path, pool):
        """{policy: row} of the online baselines and belady on (path, pool): replayed by a
        plain run (and cached), read from the cache by an ablation run."""
        key = f"{trace_stem(path)} {pool} {' '.join(args.cost_arg)}"
        if args.ablate is None or key not in baseline:
            baseline[key] = {r["policy"]: r for r in compare(args, path, None,
                                                             ["--pool-fraction", pool],
                                                             ONLINE + ["belady"])}
        return baseline[key]

    chat_model = sample_model = None
    chat_seed = TUNING_SEEDS["chat"][0]
    if "b" in args.modes:
        if any(k != "chat" for k in args.kinds):
            chat_model = model_of(generated(args, "chat", chat_seed))
        if any(k != "sample" for k in args.kinds):
            sample_model = model_of(SAMPLE)

    def show(mode, model_name, name, pool, cell):
        written.append({"mode": mode, "model": model_name, "cell": f"{name} {pool}",
                        **{k: cell[k] for k in ("lru", "gdsf", "learned", "to_min", "to_lru",
                                                "safe", "cheapest", "gap")},
                        "best": cell["best"]["policy"]})
        best = cell["best"]
        gap_text = "-" if cell["gap"] is None else f"{100 * cell['gap']:.1f}"
        print(f"{mode:<4} {model_name:<14} {name + ' ' + pool:<17} {cell['lru']:8.1f} "
              f"{cell['gdsf']:8.1f} "
              f"{best['policy'] + ' ' + format(best['cost_seconds'], '.1f'):>19} "
              f"{cell['learned']:8.1f} {cell['to_min']:6.3f} {cell['to_lru']:6.3f} "
              f"{gap_text:>7} {'yes' if cell['safe'] else 'NO':>4} "
              f"{'yes' if cell['cheapest'] else 'no':>8}", flush=True)
        cells[mode].append(cell)

    for name, path in traces_list:
        kind = name.split("-")[0]
        own = model_of(path) if "a" in args.modes else None
        others = []  # (label, model) of mode b on this trace
        if kind != "sample" and sample_model:
            others.append(("sample", sample_model))
        if kind != "chat" and chat_model:
            others.append((f"chat-{chat_seed}", chat_model))
        for pool in args.pools:
            extra = ["--pool-fraction", pool]
            rows = baseline_rows(path, pool)
            if "a" in args.modes:
                learned = compare(args, path, own, extra, [args.policy])[0]
                show("a", "same-trace", name, pool, robustness_cell(rows, learned, args.policy))
            for label, model in others:
                learned = compare(args, path, model, extra, [args.policy])[0]
                show("b", label, name, pool, robustness_cell(rows, learned, args.policy))
            if "c" in args.modes and "c" not in unrunnable:
                learned, error = no_model_rows(args, path, pool)
                if error:
                    unrunnable["c"] = error
                    print(f"c    not yet runnable: {error}", flush=True)
                else:
                    show("c", "none", name, pool, robustness_cell(rows, learned, args.policy))

    failed = False
    print()
    for mode in args.modes:
        if mode in unrunnable:
            print(f"mode {mode}: not yet runnable ({unrunnable[mode]})")
            failed = True
            continue
        judged = cells[mode]
        safe = sum(c["safe"] for c in judged)
        failed |= safe < len(judged)
        gaps = [c["gap"] for c in judged if c["gap"] is not None]
        mean_gap = 100 * sum(gaps) / max(len(gaps), 1)
        line = f"mode {mode}: safety passed in {safe}/{len(judged)} cells"
        if mode == "a":
            cheapest = sum(c["cheapest"] for c in judged)
            line += (f"; cheapest online in {cheapest}/{len(judged)} "
                     f"({100 * cheapest / max(len(judged), 1):.0f}%)")
        print(f"{line}; mean cost gap closed {mean_gap:.1f}%")
    print(f"grid wall time: {time.monotonic() - started:.0f} s")
    if args.ablate is None:
        with open(baseline_path(args), "w") as f:
            json.dump(baseline, f)
    cells_out = args.cells_out or os.path.join(
        args.work, f"robustness-{args.seeds}-{args.ablate or 'plain'}.json")
    with open(cells_out, "w") as f:
        json.dump(written, f, indent=1)
    print(f"cells written to {cells_out}")
    if args.ablate is not None:
        plain = os.path.join(args.work, f"robustness-{args.seeds}-plain.json")
        if os.path.exists(plain):
            with open(plain) as f:
                print_ablation_diff(json.load(f), written)
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held-out", action="store_true", help="run the held-out seeds only")
    parser.add_argument("--held-out-set", type=int, default=max(HELD_OUT_SEEDS), choices=sorted(HELD_OUT_SEEDS),
                        help="which held-out seed set --held-out runs (1 to 19 are spent; 20 is current)")
    parser.add_argument("--kinds", default=None, type=lambda s: s.split(","),
                        help="comma-separated traces to judge: mixed, chat (issue 12's kinds), sample (the "
                        "shipped trace), fanout, batch (other shapes, SHAPE_SEEDS), rag, coder, "
                        "shift (tuning seeds); default mixed,chat,sample, and with --robustness "
                        + ",".join(ROBUSTNESS_KINDS))
    parser.add_argument("--pools", default="0.05,0.1,0.2", type=lambda s: s.split(","))
    parser.add_argument("--policy", default="learned", help="policy under test")
    parser.add_argument("--train-seeds", type=int, default=1, metavar="N",
                        help="judge each cell over N models, trained with seeds 1..N")
    parser.add_argument("--cluster", action="store_true", help="also compare cluster TTFT")
    parser.add_argument("--cluster-only", action="store_true",
                        help="compare cluster TTFT and cost only, without the pool cells")
    parser.add_argument("--cluster-hbm-runs", type=int, default=1, metavar="K",
                        help="average cluster TTFT over K HBM sizes 0.4%% apart (default 1)")
    parser.add_argument("--cluster-router", default="cache-aware",
                        help="router of the cluster replays (kvlearn compare --router; default cache-aware)")
    parser.add_argument("--robustness", action="store_true",
                        help="run the robustness grid (every gen kind on its judging seeds and "
                        "the sample, modes a/b/c; see the docstring) instead; exits 1 if a cell "
                        "fails safety")
    parser.add_argument("--modes", default="a,b,c", type=lambda s: s.split(","),
                        help="--robustness: training modes to run, comma-separated: a (same "
                        "trace), b (other traffic), c (no model); default a,b,c")
    parser.add_argument("--seeds", default="judging", choices=["judging", "tuning", "spent", "spent-first"],
                        help="--robustness: the judging seeds (ROBUSTNESS_SEEDS, never tuned on), "
                        "the tuning ones (ROBUSTNESS_TUNING_SEEDS) or spent judging ones, to diagnose "
                        "(spent: ROBUSTNESS_SPENT_SEEDS, the latest; spent-first: "
                        "ROBUSTNESS_FIRST_SPENT_SEEDS); default judging")
    parser.add_argument("--robustness-traces", type=int, default=2, choices=[1, 2],
                        help="--robustness: seeds per generated kind (default 2)")
    parser.add_argument("--requests", type=int, default=None, metavar="N",
                        help="--robustness: requests of every generated trace (default: "
                        "ROBUSTNESS_REQUESTS per kind)")
    parser.add_argument("--ablate", default=None, metavar="PART[,PART]",
                        help="--robustness: replay only the tested policy with these parts "
                        "switched off (KVLEARN_LEARNED_ABLATE; docs/learned_policy.md), the "
                        "baselines' rows read from the last plain run's cache under --work, "
                        "and compare its cells with that run's")
    parser.add_argument("--cells-out", default=None, metavar="FILE",
                        help="--robustness: where to write every cell as JSON (default "
                        "WORK/robustness-SEEDS-plain.json, or -PART.json with --ablate)")
    parser.add_argument("--kvlearn", default="build/cli/kvlearn")
    parser.add_argument("--work", default=None,
                        help="where traces and models are cached (default build/eval, with "
                        "--robustness build/eval-robust)")
    parser.add_argument("--retrain", action="store_true")
    parser.add_argument("--train-arg", action="append", default=[],
                        help="extra argument for kvlearn train (repeatable)")
    parser.add_argument("--cost-arg", action="append", default=[],
                        help="cost model argument for kvlearn train and compare alike "
                             "(repeatable), e.g. --cost-arg=--model-profile=llama3.3-70b; "
                             "use a --work of its own, models are cached by trace name")
    args = parser.parse_args()
    if args.robustness:
        for flag, given in (("--held-out", args.held_out), ("--cluster", args.cluster),
                            ("--cluster-only", args.cluster_only),
                            ("--train-seeds", args.train_seeds != 1)):
            if given:
                parser.error(f"{flag} does not apply to --robustness")
        args.kinds = args.kinds or ROBUSTNESS_KINDS
        for kind in args.kinds:
            if kind not in ROBUSTNESS_KINDS:
                parser.error(f"--kinds: unknown kind {kind!r} for --robustness "
                             f"(known: {', '.join(ROBUSTNESS_KINDS)})")
        for mode in args.modes:
            if mode not in ("a", "b", "c"):
                parser.error(f"--modes: unknown mode {mode!r} (known: a, b, c)")
        if args.requests is not None and args.requests < 10:
            parser.error("--requests must be at least 10 (the last 20% is judged)")
        args.work = args.work or "build/eval-robust"
        os.makedirs(args.work, exist_ok=True)
        # The switches reach the tested policy only: every other policy ignores them.
        if args.ablate is not None:
            os.environ[ABLATE_VARIABLE] = args.ablate
        else:
            os.environ.pop(ABLATE_VARIABLE, None)
        sys.exit(robustness(args))
    for flag, given in (("--modes", args.modes != ["a", "b", "c"]),
                        ("--seeds", args.seeds != "judging"),
                        ("--robustness-traces", args.robustness_traces != 2),
                        ("--requests", args.requests is not None),
                        ("--ablate", args.ablate is not None),
                        ("--cells-out", args.cells_out is not None)):
        if given:
            parser.error(f"{flag} applies to --robustness only")
    args.kinds = args.kinds or ["mixed", "chat", "sample"]
    args.work = args.work or "build/eval"
    if args.train_seeds < 1:
        parser.error("--train-seeds must be at least 1")
    known = {"sample", *TUNING_SEEDS, *SHAPE_SEEDS}
    for kind in args.kinds:
        if kind not in known:
            parser.error(f"--kinds: unknown kind {kind!r} (known: {', '.join(sorted(known))})")
        held_out_kinds = ("sample", *SHAPE_SEEDS, *HELD_OUT_SEEDS[args.held_out_set])
        if args.held_out and kind not in held_out_kinds:
            parser.error(f"--kinds: {kind!r} has no held-out seeds (held-out sets hold "
                         f"{', '.join(HELD_OUT_SEEDS[args.held_out_set])})")
    args.cluster = args.cluster or args.cluster_only
    os.makedirs(args.work, exist_ok=True)

    seeds = range(1, args.train_seeds + 1)
    several = args.train_seeds > 1
    sd_head = f" {'sd':>6}" if several else ""
    if not args.cluster_only:
        print(f"{'cell':<18} {'tested':>8}{sd_head} {'best other':>20} {'margin %':>9} "
              f"{'xfer/lru':>9} {'gap %':>7} pass")
    cells = passed = model_cells = mean_wins = 0
    gaps = []
    cluster_rows = []
    for name, path in traces(args):
        models = [model_for(args, name, path, seed) for seed in seeds]
        model = models[0]
        for pool in [] if args.cluster_only else args.pools:
            extra = ["--pool-fraction", pool]
            first = {r["policy"]: r for r in compare(args, path, models[0], extra)}
            runs = [first]
            for m in models[1:]:
                again = compare(args, path, m, extra, [args.policy, "lru", "belady"])
                runs.append({**first, **{r["policy"]: r for r in again}})
            cell = judge_over_models(runs, args.policy)
            best = cell["best"]
            cells += 1
            passed += cell["passed"]
            model_cells += cell["models"]
            mean_wins += cell["mean"] < best["cost_seconds"] and cell["xfer"] <= 1.0
            if cell["gap"] is not None:
                gaps.append(cell["gap"])
            margin = 100 * (best["cost_seconds"] - cell["mean"]) / best["cost_seconds"]
            gap_text = "-" if cell["gap"] is None else f"{100 * cell['gap']:.1f}"
            sd_text = f" {cell['sd']:6.1f}" if several else ""
            pass_text = (f"{cell['passed']}/{cell['models']}" if several else
                         "yes" if cell["passed"] else "NO")
            print(f"{name + ' ' + pool:<18} {cell['mean']:8.1f}{sd_text} "
                  f"{best['policy'] + ' ' + format(best['cost_seconds'], '.1f'):>20} "
                  f"{margin:9.2f} {cell['xfer']:9.3f} {gap_text:>7} {pass_text}", flush=True)
        if args.cluster:
            runs = cluster_runs(args, path, model)
            cluster_rows.append((name, [judge_cluster_field(runs, args.policy, field)
                                        for field in ("ttft_mean_ms", "ttft_p95_ms", "cost_seconds")]))
    if several and not args.cluster_only:
        print(f"passed by {passed} of {model_cells} (cell, model) pairs; cells whose mean beats "
              f"the best other: {mean_wins}/{cells}; mean cost gap closed: "
              f"{100 * sum(gaps) / max(len(gaps), 1):.1f}%")
    elif not args.cluster_only:
        print(f"cells passed: {passed}/{cells}; mean cost gap closed: "
              f"{100 * sum(gaps) / max(len(gaps), 1):.1f}%")
    if cluster_rows:
        k = args.cluster_hbm_runs
        lowest_head = f" {'lowest':>6}" if k > 1 else ""
        print(f"\n{'trace':<12} {'TTFT mean s':>12} {'best other':>20}{lowest_head} "
              f"{'TTFT p95 s':>11} {'best other':>20}{lowest_head} "
              f"{'cost s':>9} {'best other':>22}{lowest_head}")
        for name, judged in cluster_rows:
            cells = []
            # TTFT mean and p95 in seconds, then cost in seconds, as the header's columns.
            for (tested, best, best_value, lowest, _, _), scale, width, best_width, digits in zip(
                    judged, (1000, 1000, 1), (11, 11, 9), (20, 20, 22), (2, 2, 1)):
                lowest_text = f" {str(lowest) + '/' + str(k):>6}" if k > 1 else ""
                best_text = best + " " + format(best_value / scale, f".{digits}f")
                cells.append(f"{tested / scale:{width}.{digits}f} "
                             f"{best_text:>{best_width}}{lowest_text}")
            print(f"{name:<12} {' '.join(cells)}")
        if k > 1:
            print(f"(TTFT and cost averaged over {k} HBM sizes 0.4% apart around the default; "
                  f"lowest: runs where the tested policy had the lowest of all)")
            print(f"\n{'trace':<12} {'TTFT mean':>16} {'TTFT p95':>16} {'cost':>16}")
            for name, judged in cluster_rows:
                print(f"{name:<12} " + " ".join(f"{f'{d:+.1f}% ± {se:.1f}':>16}"
                                                for _, _, _, _, d, se in judged))
            print(f"(the tested policy's excess over the best other, paired size by size: "
                  f"mean ± standard error over the {k} sizes; negative: lower)")


if __name__ == "__main__":
    main()
