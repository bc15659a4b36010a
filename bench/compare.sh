#!/usr/bin/env bash
# Every peer comparison in one run: bench/put.sh, bench/gateway.sh and bench/tus.sh
# (bench/throttle.sh when it exists), each writing its report into
# bench/results/<date>/, then bench/compare.py writes bench/results/<date>/summary.md
# with every ratio against its peer and target in one table. Takes about 30 minutes
# on two cores. Extra arguments (such as --runs 1) go to every script.
#
#   bench/compare.sh [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
dir="bench/results/$(date -u +%F)"
mkdir -p "$dir"
bench/put.sh --out "$dir/put.txt" "$@"
bench/gateway.sh --out "$dir/gateway.txt" "$@"
bench/tus.sh --out "$dir/tus.txt" "$@"
if [ -x bench/throttle.sh ]; then bench/throttle.sh --out "$dir/throttle.txt" "$@"; fi
python3 bench/compare.py "$dir"
