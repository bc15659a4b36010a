#!/usr/bin/env bash
# Benchmark: the same transfers on S3 (MinIO), Azure Blob (Azurite) and GCS
# (fake-gcs-server), CLI and gateway, 1 GiB and 10,000 x 10 KiB, in one run
# (bench/stores.py). Installs MinIO and warp when missing, Azurite with the test
# clients (npm) and fake-gcs-server (go install, the version scripts/test.sh
# pins), builds sluice in release mode.
#
#   bench/stores.sh [--runs N] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio warp
npm install --prefix tests/clients --no-audit --no-fund --loglevel=error >/dev/null
fake_gcs_version=$(sed -n 's/^fake_gcs_version=//p' scripts/test.sh)
if ! go version -m "$(go env GOPATH)/bin/fake-gcs-server" 2>/dev/null | grep -q "fake-gcs-server[[:space:]]*$fake_gcs_version"; then
  go install "github.com/fsouza/fake-gcs-server@$fake_gcs_version"
fi
cargo build --release -p sluice-cli --quiet

exec python3 bench/stores.py --sluice target/release/sluice \
  --azurite tests/clients/node_modules/.bin/azurite-blob \
  --fake-gcs "$(go env GOPATH)/bin/fake-gcs-server" "$@"
