#!/usr/bin/env bash
# Benchmark: `sluice serve` against tusd (S3 store) in front of one MinIO on
# loopback, in one run: relayed 1 GiB / 4 GiB uploads and 1,000 / 10,000-upload
# storms, plus warp's direct small-object PUT rate. Installs what is missing
# (MinIO, s5cmd, tusd v2.10.1, warp v1.0.0 through the Go toolchain), builds sluice
# in release mode, then runs gateway.py.
#
#   bench/gateway.sh [--runs N] [--sizes 1,4] [--storms 1000,10000] [--store minio|dir] [--busy N] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd tusd warp
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cargo build --release -p sluice-cli --quiet

exec python3 bench/gateway.py --sluice target/release/sluice "$@"
