#!/usr/bin/env bash
# Benchmark: record streams into MinIO on loopback, in one run.
#   1. HTTP: 32 clients (`sluice bench load --api records`) posting requests of
#      500 records of 1 KiB to `POST /v1/streams/bench` (zstd output): records/s
#      acknowledged, MiB/s, acknowledgement p50/p99, gateway CPU-seconds per
#      million records and peak RSS, objects written and their mean size.
#   2. Standard input: `sluice ingest` of a file of 1 KiB records against
#      `sluice put` of the same bytes as one object: MiB/s ratio and CPU-seconds.
#   3. Kafka (3.9.1, KRaft, started by scripts/kafka.sh): a topic of 1 KiB records
#      in 8 partitions, read whole by Kafka's own ConsumerPerformance and by
#      `sluice ingest --from kafka://…` (which also compresses and stores), each
#      run with fresh consumer groups: records/s and their ratio.
#   4. smallfiles: an hour-equivalent of one-second flushes (3,600 files of 100
#      records) committed to one Delta table, then `sluice tables compact`:
#      files before and after.
#   --table delta sends cases 1 and 3 into Delta tables (Parquet, flush_age 1s);
#   --table iceberg into Iceberg tables; --table delta,iceberg runs case 1 into
#   each, alternated within every run, and prints the Iceberg/Delta ratios.
#   --before BINARY runs cases 1 and 3 again with another sluice build in every
#   run (its own stream and consumer group) and reports after/before ratios.
#
#   bench/ingest.sh [--runs N] [--cases http,stdin,kafka,smallfiles] [--table delta|iceberg|delta,iceberg]
#                   [--seconds S] [--stdin-mib M] [--kafka-records N] [--small-files N]
#                   [--before BINARY] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio
cargo build --release -p sluice-cli --quiet
source scripts/kafka.sh
kafka_work=$(mktemp -d -t sluice-ingest-kafka.XXXXXX)
trap 'kafka_stop; rm -rf "$kafka_work"' EXIT
kafka_start "$kafka_work"

python3 bench/ingest.py --sluice target/release/sluice "$@"
