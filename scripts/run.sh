#!/usr/bin/env bash
# Installs what is missing, builds, and prints the A/B table of retention
# policies on the sample trace shipped in datasets/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh "$@"
build_dir=${KVLEARN_BUILD_DIR:-build}
"$build_dir/cli/kvlearn" compare --trace datasets/mooncake_conversation_trace.jsonl
