#!/usr/bin/env bash
# Benchmark: 1 GiB through the IETF resumable-upload draft against tus on the
# same gateway and against tusd's draft support (-enable-experimental-protocol),
# both with an S3 store in front of one MinIO on loopback, in one run. Installs
# what is missing (MinIO, s5cmd, tusd through the Go toolchain), builds sluice in
# release mode (it is also the client: `sluice bench load --api draft|tus`), runs
# draft.py.
#
#   bench/draft.sh [--runs N] [--chunks 5,whole] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio s5cmd tusd
cargo build --release -p sluice-cli --quiet

exec python3 bench/draft.py --sluice target/release/sluice "$@"
