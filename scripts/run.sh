#!/usr/bin/env bash
# Installs what is missing, builds, trains the learned policy on the first 60%
# of the sample trace shipped in datasets/, and prints the A/B table of every
# policy on its last 20% (the 60-80% slice is the training's validation set).
#
#   ./scripts/run.sh [CMAKE_ARG...]   (arguments go to scripts/build.sh)
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh "$@"
build_dir=${KVLEARN_BUILD_DIR:-build}
kvlearn="$build_dir/cli/kvlearn"
trace=datasets/mooncake_conversation_trace.jsonl
model="$build_dir/models/mooncake_conversation.pt"
mkdir -p "$(dirname "$model")"
# OpenBLAS picks its matrix kernels by CPU, and its AVX-512 kernels round
# differently from its AVX2 ones, so one seed trains slightly different weights
# on different machines. Where the CPU has AVX2 and FMA (and the caller chose no
# kernels), use the AVX2 ones so that this table is the one in the README.
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=Haswell
fi
# --force: the table below shows `learned` whatever train's verdict on the
# validation split (printed first; docs/training.md, "kvlearn train").
"$kvlearn" train --trace "$trace" --train-until 0.6 --valid-until 0.8 --out "$model" --force
"$kvlearn" compare --trace "$trace" --model "$model" --eval-from 0.8
