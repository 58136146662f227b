#!/usr/bin/env bash
# Installs the Debian packages kvlearn builds against, only those missing.
# Idempotent: a second run installs nothing and makes no network call.
#
#   scripts/setup.sh [--fuzz]
#
# --fuzz adds clang and libFuzzer's runtime (scripts/fuzz.sh; the CI stages),
# so that a new machine runs one apt-get update for everything.
set -euo pipefail
source "$(dirname "$0")/usage.sh"

fuzz=false
case "${1:-}" in
  "") ;;
  --fuzz) fuzz=true ;;
  *)
    echo "setup: unknown argument '$1' (usage: scripts/setup.sh [--fuzz])" >&2
    exit 2
    ;;
esac

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtbb-dev libeigen3-dev librocksdb-dev libabsl-dev
  libsimdjson-dev libcpp-httplib-dev libcli11-dev
  zlib1g-dev  # CRC-32 of model file records (models/torch_archive.cc)
  libgtest-dev libgmock-dev libbenchmark-dev
  cppzmq-dev libzmq3-dev libmsgpack-cxx-dev  # engine KV events (engine/)
  libnats-dev nats-server  # scale-out over NATS JetStream (serve --nats, bridge; their tests)
  openssl  # the sidecar's TLS tests make their certificates with it
  python3-matplotlib
  python3-grpcio python3-protobuf  # the Python retention client (clients/python)
  python3-torch  # a test opens kvlearn's model files with Python torch
  python3-prometheus-client  # a test parses /metrics with Prometheus' own parser
)
if $fuzz; then
  packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: need root to install packages (run as root or install them yourself)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
