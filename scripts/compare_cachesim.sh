#!/usr/bin/env bash
# Replay speed side by side with libCacheSim's cachesim on the same block trace.
#
#   ./scripts/compare_cachesim.sh --cachesim PATH [--trace FILE] [--policies a,b]
#       [--fractions "0.01 0.1"] [--repeat N] [--work DIR]
#
# PATH is a cachesim binary built from libCacheSim's source (or $CACHESIM);
# docs/performance.md says how. FILE defaults to the shipped sample trace.
# Writes the trace's block accesses with `kvlearn compare --write-block-trace`
# (libCacheSim's oracleGeneral: one access per block of each request, root
# first, size = the block's KV bytes), then for each pool fraction and policy
# runs, N times each (default 5), alternating: cachesim with that policy alone
# at kvlearn's pool bytes, and `kvlearn compare` with that policy alone. Prints
# a table of the medians, what each rate counts in its header. Not part of the
# test suite: it needs a libCacheSim build. Needs a kvlearn build ($KVLEARN
# names another kvlearn binary; an export already in DIR, newer than the
# trace, is reused, so a kvlearn without --write-block-trace can be timed).
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
cachesim=${CACHESIM:-}
trace=datasets/mooncake_conversation_trace.jsonl
policies=lru,lfu,fifo,gdsf,s3fifo,sieve,arc
fractions="0.01 0.1"
repeat=5
work=build/compare-cachesim
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cachesim) cachesim=${2:?--cachesim needs a path}; shift 2 ;;
    --trace) trace=${2:?--trace needs a file}; shift 2 ;;
    --policies) policies=${2:?--policies needs a list}; shift 2 ;;
    --fractions) fractions=${2:?--fractions needs a list}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a count}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    *) echo "compare_cachesim.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
kvlearn=${KVLEARN:-${KVLEARN_BUILD_DIR:-build}/cli/kvlearn}
[[ -x "$kvlearn" ]] || { echo "compare_cachesim.sh: no $kvlearn: run ./scripts/build.sh first" >&2; exit 1; }
[[ -n "$cachesim" && -x "$cachesim" ]] ||
  { echo "compare_cachesim.sh: give a cachesim binary (--cachesim PATH or CACHESIM)" >&2; exit 1; }
cachesim=$(realpath "$cachesim")
# cachesim starts its hash table at 2^24 buckets (128 MiB touched page by page
# inside its timed loop) unless the trace's path holds "data/trace.", its test
# traces' names, when it starts at 2^16 and grows as needed (cache_init.h):
# the fair size for traces of a few hundred thousand blocks.
mkdir -p "$work/data"
blocks="$work/data/trace.oracleGeneral"
if [[ ! "$blocks" -nt "$trace" || ! -s "$work/export.txt" ]]; then
  "$kvlearn" compare --trace "$trace" --write-block-trace "$blocks" 2> "$work/export.txt"
fi
runs="$work/runs.tsv"
: > "$runs"
for fraction in $fractions; do
  for policy in ${policies//,/ }; do
    echo "compare_cachesim.sh: $policy at $fraction ($repeat runs each)" >&2
    for ((i = 0; i < repeat; i++)); do
      # One policy per process on both sides; --prefill-nodes 1 skips the
      # LRU sizing replay, which changes no decision.
      "$kvlearn" compare --trace "$trace" --policies "$policy" --pool-fraction "$fraction" \
        --prefill-nodes 1 --format json --quiet --out "$work/kvlearn.json" 2> /dev/null
      pool_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pool_bytes"])' \
        "$work/kvlearn.json")
      # From $work: cachesim appends its result to a file in the working directory.
      line=$(cd "$work" && "$cachesim" data/trace.oracleGeneral oracleGeneral "$policy" \
        "$pool_bytes" 2>&1 | grep 'throughput')
      python3 - "$work/kvlearn.json" "$fraction" "$policy" "$line" >> "$runs" <<'EOF'
import json, re, sys
row = json.load(open(sys.argv[1]))["results"][0]
m = re.search(r"(\d+) req, miss ratio ([0-9.]+), throughput ([0-9.]+) MQPS", sys.argv[4])
print("\t".join([sys.argv[2], sys.argv[3], m.group(3), str(row["accesses_per_second"] / 1e6),
                 str(1 - float(m.group(2))), str(row["block_hit_ratio"]), m.group(1)]))
EOF
    done
  done
done
python3 - "$runs" "$trace" "$repeat" "$(cat "$work/export.txt")" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split("\t")
    runs[(f[0], f[1])].append([float(x) for x in f[2:]])
print(f"trace {sys.argv[2]}; {sys.argv[4].strip()}")
print(f"medians of {sys.argv[3]} runs per cell, each side one policy per process, run alternately.")
print("cachesim M/s: cachesim's own 'throughput' line: requests / seconds of its simulate loop")
print("  (reading each 24-byte record from the mapped trace + cache->get); process start, trace")
print("  open and cache creation not counted; its hash table starts at 2^16 buckets and grows.")
print("kvlearn M/s: accesses_per_second of `kvlearn compare`: block accesses / seconds of the")
print("  pool replay's request loop (lookup, policy calls, admission, cost accounting); reading")
print("  and indexing the trace and building the policy not counted.")
print("hit: block hit ratio, cachesim's 1 - miss ratio beside kvlearn's block_hit_ratio; 'agree'")
print("  when they differ by at most 0.03 or 20% of the larger. They need not be equal: kvlearn's")
print("  pool holds prefixes (a block only under its resident parent, leaves evicted first, a hit")
print("  only on the resident prefix of a request), libCacheSim's objects are independent.")
print()
print(f"{'policy':<8} {'pool':>5} {'cachesim M/s':>13} {'kvlearn M/s':>12} {'ratio':>6} "
      f"{'hit cachesim':>12} {'hit kvlearn':>11} {'agree':>5}")
for (fraction, policy), rows in runs.items():
    cs, kv, hc, hk = (statistics.median(r[i] for r in rows) for i in range(4))
    agree = abs(hc - hk) <= max(0.03, 0.2 * max(hc, hk))
    print(f"{policy:<8} {float(fraction):>5.0%} {cs:>13.2f} {kv:>12.2f} {kv / cs:>6.1f} "
          f"{hc:>12.4f} {hk:>11.4f} {'yes' if agree else 'no':>5}")
EOF
