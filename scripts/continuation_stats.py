#!/usr/bin/python3
"""How predictable is it that a conversation comes back? Statistics of a
Mooncake-format trace (JSON lines with timestamp in ms, input_length and
hash_ids), printed as plain text:

    scripts/continuation_stats.py datasets/mooncake_conversation_trace.jsonl [--horizon 300]

A request's *parent* is the latest earlier request that used the deepest of
its leading blocks seen before, if those leading blocks cover all of the
parent's full blocks (all but its last, partial one) and the parent was the
first to use its own last full block: the request repeats a prompt that added
something of its own, as the next turn of a conversation repeats the turn
before, rather than only a system prompt the two share. Its *turn* is the parent's turn + 1 (1 without a
parent). A request is *continued* if a request whose parent it is arrives
within --horizon seconds; requests closer than that to the trace's end are
left out, their outcome being unknown.

Printed:
  block accesses, the share that are a block's first use, and the share of
    first-used blocks that are ever used again;
  per turn: requests, share of all first-used blocks they bring, share of
    them continued within the horizon;
  ROC AUC (0.5 = no better than chance, 1 = perfect ranking) of single
    request features at ranking continued requests above the others: turn,
    seconds since the parent (shorter ranks higher), tokens the request adds
    to its parent's prompt (fewer ranks higher), its input length (shorter
    ranks higher); over all requests and over turn-1 requests alone; "-" where
    the feature is constant there (turn-1 requests have no parent).

Standard library only.
"""
import argparse
import json
import sys
from collections import Counter


def load(path):
    requests = []
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                requests.append((int(r["timestamp"]), int(r["input_length"]), list(r["hash_ids"])))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{n}: not a trace record ({e})")
    return requests


def auc(scores, labels):
    """Mann-Whitney AUC with tied scores sharing their average rank."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(labels)
    neg = len(labels) - pos
    if pos == 0 or neg == 0 or len(set(scores)) == 1:
        return None  # undefined, or a feature that is constant here
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def show(value):
    return "-" if value is None else f"{value:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--horizon", type=float, default=300, help="seconds (default 300)")
    args = ap.parse_args()
    if args.horizon <= 0:
        sys.exit("--horizon must be > 0")
    reqs = load(args.trace)
    if not reqs:
        sys.exit(f"{args.trace}: no requests")

    uses = Counter()  # block -> accesses so far; its keys are the blocks seen
    last_user, wrote_last_full = {}, []
    parent, turn, new_blocks = [], [], []
    for i, (_, _, ids) in enumerate(reqs):
        k = 0
        while k < len(ids) and ids[k] in uses:
            k += 1
        p = last_user[ids[k - 1]] if k > 0 else -1
        if p >= 0 and (k < len(reqs[p][2]) - 1 or not wrote_last_full[p]):
            p = -1  # shares only part of p's prompt, or only what p shared too
        parent.append(p)
        wrote_last_full.append(len(ids) > 1 and ids[-2] not in uses)
        turn.append(turn[p] + 1 if p >= 0 else 1)
        new_blocks.append(sum(1 for b in ids if b not in uses))
        uses.update(ids)
        for b in ids:
            last_user[b] = i

    horizon_ms = args.horizon * 1000
    continued = [False] * len(reqs)
    for c, p in enumerate(parent):
        if p >= 0 and reqs[c][0] - reqs[p][0] <= horizon_ms:
            continued[p] = True
    end = reqs[-1][0]
    known = [i for i in range(len(reqs)) if reqs[i][0] + horizon_ms <= end]
    if not known:
        sys.exit(f"{args.trace}: no request is --horizon ({args.horizon:g} s) before the trace's end")

    # Every distinct block had exactly one first use.
    accesses = sum(uses.values())
    reused = sum(1 for n in uses.values() if n > 1)
    print(f"{accesses} block accesses; {100 * len(uses) / accesses:.1f}% are a block's first use; "
          f"{100 * reused / len(uses):.1f}% of blocks are used again")
    print(f"\nrequests with a known outcome: {len(known)} (continued = within {args.horizon:g} s)")
    print(f"{'turn':>6} {'requests':>9} {'new blocks %':>13} {'continued %':>12}")
    total_new = sum(new_blocks[i] for i in known)
    for t in range(1, 7):
        rows = [i for i in known if min(turn[i], 6) == t]
        if not rows:
            continue
        label = f"{t}+" if t == 6 else str(t)
        print(f"{label:>6} {len(rows):>9} {100 * sum(new_blocks[i] for i in rows) / total_new:>13.1f} "
              f"{100 * sum(continued[i] for i in rows) / len(rows):>12.1f}")

    def since_parent(i):
        return -(reqs[i][0] - reqs[parent[i]][0]) if parent[i] >= 0 else -float("inf")

    def added_tokens(i):
        return -(reqs[i][1] - (reqs[parent[i]][1] if parent[i] >= 0 else 0))

    features = {
        "turn": lambda i: turn[i],
        "time since parent": since_parent,
        "tokens added": added_tokens,
        "input length": lambda i: -reqs[i][1],
    }
    first_turns = [i for i in known if turn[i] == 1]
    print(f"\n{'ROC AUC of':<20} {'all':>6} {'turn 1':>7}")
    for name, f in features.items():
        all_auc = auc([f(i) for i in known], [continued[i] for i in known])
        t1 = auc([f(i) for i in first_turns], [continued[i] for i in first_turns])
        print(f"{name:<20} {show(all_auc):>6} {show(t1):>7}")


if __name__ == "__main__":
    main()
