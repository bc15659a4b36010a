"""Apache Spark with Delta Lake (pyspark and delta-spark from PyPI, the
io.delta jars from Maven Central through ivy), started once and driven by
the Rust tests over stdin/stdout: one JSON command per line in, one JSON
answer per line out (Spark's own logging goes to stderr).

Commands:
  {"op": "sql", "sql": "..."}                 runs a statement; {"ok": true}
  {"op": "read", "table": PATH, "key": COL,   reads a table (as of a version)
   "version": N (optional)}                   {"ok", "rows", "distinct",
                                               "keys" (sorted), "columns",
                                               "nulls" per column, "first":
                                               the row of the lowest key}
  {"op": "protocol", "table": PATH}           the table's reader/writer
                                               versions and features
  {"op": "count", "table": PATH,              rows matching WHERE, filtered at
   "where": SQL}                              the scan (files skipped on their
                                               stats) and after reading every
                                               row: {"skipping", "scanning"}
Any failure answers {"ok": false, "error": "..."}.

usage: spark_delta.py   (local[2], 1 GiB driver, no UI)
"""
import json
import os
import sys

# The answers go to the original stdout; everything else written to fd 1
# (the JVM's own prints, such as ivy's ":: loading settings ::") goes to
# stderr, so that only JSON lines reach the tests.
answers = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
import traceback

from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession

builder = (
    SparkSession.builder.master("local[2]")
    .appName("sluice-tests")
    .config("spark.driver.memory", "1g")
    # Maven Central only (see ivysettings.xml).
    .config("spark.jars.ivySettings", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ivysettings.xml"))
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    # Tests vacuum and time-travel within seconds.
    .config("spark.databricks.delta.retentionDurationCheck.enabled", "false")
)
spark = configure_spark_with_delta_pip(builder).getOrCreate()
spark.sparkContext.setLogLevel("ERROR")


def read(command):
    reader = spark.read.format("delta")
    if "version" in command:
        reader = reader.option("versionAsOf", command["version"])
    frame = reader.load(command["table"])
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    key = command["key"]
    keys = sorted(row[key] for row in rows if row[key] is not None)
    rows.sort(key=lambda row: (row[key] is None, row[key]))
    return {
        "rows": len(rows),
        "first": rows[0] if rows else None,
        "distinct": len(set(keys)),
        "keys": keys,
        "columns": frame.columns,
        "nulls": {c: sum(1 for row in rows if row[c] is None) for c in frame.columns},
    }


def protocol(command):
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{command['table']}`").collect()[0].asDict()
    return {
        "minReaderVersion": detail["minReaderVersion"],
        "minWriterVersion": detail["minWriterVersion"],
        "tableFeatures": sorted(detail.get("tableFeatures") or []),
        "properties": detail["properties"],
    }


def count(command):
    table = spark.read.format("delta").load(command["table"])
    # Filtered at the scan (files skipped on their stats), and filtered only
    # after every row is read (a local checkpoint has no files to skip).
    return {
        "skipping": table.where(command["where"]).count(),
        "scanning": table.localCheckpoint().where(command["where"]).count(),
    }


print(json.dumps({"ok": True, "ready": spark.version}), file=answers, flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    command = json.loads(line)
    try:
        if command["op"] == "sql":
            spark.sql(command["sql"]).collect()
            answer = {}
        elif command["op"] == "read":
            answer = read(command)
        elif command["op"] == "protocol":
            answer = protocol(command)
        elif command["op"] == "count":
            answer = count(command)
        else:
            raise ValueError(f"unknown op {command['op']}")
        answer["ok"] = True
    except Exception as e:  # the test reads the error
        traceback.print_exc(file=sys.stderr)
        answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer, default=str), file=answers, flush=True)
