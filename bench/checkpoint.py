"""Benchmark: the memory and time of writing one Delta checkpoint of a large
table, sluice now (in parts of --part-actions, each built from its actions a
chunk at a time) against a previous build (--before: the whole table as JSON
and one Parquet file in memory), in one run on the same table.

The table (a directory store) has version 0 (protocol, metadata) and version 1
adding --files data files (the files themselves are not needed to checkpoint
it). Each run checkpoints it with every variant, in turn, after removing the
previous checkpoint: peak RSS and CPU seconds from wait4, wall time; medians of
--runs and the per-run ratios against the previous build.

  python3 bench/checkpoint.py --sluice target/release/sluice --before OLD \
      [--build LABEL=PATH ...] [--files N] [--runs N] [--out FILE]

--build adds another build (default parts), e.g. an intermediate commit.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import benchlib  # noqa: E402


def make_table(root, files):
    log = os.path.join(root, "t", "_delta_log")
    os.makedirs(log)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}}]}
    with open(os.path.join(log, f"{0:020}.json"), "w") as f:
        f.write(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}) + "\n")
        f.write(json.dumps({"metaData": {
            "id": "bench", "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema), "partitionColumns": [],
            "createdTime": 0, "configuration": {}}}) + "\n")
    with open(os.path.join(log, f"{1:020}.json"), "w") as f:
        f.write(json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n")
        for i in range(files):
            stats = {"numRecords": 1000, "minValues": {"id": i * 1000, "name": "a"},
                     "maxValues": {"id": i * 1000 + 999, "name": "z"}, "nullCount": {"id": 0, "name": 0}}
            f.write(json.dumps({"add": {
                "path": f"part-{i:08}-0f3c2b1a.parquet", "partitionValues": {},
                "size": 1_048_576 + i, "modificationTime": 1795900000000 + i,
                "dataChange": True, "stats": json.dumps(stats)}}) + "\n")


def clear_checkpoint(root):
    log = os.path.join(root, "t", "_delta_log")
    for name in os.listdir(log):
        if ".checkpoint." in name or name == "_last_checkpoint":
            os.remove(os.path.join(log, name))
    shutil.rmtree(os.path.join(log, "_sidecars"), ignore_errors=True)


def run(argv):
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv}: {err}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024, "said": out.strip()}


def main():
    ap = benchlib.driver_args()
    ap.add_argument("--before", required=True)
    ap.add_argument("--build", action="append", default=[], metavar="LABEL=PATH")
    ap.add_argument("--files", type=int, default=300_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-bench-checkpoint.")
    try:
        make_table(work, args.files)
        variants = [
            ("before (whole)", [args.before, "tables", "checkpoint", "--store", work, "t"]),
        ] + [
            (label, [path, "tables", "checkpoint", "--store", work, "t"])
            for label, path in (b.split("=", 1) for b in args.build)
        ] + [
            ("after, one part", [args.sluice, "tables", "checkpoint", "--store", work, "t",
                                 "--part-actions", str(10 * args.files)]),
            ("after, default parts (100,000)", [args.sluice, "tables", "checkpoint", "--store", work, "t"]),
            ("after, parts of 20,000", [args.sluice, "tables", "checkpoint", "--store", work, "t",
                                        "--part-actions", "20000"]),
        ]
        raw = []
        for n in range(args.runs):
            for label, argv in variants:
                clear_checkpoint(work)
                row = run(argv)
                row.update(run=n, variant=label)
                raw.append(row)
                print(f"run {n} {label}: {row['peak_rss_mib']:.0f} MiB, {row['cpu_s']:.2f} CPU-s, {row['wall_s']:.2f} s", flush=True)
        lines = [
            f"Delta checkpoint of a table of {args.files:,} files (version 1 adds them all), "
            f"directory store, {args.runs} runs, medians",
            f"sluice: {benchlib.version([args.sluice, '--version'])}; before: {args.before}"
            + "".join(f"; {b}" for b in args.build),
            "",
            f"{'variant':34} {'peak RSS MiB':>12} {'CPU-s':>7} {'wall s':>7} {'RSS/before':>11}",
        ]
        before = [r for r in raw if r["variant"] == "before (whole)"]
        for label, _ in variants:
            rows = [r for r in raw if r["variant"] == label]
            ratios = [r["peak_rss_mib"] / b["peak_rss_mib"] for r, b in zip(rows, before)]
            lines.append(
                f"{label:34} {statistics.median(r['peak_rss_mib'] for r in rows):12.0f} "
                f"{statistics.median(r['cpu_s'] for r in rows):7.2f} "
                f"{statistics.median(r['wall_s'] for r in rows):7.2f} "
                f"{statistics.median(ratios):11.2f}")
        benchlib.emit_report(lines, raw, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
