"""Appends rows to a Delta Lake table with the Python deltalake package, as
another writer of the table would (new columns merged into its schema).

usage: delta_append.py TABLE JSON_ROWS
"""
import json
import sys

import deltalake
import pyarrow as pa

table, rows = sys.argv[1], json.loads(sys.argv[2])
# Every row with every column (from_pylist takes the columns of the first).
columns = list(dict.fromkeys(key for row in rows for key in row))
rows = [{column: row.get(column) for column in columns} for row in rows]
deltalake.write_deltalake(table, pa.Table.from_pylist(rows), mode="append", schema_mode="merge")
