#!/usr/bin/env bash
# Configures and builds kvlearn into build/ (or $KVLEARN_BUILD_DIR).
# Extra arguments go to CMake, e.g. ./scripts/build.sh -DKVLEARN_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${KVLEARN_BUILD_DIR:-build}
jobs=${KVLEARN_JOBS:-2}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "$jobs"
