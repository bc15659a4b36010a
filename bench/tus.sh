#!/usr/bin/env bash
# Benchmark: 1 GiB through tus in PATCH chunks of 64 MiB and 5 MiB, `sluice serve`
# against tusd (S3 store) in front of one MinIO on loopback, in one run. Installs
# what is missing (MinIO, s5cmd, tusd through the Go toolchain), builds sluice in
# release mode (it is also the client: `sluice bench load --api tus`), runs tus.py.
#
#   bench/tus.sh [--runs N] [--chunks 64,5] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd tusd
cargo build --release -p sluice-cli --quiet

exec python3 bench/tus.py --sluice target/release/sluice "$@"
