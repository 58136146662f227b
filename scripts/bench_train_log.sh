#!/usr/bin/env bash
# Time and peak memory of `kvlearn train --data-dir` against the length of the
# log: for each size, writes a synthetic log of that many request arrivals
# (build/bench/generate_event_log), trains on it and prints one line of
# /usr/bin/time -v's figures, then deletes the log.
#
#   ./scripts/bench_train_log.sh [EVENTS ...]   (default 10000000 30000000 100000000)
#
# Each line: events in the log, block accesses in it, the accesses kept by
# chain sampling (--max-accesses, default 2000000; both "all" when the log is
# within it), train's wall seconds, the seconds of its log reading (both
# passes) and its peak RSS (maximum resident set size, MB = 10^6 bytes).
# Training runs 1 epoch with --force: its part is the same at every size, the
# log's part is what grows. Logs go under ${BENCH_DIR:-build/bench-train-log}
# (about 55 bytes an event on disk); progress and train's output go to
# DIR/EVENTS.log.
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
build=${KVLEARN_BUILD_DIR:-build}
gen=$build/bench/generate_event_log
kvlearn=$build/cli/kvlearn
for tool in "$gen" "$kvlearn"; do
  [[ -x "$tool" ]] || { echo "bench_train_log.sh: no $tool: run ./scripts/build.sh" >&2; exit 1; }
done
[[ -x /usr/bin/time ]] || { echo "bench_train_log.sh: needs /usr/bin/time (GNU time)" >&2; exit 1; }
dir=${BENCH_DIR:-$build/bench-train-log}
mkdir -p "$dir"
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(10000000 30000000 100000000)
printf '%12s %14s %10s %9s %9s %8s\n' events accesses kept wall_s read_s rss_MB
for n in "${sizes[@]}"; do
  log="$dir/log-$n"
  out="$dir/$n.log"
  rm -rf "$log"
  "$gen" --dir "$log" --events "$n" > "$out" 2>&1
  /usr/bin/time -v "$kvlearn" train --data-dir "$log" --out "$dir/model-$n.pt" --epochs 1 \
    --force --quiet >> "$out" 2>&1
  rm -rf "$log"
  # "read N requests ... , T s" and "sampled branches: ..., K of A block accesses".
  read_s=$(sed -n 's/^read .* \([0-9.]*\) s$/\1/p' "$out")
  accesses=$(sed -n 's/^sampled branches: .*, \([0-9]*\) of \([0-9]*\) block accesses.*/\1 \2/p' "$out")
  [[ -n "$accesses" ]] || accesses="all all"  # within the budget: nothing sampled
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$out" |
    awk -F: '{ s = 0; for (i = 1; i <= NF; ++i) s = s * 60 + $i; print s }')
  rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$out")
  printf '%12d %14s %10s %9.1f %9s %8.0f\n' "$n" "${accesses#* }" "${accesses% *}" "$wall" \
    "$read_s" "$((rss_kb * 1024 / 1000000))"
done
