#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
# Extra arguments go to CMake (e.g. -DKVLEARN_SANITIZE=address,undefined).
# With CI=true or KVLEARN_CI_STAGES=1 (what .ci/run gets), the CI stages
# follow: sanitizers, fuzzers, crash and overload tests (scripts/ci_stages.sh).
#
#   ./scripts/test.sh [CMAKE_ARG...]
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
start=$(date +%s)
ci_stages=false
if [ "${CI:-}" = true ] || [ "${KVLEARN_CI_STAGES:-}" = 1 ]; then
  ci_stages=true
fi
if $ci_stages; then
  ./scripts/setup.sh --fuzz  # the fuzz stage's clang too: one apt-get update
else
  ./scripts/setup.sh
fi
./scripts/build.sh "$@"
build_dir=${KVLEARN_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j 2
if $ci_stages; then
  echo "ci: stage suite (setup, build, ctest): ok in $(($(date +%s) - start))s"
  KVLEARN_BUILD_DIR="$build_dir" ./scripts/ci_stages.sh
fi
