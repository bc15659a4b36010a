#!/usr/bin/env bash
# Benchmark: `sluice serve` under S3-style throttling. `sluice chaos-proxy` caps
# PutObject per key prefix (500/s by default) in front of one MinIO on loopback;
# an open-model load of 2,000 uploads/s of 10 KiB for 30 s goes through the
# gateway with every key under one prefix, then spread over 16 hashed shard
# prefixes; again at a scaled-down cap (40/s), and with no cap (the gateway's own
# ceiling here), beside warp's direct PUT rate into MinIO (the store's own ceiling).
# Installs what is missing (MinIO, s5cmd, warp), builds sluice in release
# mode, then runs throttle.py, which prints per-second tables and the targets.
# About 4 minutes per run (3 runs by default).
#
#   bench/throttle.sh [--runs N] [--rate 2000] [--duration 30] [--cap 500]
#                     [--scaled-cap 40] [--shards 16] [--latency 0ms] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd warp
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cargo build --release -p sluice-cli --quiet

exec python3 bench/throttle.py --sluice target/release/sluice "$@"
