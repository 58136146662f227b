#!/usr/bin/env bash
# Configures and builds kvlearn into build/ (or $KVLEARN_BUILD_DIR).
# Extra arguments go to CMake, e.g. ./scripts/build.sh -DKVLEARN_SANITIZE=address,undefined
# KVLEARN_JOBS sets the parallel jobs (default 2).
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout's parent, so a fresh clone
# beside an earlier one (CI's) reuses its objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$(pwd)")}
build_dir=${KVLEARN_BUILD_DIR:-build}
jobs=${KVLEARN_JOBS:-2}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "$jobs"
