"""Reads the Parquet files under a directory with two readers that are not
sluice's (pyarrow and DuckDB) and prints one JSON document: each reader's rows
(every file's columns, a column a file lacks as null), ordered by ORDER_BY.

usage: parquet_read.py DIR ORDER_BY
"""
import glob
import json
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

directory, order_by = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{directory}/**/*.parquet", recursive=True))
tables = [pq.read_table(path) for path in files]
merged = pa.concat_tables(tables, promote_options="permissive")
arrow_rows = sorted(merged.to_pylist(), key=lambda row: row[order_by])

relation = duckdb.sql(
    f"SELECT * FROM read_parquet({json.dumps(files)}, union_by_name = true) ORDER BY {order_by}"
)
names = relation.columns
duck_rows = [dict(zip(names, row)) for row in relation.fetchall()]

json.dump({"files": len(files), "pyarrow": arrow_rows, "duckdb": duck_rows}, sys.stdout)
