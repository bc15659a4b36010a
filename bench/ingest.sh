#!/usr/bin/env bash
# Benchmark: record streams into MinIO on loopback, in one run.
#   1. HTTP: 32 clients (`sluice bench load --api records`) posting requests of
#      500 records of 1 KiB to `POST /v1/streams/bench` (zstd output): records/s
#      acknowledged, MiB/s, acknowledgement p50/p99, gateway CPU-seconds per
#      million records and peak RSS, objects written and their mean size.
#   2. Standard input: `sluice ingest` of a file of 1 KiB records against
#      `sluice put` of the same bytes as one object: MiB/s ratio and CPU-seconds.
# The Kafka comparison of issue 16 is not here yet: there is no Kafka source.
#
#   bench/ingest.sh [--runs N] [--seconds S] [--stdin-mib M] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio
cargo build --release -p sluice-cli --quiet

exec python3 bench/ingest.py --sluice target/release/sluice "$@"
