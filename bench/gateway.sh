#!/usr/bin/env bash
# Benchmark: `sluice serve` against tusd (S3 store) in front of one MinIO on
# loopback, in one run: relayed 1 GiB / 4 GiB uploads and 1,000 / 10,000-upload
# storms, plus warp's direct small-object PUT rate. Installs what is missing
# (MinIO, s5cmd, tusd v2.10.1, warp v1.0.0 through the Go toolchain), builds sluice
# in release mode, then runs gateway.py.
#
#   bench/gateway.sh [--runs N] [--sizes 1,4] [--storms 1000,10000] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

build_module() { # module@version binary [go build flags...]
  local module=$1 binary=$2; shift 2
  local dir
  dir=$(go mod download -json "$module" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  rm -rf "/tmp/$binary-src" && cp -r "$dir" "/tmp/$binary-src" && chmod -R u+w "/tmp/$binary-src"
  (cd "/tmp/$binary-src" && go build "$@" -o "$(go env GOPATH)/bin/$binary" "${BUILD_PATH:-.}")
}
command -v minio >/dev/null || go install github.com/minio/minio@latest
command -v s5cmd >/dev/null || build_module github.com/peak/s5cmd/v2@v2.3.0 s5cmd -mod=mod
command -v tusd >/dev/null || BUILD_PATH=./cmd/tusd build_module github.com/tus/tusd/v2@v2.10.1 tusd
command -v warp >/dev/null || GONOSUMDB=github.com/minio/warp build_module github.com/minio/warp@v1.0.0 warp
cargo build --release -p sluice-cli --quiet

exec python3 bench/gateway.py --sluice target/release/sluice "$@"
