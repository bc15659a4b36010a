"""Apache Spark with Apache Iceberg (pyspark 4.1 from PyPI; Iceberg's
iceberg-spark-runtime for Spark 4.1 from Maven Central through ivy: there is
none for Spark 4.2 yet), started once and driven by a Rust test over
stdin/stdout: one JSON command per line in, one JSON answer per line out
(Spark's own logging goes to stderr). Tables are reached through Iceberg's
Hadoop catalog on WAREHOUSE, a local directory: the table `ns.t` is the
directory WAREHOUSE/ns/t, its versions metadata/vN.metadata.json, the layout
sluice writes.

Commands:
  {"op": "sql", "sql": "..."}                runs a statement; {"ok": true,
                                              "first": the first row's first
                                              value, if any}
  {"op": "read", "table": "ns.t",            reads the table: {"ok", "rows",
   "key": COL}                                "distinct", "min", "max",
                                              "columns", "snapshots"}
Any failure answers {"ok": false, "error": "..."}.

usage: spark_iceberg.py WAREHOUSE   (local[2], 1 GiB driver, no UI)
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

from pyspark.sql import SparkSession

RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"

warehouse = sys.argv[1]
spark = (
    SparkSession.builder.master("local[2]")
    .appName("sluice-tests-iceberg")
    .config("spark.driver.memory", "1g")
    # Maven Central only (see ivysettings.xml).
    .config("spark.jars.ivySettings", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ivysettings.xml"))
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.jars.packages", RUNTIME)
    .config(
        "spark.sql.extensions",
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    )
    .config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
    .config("spark.sql.catalog.local.type", "hadoop")
    .config("spark.sql.catalog.local.warehouse", "file://" + warehouse)
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def read(command):
    table = "local." + command["table"]
    spark.sql(f"REFRESH TABLE {table}")
    frame = spark.table(table)
    key = command["key"]
    keys = [row[0] for row in frame.select(key).collect()]
    present = [k for k in keys if k is not None]
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0]
    return {
        "rows": len(keys),
        "distinct": len(set(present)),
        "min": min(present) if present else None,
        "max": max(present) if present else None,
        "columns": frame.columns,
        "snapshots": snapshots,
    }


print(json.dumps({"ok": True, "spark": spark.version}), file=answers, flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        command = json.loads(line)
        if command["op"] == "sql":
            rows = spark.sql(command["sql"]).collect()
            answer = {"first": rows[0][0] if rows and len(rows[0]) else None}
        elif command["op"] == "read":
            answer = read(command)
        else:
            raise ValueError(f"no such op: {command['op']}")
        answer["ok"] = True
    except Exception as error:  # answered, not raised: the session goes on
        traceback.print_exc(file=sys.stderr)
        answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    print(json.dumps(answer, default=str), file=answers, flush=True)
