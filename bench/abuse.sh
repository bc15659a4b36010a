#!/usr/bin/env bash
# Benchmark: normal uploads through `sluice serve` (1 KiB and 64 MiB, by `sluice
# bench load`) alone and with each attack beside them (trickling PUTs and tus
# PATCHes, slowloris, 5,000 idle connections, a form header flood, 1-byte PATCH
# streams), in one run, in front of one MinIO on loopback. Installs MinIO and
# s5cmd when missing, builds sluice in release mode, then runs abuse.py.
#
#   bench/abuse.sh [--runs N] [--seconds S] [--attacks idle,slowloris,...] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cargo build --release -p sluice-cli --quiet

exec python3 bench/abuse.py --sluice target/release/sluice "$@"
