#!/usr/bin/env bash
# Runs an A/B experiment end to end on the shipped trace and writes its report.
#
#   ./scripts/demo_ab.sh [--out DIR]   (default build/ab-report; needs a build)
#
# Starts `kvlearn serve --experiment` with an lru arm and a learned arm (half
# the nodes each) and gdsf and s3fifo shadows, plays the first half of
# datasets/mooncake_conversation_trace.jsonl over 16 nodes with `kvlearn
# loadgen`, exports the log, trains a model on it, evaluates it against lru on
# that log with `kvlearn compare`, gives it to the learned arm (rewrites the
# experiment file, `kvlearn ctl reload-experiment`) only if it costs less,
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
write_experiment() {  # $1: the learned arm's model entry ("" for none)
  printf '%s\n' '{"arms": [{"name": "lru", "policy": "lru", "share": 0.5},' \
    "{\"name\": \"learned\", \"policy\": \"learned\", $1\"share\": 0.5}]," \
    '"shadows": [{"name": "gdsf", "policy": "gdsf"}, {"name": "s3fifo", "policy": "s3fifo"}]}' \
    > "$experiment"
}
write_experiment ""

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

step "export-log and train a model on the logged requests"
"$kvlearn" export-log --data-dir "$work/data" --out "$work/logged.jsonl" --quiet 2> /dev/null
# --force: the guard below, not train's own verdict, decides what serves.
"$kvlearn" train --trace "$work/logged.jsonl" --out "$work/model.pt" --force --quiet \
  > "$work/train.txt" 2>&1

step "evaluate: the model against lru on the logged requests"
"$kvlearn" compare --trace "$work/logged.jsonl" --model "$work/model.pt" --policies lru,learned \
  --pool-bytes "$pool" --format json --quiet > "$work/evaluate.json" 2> "$work/evaluate.log"
verdict=$(/usr/bin/python3 -c '
import json, sys
rows = {r["policy"]: r["cost_seconds"] for r in json.load(open(sys.argv[1]))["results"]}
print("promote" if rows["learned"] < rows["lru"] else "keep",
      "%.1f" % rows["learned"], "%.1f" % rows["lru"])
' "$work/evaluate.json")
read -r decision learned_cost lru_cost <<< "$verdict"
echo "  learned with the model: $learned_cost cost s, lru: $lru_cost cost s"
if [[ "$decision" == promote ]]; then
  step "promote: the learned arm gets the model (kvlearn ctl reload-experiment)"
  write_experiment '"model": "model.pt", '
  "$kvlearn" ctl --target "$target" reload-experiment
else
  step "keep: the model costs no less than lru, the learned arm keeps its experts"
fi

step "loadgen: second half over the same 16 nodes"
"$kvlearn" loadgen --target "$target" --trace "$work/second.jsonl" --nodes 16 --pool-bytes "$pool" \
  --quiet > "$work/loadgen2.txt" 2>&1

step "report (replays every node's log under its arm and the shadows)"
scripts/ab_report.py --data-dir "$work/data" --experiment "$experiment" --kvlearn "$kvlearn" \
  --pool-bytes "$pool" --out "$out" 2> "$work/report.log"
step "done: open $out/report.html"
