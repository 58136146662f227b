#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
# Extra arguments go to CMake (e.g. -DKVLEARN_SANITIZE=address,undefined).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh "$@"
build_dir=${KVLEARN_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j 2
