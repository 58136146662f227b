#!/usr/bin/python3
"""Fits kvlearn's reuse network in Python torch on the samples `kvlearn train
--samples-out` wrote, and saves a model file kvlearn reads (`compare --model`,
`serve --model`). A starting point for your own loss, data, widths or depth
(--hidden): the forward must stay as it is here (relu between layers, sigmoid
at the end), because kvlearn reads only the weights and computes this forward
itself (docs/training.md, "A model written in Python").

    kvlearn train --trace T --out kvlearn.pt --samples-out samples.csv
    scripts/fit_model.py --samples samples.csv --metadata-from kvlearn.pt --out mine.pt

It normalises by the mean and standard deviation of the train rows (1 for a
feature constant over them), fits full-batch Adam on the masked binary cross
entropy (censored labels, the empty cells, left out) of the train rows, keeps
the weights of the epoch with the lowest loss on the valid rows, and stops
after --patience epochs without improvement. Every --report epochs it prints:
  epoch        epochs done
  train loss   masked binary cross entropy per known label of the train rows (nats)
  valid loss   the same on the valid rows
  valid AUC    per horizon, the ROC AUC of that output on the valid rows with a
               known label (0.5 = chance; - where one class is missing)
The metadata (feature names, schema version, horizons) is copied from
--metadata-from, a model file `kvlearn train` wrote for the same trace; its
normalisation is replaced by the one fitted here. Needs Debian's python3-torch
and reads the whole CSV into memory: 1.04 M rows took 65 s to read and fit for one
epoch and 2.35 GB at peak (2 cores, shared with a build).
"""

import argparse
import csv
import json
import sys

import torch

METADATA = "kvlearn_metadata.json"


class KvlearnReuseMlp(torch.nn.Module):
    """kvlearn's network: normalise, then torch.relu after every layer but the
    last and torch.sigmoid after it. `widths` are the inputs, each hidden
    layer's width and the outputs; kvlearn reads any depth as w0, b0, w1, b1, ....
    forward loops over the layers in Python, so save it with torch.jit.trace,
    which writes the loop out layer by layer (torch.jit.script cannot compile
    the getattr)."""

    def __init__(self, mean, std, widths, seed):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("feature_mean", mean.clone())
        self.register_buffer("feature_std", std.clone())
        self.layers = len(widths) - 1
        for i in range(self.layers):
            fan_in = widths[i]
            bound = 1 / fan_in ** 0.5
            w = (torch.rand(widths[i + 1], fan_in, generator=generator) * 2 - 1) * bound
            b = (torch.rand(widths[i + 1], generator=generator) * 2 - 1) * bound
            setattr(self, f"w{i}", torch.nn.Parameter(w))
            setattr(self, f"b{i}", torch.nn.Parameter(b))

    def forward(self, x):
        h = (x - self.feature_mean) / self.feature_std
        for i in range(self.layers):
            h = torch.nn.functional.linear(h, getattr(self, f"w{i}"), getattr(self, f"b{i}"))
            h = torch.relu(h) if i + 1 < self.layers else torch.sigmoid(h)
        return h


def read_samples(path, feature_names):
    """(x, y, known) per split, from the CSV's named columns."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        missing = [n for n in feature_names if n not in columns]
        if missing:
            sys.exit(f"fit_model.py: {path} lacks the model's feature columns {missing[:3]}: "
                     "samples and model come from different kvlearn builds")
        labels = [c for c in columns if c.startswith("reused_within_")]
        rows = {"train": ([], [], []), "valid": ([], [], [])}
        for line, row in enumerate(reader, start=2):
            if row["split"] not in rows:
                sys.exit(f"fit_model.py: {path}:{line}: split is {row['split']!r}, "
                         "not train or valid")
            x, y, known = rows[row["split"]]
            try:
                x.append([float(row[n]) for n in feature_names])
                y.append([float(row[c] or 0) for c in labels])
            except ValueError as e:
                sys.exit(f"fit_model.py: {path}:{line}: {e}")
            known.append([row[c] != "" for c in labels])
    out = {}
    for split, (x, y, known) in rows.items():
        if not x:
            sys.exit(f"fit_model.py: {path} has no {split} rows")
        out[split] = (torch.tensor(x), torch.tensor(y), torch.tensor(known))
    return labels, out


def masked_bce(p, y, known):
    loss = torch.nn.functional.binary_cross_entropy(p, y, reduction="none")
    return (loss * known).sum() / known.sum().clamp_min(1)


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return None
    # Rank-sum form: ties count half; O(n log n) for a million rows.
    order = torch.cat([pos, neg]).argsort()
    ranks = torch.empty(len(order), dtype=torch.float64)
    ranks[order] = torch.arange(1, len(order) + 1, dtype=torch.float64)
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", required=True, help="CSV from kvlearn train --samples-out")
    parser.add_argument("--metadata-from", required=True,
                        help="a model file kvlearn train wrote for the same trace")
    parser.add_argument("--out", required=True, help="model file to write (.pt)")
    parser.add_argument("--hidden", default="32,32",
                        help="comma-separated widths of the hidden layers, one or more "
                             "(default 32,32, as kvlearn train)")
    parser.add_argument("--epochs", type=int, default=300, help="maximum full-batch epochs")
    parser.add_argument("--patience", type=int, default=30,
                        help="stop after this many epochs without a lower valid loss")
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=1, help="seed of the initial weights")
    parser.add_argument("--report", type=int, default=25, help="print a line every N epochs")
    args = parser.parse_args()

    extra = {METADATA: ""}
    try:
        torch.jit.load(args.metadata_from, _extra_files=extra)
        metadata = json.loads(extra[METADATA])
    except (RuntimeError, ValueError) as e:
        sys.exit(f"fit_model.py: {args.metadata_from}: not a kvlearn model file ({e})")
    try:
        hidden = [int(w) for w in args.hidden.split(",")]
    except ValueError:
        hidden = []
    if not hidden or min(hidden) < 1:
        sys.exit(f"fit_model.py: --hidden {args.hidden}: one or more positive widths, "
                 "comma-separated, e.g. 32,32")

    labels, data = read_samples(args.samples, metadata["feature_names"])
    horizons = [float(c[len("reused_within_"):-1]) for c in labels]
    if horizons != [float(h) for h in metadata["horizons_seconds"]]:
        sys.exit(f"fit_model.py: the samples' horizons {horizons} are not the model's "
                 f"{metadata['horizons_seconds']}: they come from different runs")
    x, y, known = data["train"]
    vx, vy, vknown = data["valid"]
    print(f"{len(x)} train rows, {len(vx)} valid rows, {len(labels)} horizons", file=sys.stderr)
    mean = x.mean(0)
    std = x.std(0)
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    net = KvlearnReuseMlp(mean, std, [x.shape[1]] + hidden + [len(labels)], args.seed)
    optimiser = torch.optim.Adam(net.parameters(), lr=args.lr)
    best, best_state, since_best = float("inf"), None, 0
    for epoch in range(1, args.epochs + 1):
        optimiser.zero_grad()
        loss = masked_bce(net(x), y, known)
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            valid = masked_bce(net(vx), vy, vknown)
        if valid < best:
            best, since_best = float(valid), 0
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
        else:
            since_best += 1
        if epoch % args.report == 0 or since_best >= args.patience or epoch == args.epochs:
            with torch.no_grad():
                p = net(vx)
            aucs = [auc(p[:, k][vknown[:, k]], vy[:, k][vknown[:, k]]) for k in range(len(labels))]
            shown = " ".join("  -  " if a is None else f"{a:.3f}" for a in aucs)
            print(f"epoch {epoch:4d}  train loss {float(loss):.4f}  valid loss {float(valid):.4f}  "
                  f"valid AUC {shown}", file=sys.stderr)
        if since_best >= args.patience:
            break
    net.load_state_dict(best_state)
    metadata["feature_mean"] = mean.tolist()
    metadata["feature_std"] = std.tolist()
    metadata["created_by"] = "scripts/fit_model.py " + " ".join(sys.argv[1:])
    traced = torch.jit.trace(net, vx[:1])
    torch.jit.save(traced, args.out, _extra_files={METADATA: json.dumps(metadata)})
    print(f"wrote {args.out}: valid loss {best:.4f}")


if __name__ == "__main__":
    main()
