#!/usr/bin/env bash
# Benchmark: many files up and down (10,000 x 10 KiB, 1,000 x 1 MiB, 20 x 256 MiB)
# with `sluice put DIR` / `sluice get PREFIX/` against s5cmd, aws s3 cp
# --recursive and rclone copy, and a second sync of an unchanged tree against
# aws s3 sync, in one run against one MinIO on loopback. Installs the peers when
# missing, builds sluice in release mode, then runs many.py.
#
#   bench/many.sh [--runs N] [--cases 10000x10KiB,...] [--sync-files N] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd aws rclone warp
cargo build --release -p sluice-cli --quiet

exec python3 bench/many.py --sluice target/release/sluice "$@"
