"""Checks a Delta table's file statistics against the files themselves, as a
reader that skips files by them would rely on: for every active file, Python
deltalake's add actions (minValues, maxValues, nullCount, numRecords) against
what pyarrow reads from the file. A minimum must be at most every value and a
maximum at least every value (equal for numbers; a string's may be a cut
prefix, raised for the maximum), null counts and row counts exact.

usage: delta_stats.py TABLE
Prints {"files", "with_stats": {column: files}, "problems": [...]}.
"""
import json
import os
import sys

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

table = sys.argv[1]
dt = deltalake.DeltaTable(table)
# deltalake 1.x answers an Arrow table of another library (arro3): taken
# through the Arrow C interface.
actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
problems = []
with_stats = {}
for action in actions:
    path = os.path.join(table, action["path"])
    data = pq.read_table(path)
    if action["num_records"] != data.num_rows:
        problems.append(f"{action['path']}: numRecords {action['num_records']}, rows {data.num_rows}")
    for name in data.column_names:
        column = data.column(name)
        low, high, nulls = action.get(f"min.{name}"), action.get(f"max.{name}"), action.get(f"null_count.{name}")
        if nulls is not None:
            with_stats[name] = with_stats.get(name, 0) + 1
            if nulls != column.null_count:
                problems.append(f"{action['path']} {name}: nullCount {nulls}, nulls {column.null_count}")
        if low is None or high is None or column.null_count == len(column):
            continue
        bounds = pc.min_max(column)
        true_low, true_high = bounds["min"].as_py(), bounds["max"].as_py()
        if isinstance(true_low, str):
            if not (low <= true_low and high >= true_high):
                problems.append(f"{action['path']} {name}: [{low!r}, {high!r}] misses [{true_low!r}, {true_high!r}]")
        elif (low, high) != (true_low, true_high):
            problems.append(f"{action['path']} {name}: [{low}, {high}], values [{true_low}, {true_high}]")
print(json.dumps({"files": len(actions), "with_stats": with_stats, "problems": problems}))
