"""Reads an Apache Iceberg table with two readers that are not sluice's
(pyiceberg's StaticTable, and DuckDB's iceberg extension, with the avro
extension it needs, from their PyPI wheels: no download) from one of its
metadata files, and prints one JSON document: per reader, every row ordered
by KEY (or with --count, only how many rows and how many distinct KEYs), and
the columns; plus the snapshot count, the current schema's field ids and the
data files of the current snapshot as pyiceberg reads them.

A METADATA_FILE of s3://bucket/… is read from the endpoint in
AWS_ENDPOINT_URL (MinIO) with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_REGION (DuckDB through its httpfs extension).

With --filter EXPR (a predicate both take, such as
"ts >= '2026-11-29T00:00:00+00:00'"), also the rows each reader counts under
it and the data files pyiceberg plans for it (partition pruning).

usage: iceberg_read.py METADATA_FILE KEY [--count] [--filter EXPR]
"""
import json
import os
import sys

from urllib.parse import urlparse

import duckdb
import duckdb_extension_avro
import duckdb_extension_httpfs
import duckdb_extension_iceberg
from pyiceberg.table import StaticTable

metadata, key = sys.argv[1], sys.argv[2]
count_only = "--count" in sys.argv[3:]
row_filter = sys.argv[sys.argv.index("--filter") + 1] if "--filter" in sys.argv else None


def described(names, rows):
    if count_only:
        keys = [row[key] for row in rows]
        return {
            "columns": names,
            "rows": len(rows),
            "distinct": len(set(keys)),
            "min": min(keys) if keys else None,
            "max": max(keys) if keys else None,
        }
    return {"columns": names, "rows": sorted(rows, key=lambda row: row[key])}


on_s3 = metadata.startswith("s3://")
properties = {}
if on_s3:
    properties = {
        "s3.endpoint": os.environ["AWS_ENDPOINT_URL"],
        "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        "s3.path-style-access": "true",
    }
table = StaticTable.from_metadata(metadata, properties=properties)
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
if on_s3:
    con.execute(f"LOAD '{extension(duckdb_extension_httpfs, 'httpfs')}'")
    con.execute(
        f"CREATE SECRET (TYPE s3, KEY_ID '{os.environ['AWS_ACCESS_KEY_ID']}', "
        f"SECRET '{os.environ['AWS_SECRET_ACCESS_KEY']}', "
        f"REGION '{os.environ.get('AWS_REGION', 'us-east-1')}', "
        f"ENDPOINT '{urlparse(os.environ['AWS_ENDPOINT_URL']).netloc}', "
        "URL_STYLE 'path', USE_SSL false)"
    )
relation = con.sql(f"SELECT * FROM iceberg_scan('{metadata}')")
names = relation.columns
result["duckdb"] = described(names, [dict(zip(names, row)) for row in relation.fetchall()])
if row_filter is not None:
    scan = table.scan(row_filter=row_filter)
    result["filtered"] = {
        "files": len(list(scan.plan_files())),
        "pyiceberg": scan.to_arrow().num_rows,
        "duckdb": con.sql(f"SELECT count(*) FROM iceberg_scan('{metadata}') WHERE {row_filter}").fetchone()[0],
    }
json.dump(result, sys.stdout, default=str)
