#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ in build-fuzz/ (or $KVLEARN_FUZZ_BUILD_DIR)
# with clang, -DKVLEARN_FUZZ=ON, ASan + UBSan, and runs each for SECONDS
# (default 60), niced, on a working copy of its seed corpus
# (build-fuzz/corpus/<fuzzer>/; fuzz/corpus/ stays as committed). A crash
# leaves its input in build-fuzz/crashes/<fuzzer>/ and makes the script exit
# non-zero, and so does a fuzzer that ran fewer than
# KVLEARN_FUZZ_MIN_EXECS_PER_SECOND (default 100) x SECONDS inputs: the slowest
# fuzzer ran about 3,100 a second (docs/guarantees.md, "Fuzzing"), so a run 30
# times slower did not fuzz, it was starved or stuck. Installs clang (Debian packages clang, libclang-rt-14-dev)
# through scripts/setup.sh if it is missing; the normal build does not need it.
#
#   scripts/fuzz.sh [SECONDS] [FUZZER...]      e.g. scripts/fuzz.sh 600 model_file_fuzzer
set -euo pipefail
source "$(dirname "$0")/usage.sh"

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds_each="${1:-60}"
min_execs=$((${KVLEARN_FUZZ_MIN_EXECS_PER_SECOND:-100} * seconds_each))
shift || true
fuzzers=("$@")
if [ ${#fuzzers[@]} -eq 0 ]; then
  fuzzers=(mooncake_reader_fuzzer model_file_fuzzer sidecar_handlers_fuzzer kv_event_decoder_fuzzer
    mlp_forward_fuzzer pools_snapshot_fuzzer auth_metadata_fuzzer)
fi

# clang and libFuzzer's runtime, with whatever else the build needs, through
# setup.sh (nothing to do, and no network call, when they are present).
"$root/scripts/setup.sh" --fuzz

build="${KVLEARN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
if [ ! -f "$build/build.ninja" ]; then  # configure once
  CCACHE_BASEDIR="$(dirname "$root")" cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DKVLEARN_FUZZ=ON
fi
mkdir -p "$build"
# Several runs of this script may share build-fuzz/: one build at a time.
CCACHE_BASEDIR="$(dirname "$root")" flock "$build/.fuzz-build.lock" \
  nice -n 10 ninja -C "$build" -j2 "${fuzzers[@]}"

# Leaks are not findings here: LibTorch and gRPC keep process-lifetime
# allocations that LeakSanitizer would report at every exit.
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
status=0
for f in "${fuzzers[@]}"; do
  corpus="$build/corpus/$f"
  crashes="$build/crashes/$f"
  mkdir -p "$corpus" "$crashes"
  cp -n "$root/fuzz/corpus/$f/"* "$corpus/" 2>/dev/null || true
  log="$build/fuzz-$f.log"
  echo "fuzz: $f for ${seconds_each}s (log $log)"
  start=$(date +%s)
  # Crash inputs of earlier runs stay in $crashes (git-ignored) until removed;
  # only the ones this run writes count against it.
  stamp="$build/.fuzz-started-$f"
  touch "$stamp"
  # Wall-time bound: libFuzzer stops after -max_total_time, checked between
  # inputs, and an input over -timeout is a finding; what it does not count
  # is loading the binary (LibTorch, gRPC), which on a machine whose cores
  # are busy with unniced work took up to 37 s (docs/guarantees.md,
  # "Fuzzing"). `timeout` interrupts a run still going SECONDS + 60 s after
  # its start: libFuzzer prints its statistics and exits (status 124 here),
  # which is no finding; a run that ignores the interrupt is killed 30 s
  # later and fails.
  set +e
  timeout --signal=INT --kill-after=30 $((seconds_each + 60)) \
    nice -n 10 "$build/fuzz/$f" -max_total_time="$seconds_each" -timeout=25 \
    -rss_limit_mb=4096 -detect_leaks=0 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  if [ $rc -eq 0 ]; then
    result=ok
  elif [ $rc -eq 124 ] && [ -z "$(find "$crashes" -type f -newer "$stamp")" ]; then
    result="ok (interrupted at the wall-time bound)"
  else
    result=FAILED
    status=1
  fi
  elapsed=$(($(date +%s) - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [ "$result" != FAILED ] && { [ "$execs" = "?" ] || [ "$execs" -lt "$min_execs" ]; }; then
    result="FAILED (ran $execs inputs, under the minimum of $min_execs)"
    status=1
  fi
  new_crashes=$(find "$crashes" -type f -name 'crash-*' -newer "$stamp" | wc -l)
  old_crashes=$(($(find "$crashes" -type f -name 'crash-*' | wc -l) - new_crashes))
  echo "fuzz: $f $result: $execs executions in ${elapsed}s, corpus $(ls "$corpus" | wc -l) inputs, crash inputs $new_crashes (and $old_crashes from earlier runs)"
  if [ "$result" = FAILED ]; then
    # CI keeps only this output: the sanitizer's report and each new crash
    # input as hex, enough to replay it (xxd -r -p > input; $build/fuzz/$f input).
    echo "fuzz: $f: the end of its log:"
    grep -v -E '^#[0-9]+' "$log" | tail -n 60 | sed 's/^/  | /'
    find "$crashes" -type f -newer "$stamp" | head -n 3 | while read -r input; do
      echo "fuzz: $f: crash input $(basename "$input") ($(stat -c %s "$input") bytes), hex:"
      od -An -v -tx1 "$input" | tr -d ' \n' | fold -w 120 | sed 's/^/  | /'
      echo
    done
  fi
done
exit $status
