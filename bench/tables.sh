#!/usr/bin/env bash
# Benchmark: NDJSON into Parquet on this machine, in one run. The same file of
# event records (integers, floats, strings, booleans, a list and a nested
# object) becomes zstd Parquet through
#   - sluice ingest --format parquet (the directory store, so no network),
#   - DuckDB 1.5.5: COPY (FROM read_json(…)) TO … (FORMAT parquet, COMPRESSION zstd),
#   - pyarrow 26.0.1: pyarrow.json.read_json + pyarrow.parquet.write_table(zstd),
# each as a process of its own: records/s per CPU-second (all threads, from
# wait4), wall records/s, peak RSS and output bytes, medians of --runs, and the
# per-run ratios against each peer (the issue's targets: >= 1.0x pyarrow and
# >= 1.0x DuckDB per CPU-second; issue 51).
#
#   bench/tables.sh [--runs N] [--mib M] [--before BINARY] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p sluice-cli --quiet
venv=target/bench-tables-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check pyarrow==26.0.1 duckdb==1.5.5
python3 bench/tables.py --sluice target/release/sluice --python "$venv/bin/python" "$@"
