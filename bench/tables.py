"""Driver of bench/tables.sh: NDJSON to zstd Parquet by sluice, DuckDB and
pyarrow on one file, per CPU-second; see the shell script for the cases."""

import glob
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import MIB, driver_args, emit_report, paired_ratio, version

DUCKDB = """
import duckdb, sys
duckdb.sql(f"COPY (FROM read_json('{sys.argv[1]}', format = 'newline_delimited')) "
           f"TO '{sys.argv[2]}' (FORMAT parquet, COMPRESSION zstd)")
"""

PYARROW = """
import sys
import pyarrow.json as pj
import pyarrow.parquet as pq
table = pj.read_json(sys.argv[1])
pq.write_table(table, sys.argv[2], compression="zstd")
"""

COUNT = """
import glob, sys
import pyarrow.parquet as pq
print(sum(pq.ParquetFile(f).metadata.num_rows for f in glob.glob(sys.argv[1] + "/**/*.parquet", recursive=True)))
"""


def make_events(path, mib):
    """`mib` MiB of event records of about 300 bytes, with every JSON type."""
    rnd = random.Random(11)
    events = ["click", "view", "scroll", "cart", "checkout", "search", "login"]
    countries = ["fr", "de", "us", "jp", "br", "in", "ng", "au"]
    records = 0
    with open(path, "w") as f:
        size = 0
        while size < mib * MIB:
            record = {
                "seq": records,
                "ts": 1_795_600_000_000 + records * 7,
                "user": f"u{rnd.randrange(10**6):06}",
                "event": rnd.choice(events),
                "price": round(rnd.random() * 500, 2),
                "quantity": rnd.randrange(1, 20),
                "mobile": rnd.random() < 0.6,
                "tags": rnd.sample(["new", "sale", "gift", "promo", "vip"], rnd.randrange(0, 4)),
                "where": {"country": rnd.choice(countries), "city": f"c{rnd.randrange(500)}",
                          "lat": round(rnd.uniform(-90, 90), 5), "lon": round(rnd.uniform(-180, 180), 5)},
                "note": " ".join(rnd.choice(events) for _ in range(rnd.randrange(3, 12))),
            }
            line = json.dumps(record, separators=(",", ":")) + "\n"
            f.write(line)
            size += len(line)
            records += 1
    return records


def timed(argv, stdin_path=None):
    """(wall s, CPU s of the process and its threads, peak RSS bytes)."""
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:3]} failed: {err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main():
    ap = driver_args()
    ap.add_argument("--python", required=True)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--before", help="another sluice build, run as the tool 'before' in every run")
    ap.add_argument("--out")
    args = ap.parse_args()
    tools = ["sluice", "duckdb", "pyarrow"] + (["before"] if args.before else [])
    work = tempfile.mkdtemp(prefix="sluice-tables-")
    try:
        source = os.path.join(work, "events.ndjson")
        records = make_events(source, args.mib)
        size = os.path.getsize(source)
        rows = []
        for run in range(args.runs):
            for tool in tools if run % 2 == 0 else list(reversed(tools)):
                out = os.path.join(work, f"out-{tool}")
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                if tool in ("sluice", "before"):
                    binary = args.sluice if tool == "sluice" else args.before
                    argv = [binary, "ingest", "--stream", "t", "--format", "parquet", "--store", out,
                            "--quiet"]
                    wall, cpu, rss = timed(argv, source)
                else:
                    script = DUCKDB if tool == "duckdb" else PYARROW
                    wall, cpu, rss = timed([args.python, "-c", script, source, os.path.join(out, "out.parquet")])
                written = subprocess.run([args.python, "-c", COUNT, out], check=True, capture_output=True,
                                         text=True).stdout.strip()
                if int(written) != records:
                    raise SystemExit(f"{tool} wrote {written} rows of {records}")
                stored = sum(os.path.getsize(f) for f in glob.glob(out + "/**/*.parquet", recursive=True))
                rows.append({"tool": tool, "run": run, "records_per_cpu_s": records / cpu,
                             "records_per_s": records / wall, "cpu_s": cpu, "wall_s": wall,
                             "peak_rss_mib": rss / MIB, "output_mib": stored / MIB})
                print(json.dumps(rows[-1]), flush=True)
        lines = [
            f"NDJSON -> zstd Parquet, {records} records ({size / MIB:.0f} MiB), {args.runs} runs, "
            f"{os.cpu_count()} cores, {platform.node()}",
            f"sluice: {version([args.sluice, '--version'])}; duckdb 1.5.5; pyarrow 26.0.1"
            + (f"; before: {args.before}" if args.before else ""),
            "tools alternated within each run (reversed every other run); ratios are medians of per-run ratios",
            "",
            f"{'tool':<8} {'rec/CPU-s':>11} {'rec/s':>11} {'CPU s':>7} {'wall s':>7} {'RSS MiB':>8} {'out MiB':>8}",
        ]
        for tool in tools:
            mine = [r for r in rows if r["tool"] == tool]
            med = {k: statistics.median(r[k] for r in mine) for k in mine[0] if k not in ("tool", "run")}
            lines.append(f"{tool:<8} {med['records_per_cpu_s']:>11.0f} {med['records_per_s']:>11.0f} "
                         f"{med['cpu_s']:>7.2f} {med['wall_s']:>7.2f} {med['peak_rss_mib']:>8.0f} "
                         f"{med['output_mib']:>8.1f}")
        lines.append("")
        for peer, target in [("pyarrow", 1.0), ("duckdb", 1.0)]:
            for key, what in [("records_per_cpu_s", "per CPU-second"), ("records_per_s", "wall")]:
                median, ratios = paired_ratio(rows, key, "sluice", peer)
                mark = f" (target >= {target}x)" if key == "records_per_cpu_s" else ""
                lines.append(f"sluice / {peer}, {what}: {median:.2f}x{mark}  runs: "
                             + " ".join(f"{r:.2f}" for r in ratios))
        if args.before:
            for key, what in [("records_per_cpu_s", "per CPU-second"), ("records_per_s", "wall")]:
                median, ratios = paired_ratio(rows, key, "sluice", "before")
                lines.append(f"sluice / before, {what}: {median:.2f}x  runs: " + " ".join(f"{r:.2f}" for r in ratios))
        emit_report(lines, rows, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
