#!/usr/bin/env bash
# Benchmark: the gateway's CPU and memory for 1 GiB relayed through `sluice
# serve` against 1 GiB sent straight to the bucket with `sluice serve --direct`
# only signing (@uppy/aws-s3: Companion routes, a session, /s3/sign, /s3/sts),
# in one run, in front of one
# MinIO on loopback. Installs MinIO and s5cmd when missing, builds sluice in
# release mode, then runs direct.py.
#
#   bench/direct.sh [--runs N] [--size BYTES] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd
cargo build --release -p sluice-cli --quiet

exec python3 bench/direct.py --sluice target/release/sluice "$@"
