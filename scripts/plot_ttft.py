#!/usr/bin/python3
"""Draws TTFT CDFs, one curve per router (and retention policy), into a PNG.

Input: the file written by `kvlearn compare --cluster ... --ttft-samples FILE`
({"trace", "samples": [{"router", "policy", "ttft_ms": [...]}]}). Several
files (e.g. one per seed or per workload) become side-by-side panels.

    scripts/plot_ttft.py fanout.samples.json batch.samples.json -o ttft_cdf.png
    scripts/plot_ttft.py s.json --routers cache-aware,burst-replicate:4 --log

Needs matplotlib (Debian: python3-matplotlib; scripts/setup.sh installs it),
hence the shebang naming Debian's interpreter rather than whatever python3
comes first on PATH.
"""
import argparse
import json
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot_ttft.py: needs matplotlib (apt-get install python3-matplotlib) and Debian's "
             "/usr/bin/python3")

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        data = json.load(f)
    if "samples" not in data:
        sys.exit(f"{path}: no 'samples' (write it with kvlearn compare --cluster --ttft-samples)")
    return data


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="--ttft-samples JSON files, one panel each")
    p.add_argument("-o", "--out", default="ttft_cdf.png", help="PNG to write")
    p.add_argument("--routers", help="comma-separated rows to draw (default: all)")
    p.add_argument("--titles", help="'|'-separated panel titles (default: trace names)")
    p.add_argument("--log", action="store_true", help="log-scale TTFT axis")
    p.add_argument("--dpi", type=int, default=80)
    args = p.parse_args()

    wanted = set(args.routers.split(",")) if args.routers else None
    titles = args.titles.split("|") if args.titles else None
    styles = ["-", "--", "-.", ":"]
    fig, axes = plt.subplots(1, len(args.files), figsize=(5 * len(args.files), 3.6),
                             squeeze=False)
    loaded = [load(path) for path in args.files]
    if wanted:
        known = sorted({row["router"] for data in loaded for row in data["samples"]})
        unknown = sorted(wanted - set(known))
        if unknown:
            sys.exit(f"plot_ttft.py: --routers: no rows for {', '.join(unknown)} in "
                     f"{', '.join(args.files)}; the routers there: {', '.join(known)}")
    for i, data in enumerate(loaded):
        ax = axes[0][i]
        policies = {row["policy"] for row in data["samples"]}
        for k, row in enumerate(data["samples"]):
            if wanted and row["router"] not in wanted:
                continue
            xs = sorted(v / 1000.0 for v in row["ttft_ms"])
            if not xs:
                continue
            ys = [(k + 1) / len(xs) for k in range(len(xs))]
            label = row["router"] if len(policies) == 1 else f'{row["router"]} / {row["policy"]}'
            ax.step(xs, ys, where="post", label=label, linewidth=1.3,
                    linestyle=styles[k % len(styles)])
        ax.set_title(titles[i] if titles else os.path.basename(data["trace"]), fontsize=10)
        ax.set_xlabel("TTFT (s)")
        if args.log:
            ax.set_xscale("log")
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
