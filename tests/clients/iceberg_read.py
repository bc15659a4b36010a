"""Reads an Apache Iceberg table with two readers that are not sluice's
(pyiceberg's StaticTable, and DuckDB's iceberg extension, with the avro
extension it needs, from their PyPI wheels: no download) from one of its
metadata files, and prints one JSON document: per reader, every row ordered
by KEY (or with --count, only how many rows and how many distinct KEYs), and
the columns; plus the snapshot count, the current schema's field ids and the
data files of the current snapshot as pyiceberg reads them.

usage: iceberg_read.py METADATA_FILE KEY [--count]
"""
import json
import os
import sys

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
from pyiceberg.table import StaticTable

metadata, key = sys.argv[1], sys.argv[2]
count_only = "--count" in sys.argv[3:]


def described(names, rows):
    if count_only:
        return {
            "columns": names,
            "rows": len(rows),
            "distinct": len({row[key] for row in rows}),
        }
    return {"columns": names, "rows": sorted(rows, key=lambda row: row[key])}


table = StaticTable.from_metadata(metadata)
arrow = table.scan().to_arrow()
result = {
    "snapshots": len(table.metadata.snapshots),
    "field_ids": {f.name: f.field_id for f in table.schema().fields},
    "files": sorted(task.file.file_path for task in table.scan().plan_files()),
    "pyiceberg": described(arrow.column_names, arrow.to_pylist()),
}


def extension(module, name):
    base = os.path.dirname(module.__file__)
    return os.path.join(base, "extensions", "v" + duckdb.__version__, name + ".duckdb_extension")


con = duckdb.connect(config={"autoinstall_known_extensions": False})
con.execute(f"LOAD '{extension(duckdb_extension_avro, 'avro')}'")
con.execute(f"LOAD '{extension(duckdb_extension_iceberg, 'iceberg')}'")
relation = con.sql(f"SELECT * FROM iceberg_scan('{metadata}')")
names = relation.columns
result["duckdb"] = described(names, [dict(zip(names, row)) for row in relation.fetchall()])
json.dump(result, sys.stdout, default=str)
