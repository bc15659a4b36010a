#!/usr/bin/env bash
# Benchmark: an import from a URL (`sluice serve --imports`, POST /v1/imports)
# against the plain pipe `curl URL | sluice put - s3://…`, the same 1 GiB from
# the same origin (a `sluice serve` on a directory, ranges served, on
# 127.0.0.2) into one MinIO on loopback, in one run. Installs MinIO and s5cmd
# when missing, builds sluice in release mode, then runs imports.py.
#
#   bench/imports.sh [--runs N] [--size BYTES] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd
cargo build --release -p sluice-cli --quiet

exec python3 bench/imports.py --sluice target/release/sluice "$@"
