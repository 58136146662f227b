#!/usr/bin/python3
"""Writes an A/B report (one self-contained HTML page) from compare JSON files or a sidecar's log.

Two inputs:

  FILE...        several `kvlearn compare --format json` outputs; each file is
                 one unit (one node, one day); each row (policy) is a column of
                 the report, in the files' order over time.
  --data-dir D --experiment FILE --pool-bytes N
                 a `kvlearn serve --experiment FILE` data dir: lists its nodes
                 (`kvlearn export-log --list-nodes`), gives each node its arm
                 by the sidecar's hash (docs/experiments.md), exports each
                 node's requests (`export-log --node`) and replays them with
                 `kvlearn compare --format json` under its arm's policy and
                 every shadow's, at --pool-bytes (the node's pool), over the
                 whole log and over --windows equal time windows of it (each
                 window replayed from an empty pool: the over-time plots only).
                 An arm's "registry:serving" or "registry:vN" model is the
                 file the data dir's model registry names now.

Writes into --out DIR: report.html (the PNGs embedded as base64), the PNGs
(cost_over_time.png, hit_ratio_over_time.png, cumulative_saving.png) and
report.json (every number of the page).

Numbers, all in compare's units (docs/results.md): cost s = prefill GPU-s +
transfer s; hit ratio = block hits / blocks requested; transfer GB = loaded +
admitted bytes / 1e9; cost per request = cost s / requests, each summed over
the units of a row first. A difference is row minus the baseline (--baseline,
default lru); its 95% interval is the 2.5th to 97.5th percentile over
--resamples (2,000) bootstrap resamples of the units, drawn with replacement
by numpy's default generator seeded with --seed (1): the units, not the
requests, are what is independent. The verdict compares --learned (default:
the first arm, else row, whose policy or name starts with "learned") with the
baseline: a saving when the interval of its cost per request excludes 0.

    build/cli/kvlearn compare --trace a.jsonl --format json --out a.json
    scripts/ab_report.py a.json b.json c.json --out report

Needs matplotlib and numpy (Debian: python3-matplotlib; scripts/setup.sh
installs it), hence the shebang naming Debian's interpreter.
"""
import argparse
import base64
import html
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

try:
    import matplotlib
    import numpy as np
except ImportError:
    sys.exit("ab_report.py: needs matplotlib and numpy (apt-get install python3-matplotlib) and "
             "Debian's /usr/bin/python3")

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

# What a row of a unit holds, summed over units: requests, cost s, block hits,
# block accesses, transfer bytes.
FIELDS = ("requests", "cost", "hits", "accesses", "transfer")
REQ, COST, HITS, ACC, XFER = range(len(FIELDS))

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- node -> arm

def fnv1a64(data):
    """FNV-1a over the bytes, from the published offset basis (core/fnv1a.h)."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 1099511628211) & MASK64
    return h


def node_hash_unit(node_id):
    """The node's point in [0, 1): splitmix64's first output from the FNV-1a
    state, top 53 bits / 2^53 (server/experiment.cc, NodeHashUnit)."""
    z = (fnv1a64(node_id.encode()) + 0x9e3779b97f4a7c15) & MASK64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK64
    z ^= z >> 31
    return (z >> 11) * 2.0 ** -53


def arm_of(arms, node_id):
    """Index of the node's arm: the first whose cumulative share exceeds its
    point, the last taking the rest (Experiment::ArmOf)."""
    u, cumulative = node_hash_unit(node_id), 0.0
    for i, arm in enumerate(arms[:-1]):
        cumulative += arm["share"]
        if u < cumulative:
            return i
    return len(arms) - 1


# ------------------------------------------------------------------- inputs

class Data:
    """Per row (arm, shadow or policy) and unit: the whole-input totals, and
    the totals in each time window (NaN-free; `present` says which units ran
    the row)."""

    def __init__(self, unit_word, units, windows):
        self.unit_word, self.units, self.windows = unit_word, units, windows
        self.rows = {}  # label -> {"kind", "policy", "whole": (n, F), "win": (n, W, F), "present": (n,)}

    def row(self, label, kind, policy):
        if label not in self.rows:
            n, w = len(self.units), len(self.windows)
            self.rows[label] = {"kind": kind, "policy": policy, "whole": np.zeros((n, len(FIELDS))),
                                "win": np.zeros((n, w, len(FIELDS))), "present": np.zeros(n, bool)}
        return self.rows[label]


def values(report, result):
    """A compare result row as FIELDS."""
    accesses = report["block_accesses"]
    return [report["requests"], result["cost_seconds"], result["block_hit_ratio"] * accesses,
            accesses, result["transfer_bytes"]]


def read_compare(path):
    try:
        with open(path) as f:
            report = json.load(f)
        rows = {r["policy"]: r for r in report["results"]}
        for r in rows.values():
            values(report, r)
    except (OSError, ValueError) as e:
        sys.exit(f"ab_report.py: {path}: {e}")
    except (KeyError, TypeError) as e:
        sys.exit(f"ab_report.py: {path}: lacks {e} (not kvlearn compare --format json?)")
    return report, rows


def from_compare_files(paths):
    """Each file a unit and a time window of its own, in the order given."""
    names = [os.path.basename(p) for p in paths]
    data = Data("files", names, names)
    for i, path in enumerate(paths):
        report, rows = read_compare(path)
        for policy, r in rows.items():
            row = data.row(policy, "policy", policy)
            row["whole"][i] = row["win"][i, i] = values(report, r)
            row["present"][i] = True
    return data


def run(args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ab_report.py: {shlex.join(args)} failed:\n{done.stderr.strip()}")
    return done.stdout


def registry_model(data_dir, reference):
    """The model file an arm's "registry:serving" or "registry:vN" names in the data
    dir's model registry (docs/experiments.md), as the sidecar resolves it now; None
    when nothing serves."""
    models = os.path.join(data_dir, "models")
    which = reference[len("registry:"):]
    if which == "serving":
        try:
            with open(os.path.join(models, "registry.json")) as f:
                version = json.load(f)["serving"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"ab_report.py: {models}/registry.json: {e}")
        if version is None:
            return None
    else:
        version = which.removeprefix("v")
    try:
        with open(os.path.join(models, f"v{version}.json")) as f:
            return os.path.join(models, json.load(f)["file"])
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"ab_report.py: {reference}: {e}")


def read_experiment(path, data_dir):
    try:
        with open(path) as f:
            x = json.load(f)
        arms = [{"name": a["name"], "policy": a["policy"], "model": a.get("model"),
                 "share": float(a["share"])} for a in x["arms"]]
        shadows = [{"name": s["name"], "policy": s["policy"], "model": s.get("model")}
                   for s in x.get("shadows", [])]
    except (OSError, ValueError) as e:
        sys.exit(f"ab_report.py: {path}: {e}")
    except (KeyError, TypeError) as e:
        sys.exit(f"ab_report.py: {path}: an arm or shadow lacks {e}")
    if not arms:
        sys.exit(f"ab_report.py: {path}: no arms")
    # A model path is relative to the experiment file, as the sidecar reads it.
    for p in arms + shadows:
        if p["model"] and p["model"].startswith("registry:"):
            p["model"] = registry_model(data_dir, p["model"])
        elif p["model"] and not os.path.isabs(p["model"]):
            p["model"] = os.path.join(os.path.dirname(os.path.abspath(path)), p["model"])
    return arms, shadows


def read_trace(path):
    with open(path) as f:
        return [line for line in f if line.strip()]


def replay(kvlearn, lines, policies, tmp, args):
    """compare's JSON rows by (policy, model) of the requests in `lines`;
    one compare per model."""
    trace = os.path.join(tmp, "replay.jsonl")
    with open(trace, "w") as f:
        f.writelines(lines)
    out = {}
    for model in sorted({m for _, m in policies}, key=lambda m: m or ""):
        names = sorted({p for p, m in policies if m == model})
        cmd = [kvlearn, "compare", "--trace", trace, "--policies", ",".join(names), "--pool-bytes",
               str(args.pool_bytes), "--format", "json", "--quiet"]
        cmd += ["--model", model] if model else []
        extra = shlex.split(args.compare_args)
        # Cost s does not depend on the prefill instances; one spares auto's
        # extra lru replay (only TTFT and utilization, unused here, change).
        cmd += extra if "--prefill-nodes" in extra else extra + ["--prefill-nodes", "1"]
        report = json.loads(run(cmd))
        for r in report["results"]:
            out[(r["policy"], model)] = values(report, r)
    return out


def from_data_dir(args):
    arms, shadows = read_experiment(args.experiment, args.data_dir)
    listed = run([args.kvlearn, "export-log", "--data-dir", args.data_dir, "--list-nodes"])
    nodes = [line.split("\t")[0] for line in listed.splitlines() if line]
    if not nodes:
        sys.exit(f"ab_report.py: {args.data_dir}: no node has request arrivals in the log")
    with tempfile.TemporaryDirectory(prefix="ab_report_") as tmp:
        traces = {}
        for i, node in enumerate(nodes):
            path = os.path.join(tmp, f"node{i}.jsonl")
            run([args.kvlearn, "export-log", "--data-dir", args.data_dir, "--node", node,
                 "--out", path, "--quiet"])
            traces[node] = read_trace(path)
        stamps = [json.loads(line)["timestamp"] for t in traces.values() for line in t]
        start, span = min(stamps), max(max(stamps) - min(stamps), 1)
        width = span / args.windows
        data = Data("nodes", nodes, [f"{k * width / 1000:.0f}" for k in range(args.windows)])
        for i, node in enumerate(nodes):
            arm = arms[arm_of(arms, node)]
            labelled = [(arm["name"], "arm", arm)] + [(s["name"], "shadow", s) for s in shadows]
            policies = [(p["policy"], p["model"]) for _, _, p in labelled]
            print(f"ab_report.py: node {node} ({i + 1}/{len(nodes)}): arm {arm['name']}, "
                  f"{len(traces[node])} requests", file=sys.stderr)
            whole = replay(args.kvlearn, traces[node], policies, tmp, args)
            by_window = [[] for _ in range(args.windows)]
            for line in traces[node]:
                k = int((json.loads(line)["timestamp"] - start) / width)
                by_window[min(k, args.windows - 1)].append(line)
            windows = [replay(args.kvlearn, w, policies, tmp, args) if w else {} for w in by_window]
            for label, kind, p in labelled:
                key = (p["policy"], p["model"])
                row = data.row(label, kind, p["policy"])
                row["whole"][i] = whole[key]
                row["present"][i] = True
                for k, w in enumerate(windows):
                    if w:
                        row["win"][i, k] = w[key]
    return data


# -------------------------------------------------------------- statistics

def resample_counts(n, resamples, seed):
    """(resamples, n): how often each unit is drawn in each bootstrap resample;
    row 0 is the data itself (every unit once)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    counts = np.zeros((resamples + 1, n))
    counts[0] = 1
    for b in range(resamples):
        counts[b + 1] = np.bincount(draws[b], minlength=n)
    return counts


def ratios(sums):
    """Cost per request, hit ratio, transfer GB per request from summed FIELDS
    (last axis); NaN where a resample drew no unit of the row."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"cost_per_request": sums[..., COST] / sums[..., REQ],
                "hit_ratio": sums[..., HITS] / sums[..., ACC],
                "transfer_gb_per_request": sums[..., XFER] / 1e9 / sums[..., REQ]}


def interval(samples):
    """Point (the data's), 2.5th and 97.5th percentiles of the resamples."""
    rest = samples[1:][~np.isnan(samples[1:])]
    if rest.size == 0:
        return [float(samples[0]), float("nan"), float("nan")]
    return [float(samples[0]), float(np.percentile(rest, 2.5)), float(np.percentile(rest, 97.5))]


def summarise(data, baseline, learned, counts):
    table, diffs = [], {}
    base = ratios(counts @ data.rows[baseline]["whole"])
    for label, row in data.rows.items():
        total = row["whole"].sum(axis=0)
        table.append({"row": label, "kind": row["kind"], "policy": row["policy"],
                      "units": int(row["present"].sum()), "requests": int(total[REQ]),
                      "cost_seconds": float(total[COST]),
                      "hit_ratio": float(total[HITS] / total[ACC]) if total[ACC] else None,
                      "transfer_gb": float(total[XFER] / 1e9),
                      "cost_per_request": float(total[COST] / total[REQ]) if total[REQ] else None})
        if label != baseline:
            mine = ratios(counts @ row["whole"])
            diffs[label] = {k: interval(mine[k] - base[k]) for k in mine}
    # Cumulative saving of the learned row over the baseline, window by
    # window: (baseline's cost per request - learned's) x learned's requests.
    win_learned = np.einsum("bn,nwf->bwf", counts, data.rows[learned]["win"])
    win_base = np.einsum("bn,nwf->bwf", counts, data.rows[baseline]["win"])
    with np.errstate(invalid="ignore", divide="ignore"):
        per_window = (win_base[..., COST] / win_base[..., REQ] -
                      win_learned[..., COST] / win_learned[..., REQ]) * win_learned[..., REQ]
    cumulative = np.nancumsum(per_window, axis=1)
    band = [interval(cumulative[:, k]) for k in range(len(data.windows))]
    return table, diffs, band


def pick(data, wanted, prefix, flag):
    if wanted:
        if wanted not in data.rows:
            sys.exit(f"ab_report.py: {flag} {wanted}: no such row (rows: {', '.join(data.rows)})")
        return wanted
    for kinds in (("arm",), ("arm", "shadow", "policy")):
        for label, row in data.rows.items():
            if row["kind"] in kinds and (label.startswith(prefix) or row["policy"].startswith(prefix)):
                return label
    sys.exit(f"ab_report.py: no {prefix} row (rows: {', '.join(data.rows)}); name one with {flag}")


def verdict(learned, baseline, difference, n, unit_word):
    """The report's first line from [point, low, high] of learned - baseline
    in cost s per request: a saving is minus the difference."""
    point, high, low = (-x for x in difference)
    if low > 0:
        return (f"{learned} saves {point:.4g} (95% CI [{low:.4g}, {high:.4g}]) cost s per request "
                f"against {baseline} over {n} {unit_word}")
    if high < 0:
        return (f"{learned} costs {-point:.4g} (95% CI [{-high:.4g}, {-low:.4g}]) cost s per request "
                f"more than {baseline} over {n} {unit_word}")
    return (f"no significant difference between {learned} and {baseline}: {learned} - {baseline} "
            f"= {-point:+.4g} cost s per request (95% CI [{-high:+.4g}, {-low:+.4g}] contains 0) "
            f"over {n} {unit_word}")


# ------------------------------------------------------------------ output

def over_time(data, field, ylabel, path, dpi):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = np.arange(len(data.windows))
    for i, (label, row) in enumerate(data.rows.items()):
        y = ratios(row["win"].sum(axis=0))[field]
        style = "--" if row["kind"] == "shadow" else "-"
        ax.plot(x, y, style, marker=".", label=f"{label} ({row['kind']})",
                color=plt.get_cmap("tab10")(i % 10))
    finish(ax, data, ylabel, fig, path, dpi)


def saving_plot(data, band, learned, baseline, path, dpi):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = np.arange(len(data.windows))
    point, low, high = (np.array(v) for v in zip(*band))
    ax.fill_between(x, low, high, alpha=0.25, label="95% bootstrap interval")
    ax.plot(x, point, marker=".", label=f"{learned} over {baseline}")
    ax.axhline(0, color="black", linewidth=0.8)
    finish(ax, data, f"cumulative cost s saved by {learned}", fig, path, dpi)


def finish(ax, data, ylabel, fig, path, dpi):
    step = max(1, len(data.windows) // 8)
    ax.set_xticks(range(0, len(data.windows), step))
    ax.set_xticklabels(data.windows[::step], fontsize=7, rotation=20)
    ax.set_xlabel("window start, s after the log's first request" if data.unit_word == "nodes"
                  else "file")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}g}"


def write_html(path, title, line, table, diffs, baseline, pngs, notes):
    cells = lambda tag, xs: "".join(f"<{tag}>{html.escape(str(x))}</{tag}>" for x in xs)  # noqa: E731
    rows = "".join("<tr>" + cells("td", [t["row"], t["kind"], t["policy"], t["units"], t["requests"],
                                        fmt(t["cost_seconds"]), fmt(t["hit_ratio"]),
                                        fmt(t["transfer_gb"]), fmt(t["cost_per_request"])]) + "</tr>"
                   for t in table)
    ci = lambda v: f"{v[0]:.4g} [{v[1]:.4g}, {v[2]:.4g}]"  # noqa: E731
    drows = "".join("<tr>" + cells("td", [label, ci(d["cost_per_request"]), ci(d["hit_ratio"]),
                                          ci(d["transfer_gb_per_request"])]) + "</tr>"
                    for label, d in diffs.items())
    images = "".join(
        f'<h2>{html.escape(caption)}</h2><img alt="{html.escape(caption)}" '
        f'src="data:image/png;base64,{base64.b64encode(open(p, "rb").read()).decode()}">'
        for caption, p in pngs)
    with open(path, "w") as f:
        f.write(f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:1em auto}}td,th{{padding:2px 8px;
text-align:right}}table{{border-collapse:collapse}}tr:nth-child(even){{background:#f3f3f3}}</style>
</head><body><h1>{html.escape(title)}</h1><p><b>{html.escape(line)}</b></p>
<h2>Arms and shadows</h2><table><tr>{cells("th", ["row", "kind", "policy", "units", "requests",
 "cost s", "hit ratio", "transfer GB", "cost s per request"])}</tr>{rows}</table>
<h2>Differences against {html.escape(baseline)} (row minus {html.escape(baseline)}; 95% CI)</h2>
<table><tr>{cells("th", ["row", "cost s per request", "hit ratio", "transfer GB per request"])}</tr>
{drows}</table>{images}<h2>How to read it</h2><p>{html.escape(notes)}</p></body></html>
""")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compare_json", nargs="*", help="kvlearn compare --format json files, one a unit")
    p.add_argument("--data-dir", help="a kvlearn serve --experiment data dir (instead of files)")
    p.add_argument("--experiment", help="the experiment file the sidecar ran (with --data-dir)")
    p.add_argument("--kvlearn", default=shutil.which("kvlearn") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "cli", "kvlearn"),
        help="the kvlearn binary (default: kvlearn on PATH, else this checkout's build/cli/kvlearn)")
    p.add_argument("--pool-bytes", type=int, help="each node's pool, bytes (with --data-dir)")
    p.add_argument("--windows", type=int, default=8, help="time windows of the over-time plots "
                   "(with --data-dir; each file is one otherwise)")
    p.add_argument("--compare-args", default="", help="more compare flags, e.g. the sidecar's "
                   "cost flags: '--model-profile llama3-8b'")
    p.add_argument("--baseline", help="the row the others are measured against (default: lru)")
    p.add_argument("--learned", help="the row of the verdict (default: the learned arm)")
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="directory to write")
    p.add_argument("--dpi", type=int, default=80)
    args = p.parse_args()

    if bool(args.compare_json) == bool(args.data_dir):
        p.error("give compare JSON files or --data-dir, not both nor neither")
    if args.data_dir and (not args.experiment or not args.pool_bytes):
        p.error("--data-dir needs --experiment and --pool-bytes")
    if args.windows < 1 or args.resamples < 1:
        p.error("--windows and --resamples must be at least 1")
    data = from_data_dir(args) if args.data_dir else from_compare_files(args.compare_json)
    baseline = pick(data, args.baseline, "lru", "--baseline")
    learned = pick(data, args.learned, "learned", "--learned")
    counts = resample_counts(len(data.units), args.resamples, args.seed)
    table, diffs, band = summarise(data, baseline, learned, counts)
    n = len(data.units)
    line = verdict(learned, baseline, diffs[learned]["cost_per_request"], n, data.unit_word) \
        if learned != baseline else f"{learned} is the baseline"

    os.makedirs(args.out, exist_ok=True)
    pngs = [("Cost per request over time", "cost_over_time.png"),
            ("Hit ratio over time", "hit_ratio_over_time.png"),
            (f"Cumulative saving of {learned} over {baseline}", "cumulative_saving.png")]
    pngs = [(c, os.path.join(args.out, f)) for c, f in pngs]
    over_time(data, "cost_per_request", "cost s per request", pngs[0][1], args.dpi)
    over_time(data, "hit_ratio", "block hit ratio", pngs[1][1], args.dpi)
    saving_plot(data, band, learned, baseline, pngs[2][1], args.dpi)
    notes = (f"Units: {n} {data.unit_word} ({', '.join(data.units[:20])}"
             f"{', ...' if n > 20 else ''}). Costs in kvlearn compare's units (docs/results.md). "
             f"Intervals: 2.5th to 97.5th percentile over {args.resamples} bootstrap resamples of "
             f"the {data.unit_word} (seed {args.seed}); sums over the units first, then ratios. "
             "Dashed lines are shadows. The cumulative saving adds, window by window, (the "
             f"baseline's cost per request - {learned}'s) x {learned}'s requests."
             + (" Each window is replayed from an empty pool, so window costs run above the "
                "whole-log figures of the tables." if data.unit_word == "nodes" else ""))
    write_html(os.path.join(args.out, "report.html"), "A/B report", line, table, diffs, baseline,
               pngs, notes)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump({"verdict": line, "baseline": baseline, "learned": learned, "units": data.units,
                   "unit_word": data.unit_word, "resamples": args.resamples, "seed": args.seed,
                   "rows": table, "differences": diffs, "windows": data.windows,
                   "cumulative_saving": band}, f, indent=1)
    print(line)
    print(f"wrote {os.path.join(args.out, 'report.html')}")


if __name__ == "__main__":
    main()
