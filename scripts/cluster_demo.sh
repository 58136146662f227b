#!/usr/bin/env bash
# Runs a replica group on this machine and kills one replica in the middle of a load.
#
#   ./scripts/cluster_demo.sh [--out DIR] [--requests N] [--nodes N] [--small]
#       (default: build/cluster-demo, the shipped trace's 12,031 requests over
#        48 nodes; --small: 1,000 requests over 12 nodes; needs a build and
#        nats-server)
#
# Starts nats-server (JetStream, its store in DIR, a free port) and three
# `kvlearn serve --nats ... --replica-group demo` replicas (replica-0..2, TTL
# 2 s, heartbeat 0.5 s), plays datasets/mooncake_conversation_trace.jsonl
# over the nodes with `kvlearn loadgen --follow-owners --pool-fraction
# 0.02` entering at replica-0, and once every node has its pool on some replica and half the
# requests have arrived (the replicas' /metrics), kills replica-2 with kill
# -9. Prints loadgen's table, then the failover timeline: the kill at t = 0
# and, per node that moved, when its first call failed and when its new
# owner answered (seconds after the kill; from loadgen's move lines), and
# checks that the nodes that moved are exactly the ones
# rendezvous hashing gave replica-2 and that each went to the survivor it
# gives over replica-0 and replica-1. Steps print as they go; every process
# it started is stopped on exit, whatever happens. Exits 0 when every step
# and check passed, 1 otherwise, 77 when there is no nats-server.
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
out=build/cluster-demo
requests=0
nodes=48
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --requests) requests=${2:?--requests needs a number}; shift 2 ;;
    --nodes) nodes=${2:?--nodes needs a number}; shift 2 ;;
    --small) requests=1000; nodes=12; shift ;;
    *) echo "cluster_demo.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
kvlearn=${KVLEARN_BUILD_DIR:-build}/cli/kvlearn
[[ -x "$kvlearn" ]] || { echo "cluster_demo.sh: no $kvlearn: run ./scripts/build.sh first" >&2; exit 1; }
command -v nats-server > /dev/null || {
  echo "cluster_demo.sh: no nats-server on PATH (scripts/setup.sh installs it); skipped" >&2
  exit 77
}
step() { echo "[$(date +%H:%M:%S)] $*"; }
fail() { echo "cluster_demo.sh: $*" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"
trace=datasets/mooncake_conversation_trace.jsonl
if [[ $requests -gt 0 ]]; then
  head -n "$requests" "$trace" > "$out/trace.jsonl"
  trace="$out/trace.jsonl"
fi

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_until() {  # $1: seconds, then a command that succeeds when done
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [[ $SECONDS -lt $deadline ]] || return 1
    sleep 0.1
  done
}

nats_port=$(free_port)
step "starting nats-server -js on 127.0.0.1:$nats_port (store $out/nats-store)"
nats-server -js -a 127.0.0.1 -p "$nats_port" -sd "$out/nats-store" 2> "$out/nats-server.log" &
pids+=($!)
# Ready once it logs so (JetStream started, the port open).
wait_until 10 grep -q "Server is ready" "$out/nats-server.log" ||
  fail "nats-server was not ready within 10 s (see $out/nats-server.log)"

declare -a replica_pid replica_port
start_replica() {  # $1: 0, 1 or 2
  local r=$1
  "$kvlearn" serve --data-dir "$out/replica-$r" --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 --nats "nats://127.0.0.1:$nats_port" \
    --replica-group demo --advertise 127.0.0.1 --replica-name "replica-$r" \
    --replica-ttl 2 --replica-heartbeat 0.5 > "$out/replica-$r.out" 2> "$out/replica-$r.log" &
  replica_pid[r]=$!
  pids+=($!)
}
started() {  # $1: 0, 1 or 2
  local r=$1
  wait_until 20 grep -q '^port ' "$out/replica-$r.out" ||
    fail "replica-$r did not start within 20 s (see $out/replica-$r.log)"
  replica_port[r]=$(awk '/^port /{print $2}' "$out/replica-$r.out")
  step "replica-$r (pid ${replica_pid[r]}) listening on 127.0.0.1:${replica_port[r]}"
}
# The first creates the stream and the group's bucket; replicas that join an
# empty server at the same moment can fail to ("No responders").
start_replica 0
started 0
start_replica 1
start_replica 2
started 1
started 2
# Every replica reads the members back at each heartbeat (0.5 s).
sleep 1.5

entry=127.0.0.1:${replica_port[0]}
step "loadgen: $(wc -l < "$trace") requests over $nodes nodes, entering at replica-0 ($entry)"
# Pools of 2% of the trace's distinct blocks each, so that they fill and evict.
"$kvlearn" loadgen --target "$entry" --trace "$trace" --nodes "$nodes" --concurrency 4 \
  --pool-fraction 0.02 --follow-owners --quiet > "$out/loadgen.table" 2> "$out/loadgen.log" &
loadgen_pid=$!
pids+=($loadgen_pid)

total_metric() {  # $1: a series of /metrics, added up over the three replicas
  local total=0 r n
  for r in 0 1 2; do
    n=$("$kvlearn" ctl --target "127.0.0.1:${replica_port[r]}" metrics 2> /dev/null |
      awk -v series="$1" '$1 == series {print $2}')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
halfway() {  # every node has its pool, and half the requests arrived
  [[ $(total_metric kvlearn_pools) -ge $nodes &&
    $(total_metric 'kvlearn_events_ingested_total{kind="request_arrival"}') -ge $((trace_requests / 2)) ]]
}
trace_requests=$(wc -l < "$trace")
wait_until 300 halfway || fail "loadgen did not reach half the requests in 300 s"
kill -0 "$loadgen_pid" 2> /dev/null ||
  fail "loadgen finished before the kill (see $out/loadgen.log): give it more --requests"
kill_at=$(date +%s.%N)
kill -9 "${replica_pid[2]}"
wait "${replica_pid[2]}" 2> /dev/null || true  # reaped quietly: no "Killed" line
step "kill -9 replica-2 (pid ${replica_pid[2]})"

wait "$loadgen_pid" || fail "loadgen failed (see $out/loadgen.log): $(tail -n 1 "$out/loadgen.log")"
step "loadgen finished"
echo
cat "$out/loadgen.table"
echo

# Checks the moves against rendezvous hashing (server/replica_group.h) and
# prints the timeline.
python3 - "$out/loadgen.log" "$kill_at" "$nodes" "${replica_port[@]}" << 'EOF'
import re
import sys

log, kill_at, nodes = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
names = {f"127.0.0.1:{port}": f"replica-{r}" for r, port in enumerate(sys.argv[4:7])}
M = (1 << 64) - 1


def score(member, node):  # FNV-1a 64 of member '\0' node, then SplitMix64's finalizer
    h = 0xcbf29ce484222325
    for c in member.encode() + b"\0" + node.encode():
        h = ((h ^ c) * 0x100000001b3) & M
    h = ((h ^ (h >> 30)) * 0xbf58476d1ce4e5b9) & M
    h = ((h ^ (h >> 27)) * 0x94d049bb133111eb) & M
    return h ^ (h >> 31)


def owner(members, node):  # highest score, ties to the smaller name
    return max(sorted(members), key=lambda m: score(m, node))


moves = {}
pattern = re.compile(r"node (\S+) moved from (\S+) to (\S+): first failed call at ([\d.]+), "
                     r"answered again at ([\d.]+)")
for line in open(log):
    m = pattern.search(line)
    # A move before the kill is a view still settling at the start.
    if m and float(m.group(4)) >= kill_at:
        moves[m.group(1)] = (names.get(m.group(2), m.group(2)), names.get(m.group(3), m.group(3)),
                             float(m.group(4)) - kill_at, float(m.group(5)) - kill_at)

events = [(0.0, "kill -9 replica-2")]
for node, (src, dst, failed, answered) in moves.items():
    events.append((failed, f"{node}: first call to {src} failed"))
    events.append((answered, f"{node}: answered by {dst}"))
print("failover timeline (seconds after the kill)")
print(f"{'t':>8}  event")
for t, text in sorted(events):
    print(f"{t:8.3f}  {text}")

everyone = ["replica-0", "replica-1", "replica-2"]
survivors = everyone[:2]
ids = [f"loadgen-{i}" for i in range(nodes)]
expected = {n for n in ids if owner(everyone, n) == "replica-2"}
problems = []
if set(moves) != expected:
    problems.append(f"the nodes that moved, {sorted(moves)}, are not replica-2's, {sorted(expected)}")
for node, (src, dst, _, _) in moves.items():
    if src != "replica-2" or dst != owner(survivors, node):
        problems.append(f"{node} moved from {src} to {dst}, not from replica-2 to "
                        f"{owner(survivors, node)}")
if moves:
    last = max(a for _, _, _, a in moves.values())
    print(f"{len(moves)} of {nodes} nodes moved (rendezvous gave replica-2 {len(expected)}); "
          f"the last answered {last:.3f} s after the kill")
for p in problems:
    print("cluster_demo.sh: " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
step "every check passed"
