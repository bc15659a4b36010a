#!/usr/bin/env bash
# Benchmark: `sluice put` against `s5cmd cp` and `aws s3 cp`, side by side in one
# run, against one MinIO on loopback. Installs the peers when missing (MinIO and
# s5cmd through the Go toolchain, the aws cli through pip), builds sluice in
# release mode, then hands over to put.py, which runs the cases and prints the table;
# warp PUTs objects of each file size in the same rotation (the store's ceiling).
#
#   bench/put.sh [--runs N] [--sizes 1,4] [--warp-seconds S] [--warp-concurrency 1,4] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd aws warp
cargo build --release -p sluice-cli --quiet

exec python3 bench/put.py --sluice target/release/sluice "$@"
