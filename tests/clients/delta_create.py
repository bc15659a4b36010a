"""Creates (or appends to) a Delta Lake table with the Python deltalake package,
as another program that owns the table would: its own schema (nullability
included), its own Parquet codec, table properties, partition columns, and
optionally a checkpoint of its own.

usage: delta_create.py TABLE SPEC_JSON

SPEC_JSON is an object:
  "rows":          the rows to write (a list of objects)
  "schema":        optional [{"name", "type" ("long", "string", "double",
                   "boolean"), "nullable"}], in column order; else inferred
  "compression":   optional Parquet codec of the data files ("SNAPPY",
                   "GZIP", "BROTLI", "LZ4", "ZSTD", "UNCOMPRESSED")
  "configuration": optional table properties ({"delta.appendOnly": "true"})
  "partition_by":  optional partition columns
  "mode":          "append" (default) or "overwrite"
  "checkpoint":    optional true: write a checkpoint afterwards
  "checkpoint_compression": optional codec to rewrite that checkpoint with
                   (deltalake writes it uncompressed; Spark with Snappy)
Prints the table's version afterwards.
"""
import json
import sys

import deltalake
import pyarrow as pa
from deltalake import WriterProperties

TYPES = {"long": pa.int64(), "string": pa.string(), "double": pa.float64(), "boolean": pa.bool_()}

table, spec = sys.argv[1], json.loads(sys.argv[2])
rows = spec["rows"]
if "schema" in spec:
    schema = pa.schema(
        [pa.field(f["name"], TYPES[f["type"]], nullable=f.get("nullable", True)) for f in spec["schema"]]
    )
    data = pa.Table.from_pylist(rows, schema=schema)
else:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    data = pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])
properties = None
if "compression" in spec:
    properties = WriterProperties(compression=spec["compression"])
deltalake.write_deltalake(
    table,
    data,
    mode=spec.get("mode", "append"),
    partition_by=spec.get("partition_by"),
    configuration=spec.get("configuration"),
    writer_properties=properties,
)
written = deltalake.DeltaTable(table)
if spec.get("checkpoint"):
    written.create_checkpoint()
    if "checkpoint_compression" in spec:
        import glob

        import pyarrow.parquet as pq

        name = f"{table}/_delta_log/{written.version():020}.checkpoint.parquet"
        (checkpoint,) = glob.glob(name)
        pq.write_table(pq.read_table(checkpoint), checkpoint, compression=spec["checkpoint_compression"])
print(written.version())
