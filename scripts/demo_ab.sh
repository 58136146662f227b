#!/usr/bin/env bash
# Runs an A/B experiment end to end on the shipped trace and writes its report.
#
#   ./scripts/demo_ab.sh [--out DIR]   (default build/ab-report; needs a build)
#
# Starts `kvlearn serve --experiment` with an lru arm and a learned arm (half
# the nodes each) and gdsf and s3fifo shadows, plays the first half of
# datasets/mooncake_conversation_trace.jsonl over 16 nodes with `kvlearn
# loadgen`, trains a model from the sidecar's log (`kvlearn train --data-dir`,
# which registers it in the data dir's model registry), promotes it with
# `kvlearn model promote --sidecar` (refused when it costs more than lru on the
# newest logged requests; else the registry's serving pointer moves and the
# sidecar reloads its experiment, whose learned arm names "registry:serving"),
# plays the second half, and writes the report with scripts/ab_report.py
# (which replays each node's whole log under the final experiment). Steps
# print as they go; the sidecar is stopped on exit, whatever happens.
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
out=build/ab-report
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    *) echo "demo_ab.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
kvlearn=${KVLEARN_BUILD_DIR:-build}/cli/kvlearn
[[ -x "$kvlearn" ]] || { echo "demo_ab.sh: no $kvlearn: run ./scripts/build.sh first" >&2; exit 1; }
trace=datasets/mooncake_conversation_trace.jsonl
work="$out/work"
rm -rf "$work"
mkdir -p "$work"
step() { echo "[$(date +%H:%M:%S)] $*"; }

half=$(($(wc -l < "$trace") / 2))
head -n "$half" "$trace" > "$work/first.jsonl"
tail -n +"$((half + 1))" "$trace" > "$work/second.jsonl"
experiment="$work/experiment.json"
# The learned arm serves whatever version the registry serves: none at first
# (learned then runs on its lru and gdsf experts), the promoted one after.
printf '%s\n' '{"arms": [{"name": "lru", "policy": "lru", "share": 0.5},' \
  '{"name": "learned", "policy": "learned", "model": "registry:serving", "share": 0.5}],' \
  '"shadows": [{"name": "gdsf", "policy": "gdsf"}, {"name": "s3fifo", "policy": "s3fifo"}]}' \
  > "$experiment"

step "starting kvlearn serve --experiment (arms lru and learned, shadows gdsf and s3fifo)"
"$kvlearn" serve --data-dir "$work/data" --experiment "$experiment" --listen 127.0.0.1:0 \
  --metrics-listen "" > "$work/serve.out" 2> "$work/serve.log" &
server=$!
trap 'kill "$server" 2> /dev/null; wait "$server" 2> /dev/null || true' EXIT
for _ in $(seq 600); do
  [[ -s "$work/serve.out" ]] && break
  kill -0 "$server" 2> /dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
target="127.0.0.1:$(awk '{print $2; exit}' "$work/serve.out")"

step "loadgen: first half ($half requests) over 16 nodes, pool 10% of its distinct blocks"
"$kvlearn" loadgen --target "$target" --trace "$work/first.jsonl" --nodes 16 --pool-fraction 0.1 \
  --quiet > "$work/loadgen1.txt" 2>&1
pool=$(sed -n 's/.*pool \([0-9]*\) bytes per node.*/\1/p' "$work/loadgen1.txt" | head -n 1)
[[ -n "$pool" ]] || { echo "demo_ab.sh: loadgen did not say its pool:" >&2; cat "$work/loadgen1.txt" >&2; exit 1; }
echo "  pool $pool bytes per node"

step "train a model from the sidecar's log (kvlearn train --data-dir registers it)"
# --force: promote's guard below, not train's own verdict, decides what serves.
"$kvlearn" train --data-dir "$work/data" --out "$work/model.pt" --force --quiet \
  > "$work/train.txt" 2>&1
version=$(sed -n 's/.*registered as v\([0-9]*\).*/\1/p' "$work/train.txt" | head -n 1)
[[ -n "$version" ]] || { echo "demo_ab.sh: train registered nothing:" >&2; cat "$work/train.txt" >&2; exit 1; }

step "promote v$version: priced against lru on the newest logged requests; if no costlier, the registry serves it and the sidecar reloads its experiment"
if "$kvlearn" model promote "$version" --data-dir "$work/data" --sidecar "$target" --quiet \
  > "$work/promote.txt" 2> "$work/promote.log"; then
  grep -E '^  (v[0-9]+ \(candidate\)|lru) |reloaded its experiment|serves \(was' "$work/promote.txt" || true
elif grep -q "refused: v$version costs more" "$work/promote.log"; then
  grep -E '^  (v[0-9]+ \(candidate\)|lru) ' "$work/promote.txt" || true
  step "keep: the model costs more than lru there, the learned arm keeps its experts"
else
  cat "$work/promote.log" >&2
  exit 1
fi

step "loadgen: second half over the same 16 nodes"
"$kvlearn" loadgen --target "$target" --trace "$work/second.jsonl" --nodes 16 --pool-bytes "$pool" \
  --quiet > "$work/loadgen2.txt" 2>&1

step "report (replays every node's log under its arm and the shadows)"
scripts/ab_report.py --data-dir "$work/data" --experiment "$experiment" --kvlearn "$kvlearn" \
  --pool-bytes "$pool" --out "$out" 2> "$work/report.log"
step "done: open $out/report.html"
