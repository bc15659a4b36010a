#!/usr/bin/env bash
# Benchmark: `sluice put` against `s5cmd cp` and `aws s3 cp`, side by side in one
# run, against one MinIO on loopback. Installs the peers when missing (MinIO and
# s5cmd through the Go toolchain, the aws cli through pip), builds sluice in
# release mode, then hands over to put.py, which runs the cases and prints the table.
#
#   bench/put.sh [--runs N] [--sizes 1,4] [--out bench/results/put-DATE.txt]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"

if ! command -v minio >/dev/null; then go install github.com/minio/minio@latest; fi
if ! command -v s5cmd >/dev/null; then
  d=$(go mod download -json github.com/peak/s5cmd/v2@v2.3.0 | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  rm -rf /tmp/s5cmd-src && cp -r "$d" /tmp/s5cmd-src && chmod -R u+w /tmp/s5cmd-src
  (cd /tmp/s5cmd-src && go build -mod=mod -o "$(go env GOPATH)/bin/s5cmd" .)
fi
if ! command -v aws >/dev/null || ! aws --version >/dev/null 2>&1; then pip install --quiet awscli; fi
cargo build --release -p sluice-cli --quiet

exec python3 bench/put.py --sluice target/release/sluice "$@"
