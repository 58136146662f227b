#!/usr/bin/env python3
"""Error of `kvlearn plan --sample` against the whole trace's plan.

Runs `kvlearn plan --format json` once on the whole trace and once per
--rates entry with `--sample R` (same flags otherwise), and prints per rate the
largest differences over every swept pool and policy: hit ratio (block and
token, in points: 1 point = 0.01) and cost s (in % of the whole run's).
`no-cache` is left out (its cost is exact by construction of the scale).

    scripts/sample_error.py --trace t.jsonl \\
        --rates 0.01,0.1 -- --sizes 8

Extra arguments after `--` go to every `kvlearn plan` run.
Output, one line per rate: rate, requests kept, max |d block hit| pt,
max |d token hit| pt, max |d cost| %, and the policy and pool of the largest
cost error; with --json, the same as one JSON object per line.
"""
import argparse
import json
import subprocess
import sys


def plan(kvlearn, trace, extra):
    out = subprocess.run([kvlearn, "plan", "--trace", trace, "--format", "json", "--quiet"] +
                         extra, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def rows(p):
    """{(pool_fraction, policy): (block hit, token hit, cost s)}."""
    out = {}
    for size in p["sizes"]:
        for r in size["comparison"]["results"]:
            if r["policy"] == "no-cache":
                continue
            out[(size["pool_fraction"], r["policy"])] = (
                r["block_hit_ratio"], r["token_hit_ratio"],
                r["cost_seconds"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvlearn", default="kvlearn", help="the binary (default: kvlearn on PATH)")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--rates", default="0.01,0.1")
    ap.add_argument("--salt", default="0")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    whole = rows(plan(a.kvlearn, a.trace, a.extra))
    for rate in a.rates.split(","):
        p = plan(a.kvlearn, a.trace, a.extra + ["--sample", rate, "--sample-salt", a.salt])
        sampled = rows(p)
        d_block = d_token = d_cost = 0.0
        worst = None
        for key, (b, t, c) in whole.items():
            sb, st, sc = sampled[key]
            d_block = max(d_block, abs(sb - b))
            d_token = max(d_token, abs(st - t))
            rel = abs(sc - c) / c if c > 0 else 0.0
            if rel >= d_cost:
                d_cost, worst = rel, key
        kept = p["sample"]["kept_requests"]
        if a.json:
            print(json.dumps({"trace": a.trace, "rate": float(rate), "salt": int(a.salt),
                              "kept_requests": kept, "block_hit_points": 100 * d_block,
                              "token_hit_points": 100 * d_token, "cost_percent": 100 * d_cost,
                              "worst": {"pool_fraction": worst[0], "policy": worst[1]}}))
        else:
            print(f"rate {rate}: {kept} requests kept; max |d hit| {100 * d_block:.2f} pt "
                  f"(block), {100 * d_token:.2f} pt (token); max |d cost| {100 * d_cost:.2f}% "
                  f"({worst[1]} at pool {100 * worst[0]:.3g}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
