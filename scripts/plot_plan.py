#!/usr/bin/python3
"""Draws a pool plan into two PNGs: cost against pool size, and saving against LRU.

Input: the JSON of `kvlearn plan` (`--format json`, or plan.json under
`--out-dir`). Writes, into --out-dir (default: beside the JSON):

  plan_cost.png    cost s (prefill GPU-s + w x transfer s over the evaluated
                   requests) against pool GB, one line per policy; offline
                   oracles dashed, no-cache (no pool at all) dotted
  plan_saving.png  cost saved against lru per hour of traffic (GPU-hours per
                   hour: cost s saved / evaluated window s) against pool GB

A vertical line marks the pool of --pool-fraction. Both x axes are log-scaled
like the sweep.

    build/cli/kvlearn plan --trace t.jsonl --out-dir plan
    scripts/plot_plan.py plan/plan.json

Needs matplotlib (Debian: python3-matplotlib; scripts/setup.sh installs it),
hence the shebang naming Debian's interpreter.
"""
import argparse
import json
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot_plan.py: needs matplotlib (apt-get install python3-matplotlib) and Debian's "
             "/usr/bin/python3")

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


BOUND = "lower bound"


def load(path):
    """The plan, with per policy its cost at every pool; exits naming what is wrong."""
    try:
        with open(path) as f:
            plan = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"plot_plan.py: {path}: {e}")
    if not isinstance(plan, dict) or not plan.get("sizes") or "policies" not in plan:
        sys.exit(f"plot_plan.py: {path}: no 'sizes' and 'policies' (write it with kvlearn plan "
                 "--format json or --out-dir)")
    gb, costs = [], {p: [] for p in plan["policies"]}
    try:
        for size in plan["sizes"]:
            gb.append(size["pool_bytes"] / 1e9)
            rows = {r["policy"]: r["cost_seconds"] for r in size["comparison"]["results"]}
            for p in costs:
                costs[p].append(rows[p])
        # Plans written before the bound existed have none.
        if all(size.get("cost_lower_bound_seconds") is not None for size in plan["sizes"]):
            costs[BOUND] = [size["cost_lower_bound_seconds"] for size in plan["sizes"]]
    except (KeyError, TypeError) as e:
        sys.exit(f"plot_plan.py: {path}: a size lacks {e} (not kvlearn plan's JSON?)")
    if "lru" not in costs:
        sys.exit(f"plot_plan.py: {path}: no lru row to measure savings against")
    return plan, gb, costs


def style(plan, policy):
    """One colour per policy, the same in both plots: online policies by their
    place in the plan's list, oracles dashed in dark colours of their own."""
    if policy == "no-cache":
        return {"linestyle": ":", "color": "grey"}
    if policy == BOUND:
        return {"linestyle": "-.", "color": "black"}
    oracles = plan.get("oracles", [])
    if policy in oracles:
        return {"linestyle": "--", "color": ["black", "firebrick", "navy"][oracles.index(policy) % 3]}
    online = [p for p in plan["policies"] if p not in oracles and p != "no-cache"]
    return {"linestyle": "-", "color": plt.get_cmap("tab10")(online.index(policy) % 10)}


def draw(plan, gb, series, ylabel, title, out, dpi):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for policy, ys in series.items():
        ax.plot(gb, ys, label=policy, linewidth=1.3, marker=".", markersize=4,
                **style(plan, policy))
    user_gb = plan["pool_fraction"] * plan["distinct_block_bytes"] / 1e9
    ax.axvline(user_gb, color="black", linewidth=0.8, alpha=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("pool (GB, 1e9 bytes; vertical line: --pool-fraction)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    print(f"wrote {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("plan", help="JSON written by kvlearn plan")
    p.add_argument("--out-dir", help="directory for the PNGs (default: the JSON's)")
    p.add_argument("--dpi", type=int, default=90)
    args = p.parse_args()

    plan, gb, costs = load(args.plan)
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.plan))
    os.makedirs(out_dir, exist_ok=True)
    name = os.path.basename(plan.get("trace", args.plan))
    w = plan.get("transfer_weight", 1)
    draw(plan, gb, costs, f"cost s (prefill GPU-s + {w:g} x transfer s)",
         f"{name}: cost against pool size", os.path.join(out_dir, "plan_cost.png"), args.dpi)

    window = plan.get("window_seconds") or 0
    lru = costs["lru"]
    savings = {policy: [(l - c) / window if window > 0 else l - c for l, c in zip(lru, ys)]
               for policy, ys in costs.items() if policy not in ("lru", "no-cache")}
    ylabel = ("saved against lru, GPU-hours per hour of traffic" if window > 0
              else "cost s saved against lru (empty window: no rate)")
    draw(plan, gb, savings, ylabel, f"{name}: saving against lru",
         os.path.join(out_dir, "plan_saving.png"), args.dpi)


if __name__ == "__main__":
    main()
