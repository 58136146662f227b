#!/usr/bin/python3
"""Where the LRU -> Belady cost gap of a trace comes from, and how much of it
an online policy could close. Runs `kvlearn compare` (lru, oracle-admission,
belady, and learned when --model is given) on the trace's last 20% of requests
and reads the trace itself; prints one row per pool fraction:

    scripts/gap_split.py --trace T [--model M] [--pools 0.05,0.1,0.2] [--eval-from 0.8]

Columns (seconds are cost seconds, docs/results.md; default cost model):
  gap s       cost_seconds of lru minus belady's: the LRU -> Belady cost gap
  which %     share of the gap closed by oracle-admission (LRU that refuses
              exactly the blocks never used again): what knowing *which* new
              blocks return is worth; the rest of the gap is knowing *when*
  once-full s transfer seconds of full blocks (as many tokens as the block
              size) whose only use in the trace is in the evaluated requests:
              blocks every policy that admits on a miss writes to the pool for
              nothing. Each costs bytes / link bandwidth + the per-transfer
              latency, as the cost model prices an admission.
  once-part s the same for partial blocks (fewer tokens: the tail of a prompt)
  once-full % once-full s / gap s
  learned %   cost_gap_closed of learned (with --model)

On `kvlearn gen --kind chat` traces a conversation's turn count is geometric
and its think times exponential (datasets/chat_workload.cc): whether a turn is
the last is independent of everything seen before it, and only the full blocks
of a conversation's last turn are used once. Nothing observable then tells a
full block used once from one that returns, and refusing a block that returns
loses its recompute (R - T, about 20 T under the default cost model), so the
best online admission keeps them all and pays once-full s: on such traces
100 - once-full % bounds the share of the gap an online policy closes
(docs/results.md, "The generalisation grid").

Standard library only; needs build/cli/kvlearn (or --kvlearn).
"""
import argparse
import json
import subprocess
import sys


def run_compare(args, pool, policies):
    cmd = [args.kvlearn, "compare", "--trace", args.trace, "--eval-from", str(args.eval_from),
           "--pool-fraction", pool, "--policies", ",".join(policies), "--format", "json"]
    if args.model:
        cmd += ["--model", args.model]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gap_split: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return {r["policy"]: r for r in json.loads(out.stdout)["results"]}


def config(args):
    out = subprocess.run([args.kvlearn, "compare", "--trace", args.trace, "--print-config"],
                         capture_output=True, text=True, check=True).stdout
    values = {}
    for line in out.splitlines():
        if line.startswith("kv bytes per token"):
            values["bytes_per_token"] = float(line.split()[4])
        elif line.startswith("block size"):
            values["block_size"] = int(line.split()[2])
        elif line.startswith("transfer latency"):
            values["latency_s"] = float(line.split()[2]) / 1000
        elif line.startswith("RDMA"):
            values["link_bytes_per_s"] = float(line.split()[1]) * 1e9
    return values


def once_used_transfer(args, c):
    """Transfer seconds of blocks used only once, in the evaluated requests,
    split into full and partial blocks."""
    with open(args.trace) as f:
        requests = [json.loads(line) for line in f if line.strip()]
    first_eval = int(len(requests) * args.eval_from)
    uses = {}
    tokens_at_use = {}  # block id -> tokens it held at its (only) use, if evaluated
    for i, r in enumerate(requests):
        ids = r["hash_ids"]
        for k, block in enumerate(ids):
            uses[block] = uses.get(block, 0) + 1
            if i >= first_eval:
                last = k == len(ids) - 1
                tokens = r["input_length"] - k * c["block_size"] if last else c["block_size"]
                tokens_at_use[block] = max(1, min(tokens, c["block_size"]))
    full = part = 0.0
    for block, tokens in tokens_at_use.items():
        if uses[block] != 1:
            continue
        seconds = tokens * c["bytes_per_token"] / c["link_bytes_per_s"] + c["latency_s"]
        if tokens == c["block_size"]:
            full += seconds
        else:
            part += seconds
    return full, part


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", required=True)
    parser.add_argument("--model", help="learned model: adds the learned column")
    parser.add_argument("--pools", default="0.05,0.1,0.2", type=lambda s: s.split(","))
    parser.add_argument("--eval-from", type=float, default=0.8)
    parser.add_argument("--kvlearn", default="build/cli/kvlearn")
    args = parser.parse_args()

    full, part = once_used_transfer(args, config(args))
    policies = ["lru", "oracle-admission", "belady"] + (["learned"] if args.model else [])
    print(f"{'pool':>5} {'gap s':>8} {'which %':>8} {'once-full s':>12} {'once-part s':>12} "
          f"{'once-full %':>12} {'learned %':>10}")
    for pool in args.pools:
        rows = run_compare(args, pool, policies)
        gap = rows["lru"]["cost_seconds"] - rows["belady"]["cost_seconds"]
        if gap <= 0:
            print(f"{pool:>5} {gap:8.1f}  (no gap: lru is as cheap as belady)")
            continue
        which = (rows["lru"]["cost_seconds"] - rows["oracle-admission"]["cost_seconds"]) / gap
        learned = rows.get("learned", {}).get("cost_gap_closed")
        learned_text = "-" if learned is None else f"{100 * learned:.1f}"
        print(f"{pool:>5} {gap:8.1f} {100 * which:8.1f} {full:12.1f} {part:12.1f} "
              f"{100 * full / gap:12.1f} {learned_text:>10}", flush=True)


if __name__ == "__main__":
    main()
