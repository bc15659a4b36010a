#!/usr/bin/env python3
"""Gateway CPU alone: one relayed upload (curl -> `sluice serve` -> a local
directory store) per run, for two sluice builds alternated run by run. With no
S3 server on the same cores, the gateway's CPU-seconds per GiB and curl's wall
time show a change on the data path that MinIO's own noise would hide in
gateway.py's relay.

  bench/relay_local.py --sluice target/release/sluice --before OLD_BINARY [--runs 8] [--size-gib 1] [--out FILE]
"""

import datetime
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import (GIB, MIB, ProcStats, driver_args, emit_report, free_port, make_file, paired_ratio,
                      stop, version, wait_for_port)


def relay(binary, work, path, size):
    """One fresh gateway, one upload; returns (wall seconds, gateway CPU-s, peak RSS)."""
    store = os.path.join(work, "store")
    shutil.rmtree(store, ignore_errors=True)
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "--store", store, "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        stats = ProcStats(proc.pid)
        cpu0 = stats.cpu()
        started = time.monotonic()
        out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", path,
                              f"http://127.0.0.1:{port}/v1/objects/relay.bin"], capture_output=True, text=True)
        wall = time.monotonic() - started
        if not out.stdout.startswith("2"):
            raise SystemExit(f"{binary} answered {out.stdout}: {out.stderr}")
        return wall, stats.cpu() - cpu0, stats.peak_rss()
    finally:
        stop(proc)


def main():
    ap = driver_args()
    ap.add_argument("--before", required=True, help="the other sluice binary")
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    ap.set_defaults(runs=8)
    args = ap.parse_args()
    binaries = {"sluice": os.path.abspath(args.sluice), "before": os.path.abspath(args.before)}
    work = tempfile.mkdtemp(prefix="sluice-relay-local-")
    rows = []
    try:
        size = int(args.size_gib * GIB)
        path = os.path.join(work, "relay.bin")
        make_file(path, size)
        relay(binaries["sluice"], work, path, size)  # unmeasured: page cache, first writes
        for run in range(args.runs):
            for tool in (["sluice", "before"] if run % 2 == 0 else ["before", "sluice"]):
                wall, cpu, rss = relay(binaries[tool], work, path, size)
                rows.append(dict(tool=tool, run=run, seconds=wall, mib_s=size / MIB / wall,
                                 cpu_s_per_gib=cpu / (size / GIB), rss=rss))
                print(f"  run {run} {tool:6} {size / MIB / wall:7.1f} MiB/s  {cpu / (size / GIB):.2f} CPU-s/GiB",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"# sluice serve relay into a local directory store, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
             f"sluice: {version([binaries['sluice'], '--version'])} (commit "
             f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}, "
             f"serve defaults); before: {binaries['before']}",
             f"{args.runs} runs of one {args.size_gib:g} GiB upload (curl -T), tools alternated, a fresh gateway "
             f"each; medians, and the median of per-run ratios", "",
             "tool       MiB/s  CPU-s/GiB   peak RSS", "-" * 40]
    for tool in ("sluice", "before"):
        mine = [r for r in rows if r["tool"] == tool]
        lines.append(f"{tool:8} {statistics.median(r['mib_s'] for r in mine):7.1f} "
                     f"{statistics.median(r['cpu_s_per_gib'] for r in mine):10.2f} "
                     f"{statistics.median(r['rss'] for r in mine) / MIB:8.1f} MiB")
    for key in ("mib_s", "cpu_s_per_gib"):
        ratio, runs = paired_ratio(rows, key, "sluice", "before")
        lines.append(f"  sluice vs before, {key}: {ratio:.2f}x (runs {', '.join(f'{r:.2f}' for r in runs)})")
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
