"""Reads a Delta Lake table with two readers that are not sluice's (the Python
deltalake package and DuckDB's delta extension) and prints one JSON document:
per reader, the row count, the distinct keys, the key range, each column's
count of distinct values, and (with --rows) every row ordered by KEY.

A TABLE of s3://bucket/prefix is read from the endpoint in AWS_ENDPOINT_URL
(MinIO) with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION; one of
az://container/prefix from Azurite, with the account in
AZURE_STORAGE_CONNECTION_STRING (AccountName, AccountKey, BlobEndpoint); one
of gs://bucket/prefix from the emulator in STORAGE_EMULATOR_HOST
(fake-gcs-server), by deltalake only: DuckDB reaches gs:// through GCS's
S3-compatible XML API with HMAC keys, which the emulator does not serve, and
"duckdb" is then {"unsupported": why}.

With --deltalake-may-refuse, a table whose reader features the deltalake
package does not support (1.6: v2Checkpoint; deletion vectors and column
mapping through its DataFusion reader only) is read by its DataFusion reader
(QueryBuilder), and if that refuses too, "deltalake" is {"unsupported":
the reason} instead of failing the run.

usage: delta_read.py TABLE KEY [--rows] [--deltalake-may-refuse]
"""
import json
import os
import sys
from urllib.parse import urlparse

import deltalake
import duckdb
import duckdb_extension_azure
import duckdb_extension_delta
import duckdb_extension_httpfs

table, key = sys.argv[1], sys.argv[2]
with_rows = "--rows" in sys.argv[3:]
may_refuse = "--deltalake-may-refuse" in sys.argv[3:]

storage_options = None
if table.startswith("s3://"):
    storage_options = {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
    }
azure = None
if table.startswith("az://"):
    parts = dict(
        part.split("=", 1)
        for part in os.environ["AZURE_STORAGE_CONNECTION_STRING"].split(";")
        if "=" in part
    )
    blob_endpoint = urlparse(parts["BlobEndpoint"])
    # deltalake (object_store) finds the emulator by AZURITE_BLOB_STORAGE_URL.
    os.environ["AZURITE_BLOB_STORAGE_URL"] = f"{blob_endpoint.scheme}://{blob_endpoint.netloc}"
    storage_options = {
        "azure_storage_account_name": parts["AccountName"],
        "azure_storage_account_key": parts["AccountKey"],
        "azure_storage_use_emulator": "true",
    }
    azure = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
gcs = table.startswith("gs://")
if gcs:
    # object_store (deltalake) reaches fake-gcs-server through a service
    # account file with its test fields: the base URL, and no OAuth.
    import tempfile

    emulator = os.environ["STORAGE_EMULATOR_HOST"]
    if "://" not in emulator:
        emulator = "http://" + emulator
    account = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(
        {
            "gcs_base_url": emulator,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        },
        account,
    )
    account.close()
    storage_options = {"google_service_account": account.name}


def summary(rows, columns):
    keys = [row[key] for row in rows]
    out = {
        "rows": len(rows),
        "distinct": len(set(keys)),
        "min": min(keys) if keys else None,
        "max": max(keys) if keys else None,
        "columns": columns,
        "distinct_values": {
            c: len({json.dumps(row.get(c), sort_keys=True, default=str) for row in rows})
            for c in columns
        },
    }
    if with_rows:
        out["rows_by_key"] = sorted(rows, key=lambda row: row[key])
    return out


dt = deltalake.DeltaTable(table, storage_options=storage_options)
result = {"version": dt.version()}
try:
    arrow = dt.to_pyarrow_table()
    result["deltalake"] = summary(arrow.to_pylist(), arrow.column_names)
except deltalake.exceptions.DeltaProtocolError as refused:
    if not may_refuse:
        raise
    try:
        import pyarrow

        found = deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()
        arrow = pyarrow.table(found)
        result["deltalake"] = summary(arrow.to_pylist(), arrow.column_names)
    except Exception as e:
        result["deltalake"] = {"unsupported": f"{refused}; its DataFusion reader: {e}"}


def extension(module, name):
    base = os.path.dirname(module.__file__)
    return os.path.join(base, "extensions", "v" + duckdb.__version__, name + ".duckdb_extension")


if gcs:
    result["duckdb"] = {
        "unsupported": "DuckDB reads gs:// through GCS's XML API with HMAC keys; fake-gcs-server has neither"
    }
    json.dump(result, sys.stdout, default=str)
    sys.stdout.flush()
    # Not sys.exit: deltalake's GCS client threads abort the interpreter's exit.
    os._exit(0)

con = duckdb.connect()
con.execute(f"LOAD '{extension(duckdb_extension_delta, 'delta')}'")
if azure:
    con.execute(f"LOAD '{extension(duckdb_extension_azure, 'azure')}'")
    con.execute("CREATE SECRET azurite (TYPE azure, CONNECTION_STRING ?)", [azure])
elif storage_options:
    con.execute(f"LOAD '{extension(duckdb_extension_httpfs, 'httpfs')}'")
    endpoint = urlparse(storage_options["AWS_ENDPOINT_URL"])
    con.execute(
        "CREATE SECRET minio (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
        "URL_STYLE 'path', USE_SSL false)",
        [
            storage_options["AWS_ACCESS_KEY_ID"],
            storage_options["AWS_SECRET_ACCESS_KEY"],
            storage_options["AWS_REGION"],
            endpoint.netloc,
        ],
    )
relation = con.sql(f"SELECT * FROM delta_scan('{table}')")
names = relation.columns
rows = [dict(zip(names, row)) for row in relation.fetchall()]
result["duckdb"] = summary(rows, names)
json.dump(result, sys.stdout, default=str)
