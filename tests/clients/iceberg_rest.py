"""Drives sluice's Iceberg REST catalog with clients that are not sluice's:
pyiceberg (its REST catalog) and DuckDB 1.5.5 (ATTACH … TYPE iceberg, with
the httpfs, avro and iceberg extensions from their PyPI wheels). Data files
are on MinIO: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
AWS_REGION say where. Prints one JSON document.

usage:
  iceberg_rest.py append URI NAMESPACE TABLE START COUNT [--token T] [--batches N]
      creates the namespace and the table (id long, source string) when
      missing, appends ids START..START+COUNT with pyiceberg, in N commits
      (1 without --batches); a commit refused because the table moved
      (CommitFailedException: nothing of it landed) is made again on the
      table as it is now, as an application would
  iceberg_rest.py register URI NAMESPACE TABLE METADATA_LOCATION [--token T]
  iceberg_rest.py read URI NAMESPACE TABLE [--token T]
      rows, distinct ids and columns, as pyiceberg and as DuckDB read them
  iceberg_rest.py list URI [--token T]
      the namespaces pyiceberg lists
"""
import json
import os
import sys
from urllib.parse import urlparse

import duckdb
import duckdb_extension_avro
import duckdb_extension_httpfs
import duckdb_extension_iceberg
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

args = sys.argv[1:]
token = None
batches = 1
if "--batches" in args:
    i = args.index("--batches")
    batches = int(args[i + 1])
    del args[i : i + 2]
if "--token" in args:
    i = args.index("--token")
    token = args[i + 1]
    del args[i : i + 2]
command, uri = args[0], args[1]
endpoint = os.environ["AWS_ENDPOINT_URL"]
key_id = os.environ["AWS_ACCESS_KEY_ID"]
secret = os.environ["AWS_SECRET_ACCESS_KEY"]
region = os.environ.get("AWS_REGION", "us-east-1")

properties = {
    "type": "rest",
    "uri": uri,
    "s3.endpoint": endpoint,
    "s3.access-key-id": key_id,
    "s3.secret-access-key": secret,
    "s3.region": region,
    "s3.path-style-access": "true",
}
if token:
    properties["token"] = token
catalog = load_catalog("sluice", **properties)


def extension(module, name):
    base = os.path.dirname(module.__file__)
    return os.path.join(base, "extensions", "v" + duckdb.__version__, name + ".duckdb_extension")


def duckdb_read(namespace, table):
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    for module, name in [
        (duckdb_extension_httpfs, "httpfs"),
        (duckdb_extension_avro, "avro"),
        (duckdb_extension_iceberg, "iceberg"),
    ]:
        con.execute(f"LOAD '{extension(module, name)}'")
    host = urlparse(endpoint).netloc
    con.execute(
        f"CREATE SECRET (TYPE s3, KEY_ID '{key_id}', SECRET '{secret}', REGION '{region}', "
        f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)"
    )
    if token:
        con.execute(f"CREATE SECRET sluice_token (TYPE iceberg, TOKEN '{token}')")
        auth = "SECRET sluice_token"
    else:
        auth = "AUTHORIZATION_TYPE 'none'"
    con.execute(f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{uri}', {auth})")
    relation = con.sql(f'SELECT * FROM lake."{namespace}"."{table}"')
    names = relation.columns
    rows = relation.fetchall()
    ids = [row[names.index("id")] for row in rows]
    return {"columns": names, "rows": len(rows), "distinct": len(set(ids))}


if command == "append":
    namespace, table, start, count = args[2], args[3], int(args[4]), int(args[5])
    catalog.create_namespace_if_not_exists(namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "source", StringType(), required=False),
    )
    handle = catalog.create_table_if_not_exists(f"{namespace}.{table}", schema=schema)
    retried = 0
    step = max(1, count // batches)
    for first in range(start, start + count, step):
        last = min(first + step, start + count)
        data = pa.table(
            {
                "id": pa.array(range(first, last), type=pa.int64()),
                "source": pa.array(["pyiceberg"] * (last - first), type=pa.string()),
            }
        )
        while True:
            handle = catalog.load_table(f"{namespace}.{table}")
            try:
                handle.append(data)
                break
            except CommitFailedException:
                retried += 1
    handle = catalog.load_table(f"{namespace}.{table}")
    print(json.dumps({"snapshots": len(handle.metadata.snapshots), "location": handle.location(),
                      "retried": retried}))
elif command == "register":
    namespace, table, metadata = args[2], args[3], args[4]
    catalog.create_namespace_if_not_exists(namespace)
    handle = catalog.register_table(f"{namespace}.{table}", metadata)
    print(json.dumps({"location": handle.location()}))
elif command == "read":
    namespace, table = args[2], args[3]
    handle = catalog.load_table(f"{namespace}.{table}")
    arrow = handle.scan().to_arrow()
    ids = arrow.column("id").to_pylist()
    print(
        json.dumps(
            {
                "pyiceberg": {
                    "columns": arrow.column_names,
                    "rows": len(ids),
                    "distinct": len(set(ids)),
                },
                "duckdb": duckdb_read(namespace, table),
                "metadata_location": handle.metadata_location,
            }
        )
    )
elif command == "list":
    print(json.dumps({"namespaces": [list(n) for n in catalog.list_namespaces()]}))
else:
    sys.exit(f"unknown command {command}")
