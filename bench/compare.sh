#!/usr/bin/env bash
# Every comparison in one run: bench/put.sh, bench/gateway.sh, bench/tus.sh and
# bench/throttle.sh, each writing its report into bench/results/<date>/, then
# bench/compare.py writes bench/results/<date>/summary.md with every ratio against
# its peer (or capacity) and target in one table. Takes about 45 minutes on two
# cores. Extra arguments (such as --runs 1) go to every script.
#
#   bench/compare.sh [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
dir="bench/results/$(date -u +%F)"
mkdir -p "$dir"
bench/put.sh --out "$dir/put.txt" "$@"
bench/gateway.sh --out "$dir/gateway.txt" "$@"
bench/tus.sh --out "$dir/tus.txt" "$@"
bench/throttle.sh --out "$dir/throttle.txt" "$@"
python3 bench/compare.py "$dir"
