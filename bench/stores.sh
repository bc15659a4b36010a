#!/usr/bin/env bash
# Benchmark: the same transfers on S3 (MinIO) and Azure Blob (Azurite), CLI and
# gateway, 1 GiB and 10,000 x 10 KiB, in one run (bench/stores.py). Installs
# MinIO and warp when missing and Azurite with the test clients (npm), builds
# sluice in release mode.
#
#   bench/stores.sh [--runs N] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio warp
npm install --prefix tests/clients --no-audit --no-fund --loglevel=error >/dev/null
cargo build --release -p sluice-cli --quiet

exec python3 bench/stores.py --sluice target/release/sluice \
  --azurite tests/clients/node_modules/.bin/azurite-blob "$@"
