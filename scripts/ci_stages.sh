#!/usr/bin/env bash
# The CI stages that follow the normal suite (scripts/test.sh runs them when
# CI=true or KVLEARN_CI_STAGES=1). Each prints its name and duration; a
# failing stage fails the run, after the others have run. docs/guarantees.md
# ("What CI runs") says what each proves and how long each took cold.
#
#   asan      the whole suite under AddressSanitizer + UBSan (own build dir)
#   tsan      the server and concurrency tests (ctest labels server, crash,
#             overload, concurrency) under ThreadSanitizer
#   fuzz      every libFuzzer target for KVLEARN_CI_FUZZ_SECONDS (default 60)
#   crash     ctest -L crash (kill -9 of the real binary, state checked after)
#   overload  ctest -L overload (10k idle streams, --max-streams, SIGTERM)
#
#   scripts/ci_stages.sh [STAGE...]       default: all five, in this order
#
# CI (no arguments) runs all five. tsan runs clean only because kvlearn waits
# on std::condition_variable, never absl::Mutex::Await or absl::Notification
# (Debian's Abseil is not instrumented: ThreadSanitizer would not see such a
# wait release its mutex), and with scripts/tsan_suppressions.txt.
#
# Build directories: <prefix>-asan, <prefix>-tsan, <prefix>-fuzz with prefix
# KVLEARN_CI_BUILD_PREFIX (default build); crash and overload run in the
# normal build, KVLEARN_BUILD_DIR (default build), which must be built.
set -euo pipefail
source "$(dirname "$0")/usage.sh"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# ccache keys on paths relative to the checkout's parent, so a fresh clone
# beside an earlier one (CI's) reuses its objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$(pwd)")}

prefix=${KVLEARN_CI_BUILD_PREFIX:-build}
case $prefix in
  /*) ;;
  *) prefix=$root/$prefix ;;
esac
normal_build=${KVLEARN_BUILD_DIR:-build}
fuzz_seconds=${KVLEARN_CI_FUZZ_SECONDS:-60}
jobs=${KVLEARN_JOBS:-2}
stages=("$@")
if [ ${#stages[@]} -eq 0 ]; then
  stages=(asan tsan fuzz crash overload)
fi

configure() {  # configure DIR CMAKE_ARGS...: once per directory
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
  fi
}

stage_asan() {
  local dir=$prefix-asan
  configure "$dir" -DKVLEARN_SANITIZE=address,undefined -DKVLEARN_BENCH=OFF
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

stage_tsan() {
  local dir=$prefix-tsan
  configure "$dir" -DKVLEARN_SANITIZE=thread
  cmake --build "$dir" -j "$jobs" --target kvlearn_tests_server kvlearn_tests_crash \
    kvlearn_tests_overload kvlearn_tests_concurrency
  # halt_on_error: a race fails its test even if the test's checks pass.
  # ignore_noninstrumented_modules: Debian's libraries are not instrumented
  # (scripts/tsan_suppressions.txt says why that matters).
  # symbolize_inline_frames=0: a suppression's top frame is the function the
  # code was compiled into, as without line tables (-g1), not the innermost
  # inlined helper (std::function inside gRPC's header code).
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 symbolize_inline_frames=0 suppressions=$root/scripts/tsan_suppressions.txt" \
    ctest --test-dir "$dir" -L '^(server|crash|overload|concurrency)$' --no-tests=error \
    --output-on-failure -j "$jobs"
}

stage_fuzz() {
  KVLEARN_FUZZ_BUILD_DIR="$prefix-fuzz" ./scripts/fuzz.sh "$fuzz_seconds"
}

stage_crash() {
  ctest --test-dir "$normal_build" -L '^crash$' --no-tests=error --output-on-failure -j "$jobs"
}

stage_overload() {
  ctest --test-dir "$normal_build" -L '^overload$' --no-tests=error --output-on-failure -j "$jobs"
}

failed=()
summary=()
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT
run_start=$(date +%s)
for s in "${stages[@]}"; do
  if ! declare -F "stage_$s" >/dev/null; then
    echo "ci: unknown stage '$s' (stages: asan tsan fuzz crash overload)" >&2
    exit 2
  fi
  echo "ci: stage $s: start"
  start=$(date +%s)
  # A subshell outside any `if`, so that set -e stops the stage at its
  # first failing command (inside an `if` condition bash ignores set -e).
  set +e
  (
    set -euo pipefail
    # CPU seconds of the stage's commands (the second line of `times`):
    # unlike wall time, it does not depend on what else the machine runs.
    # On exit, so that a failed stage reports them too (not in a pipe: that
    # would run `times` in a fresh subshell).
    trap 'times >"$cpu_file"' EXIT
    "stage_$s"
  )
  rc=$?
  set -e
  cpu=$(awk 'NR == 2 { split($1 " " $2, t, /[ms ]+/); printf "%.0f", t[1] * 60 + t[2] + t[3] * 60 + t[4] }' "$cpu_file")
  cpu=${cpu:-?}
  : >"$cpu_file"
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result=FAILED
    failed+=("$s")
  fi
  elapsed=$(($(date +%s) - start))
  echo "ci: stage $s: $result in ${elapsed}s (${cpu} CPU seconds)"
  summary+=("$(printf '%-9s %-6s %6ss  %6s CPU s' "$s" "$result" "$elapsed" "$cpu")")
done
echo "ci: stages done in $(($(date +%s) - run_start))s"
printf 'ci:   %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "ci: FAILED stages: ${failed[*]}" >&2
  exit 1
fi
