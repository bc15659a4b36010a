#!/usr/bin/env python3
"""tus benchmark: 1 GiB through the tus protocol, in PATCH chunks of 64 MiB and of
5 MiB, `sluice serve` against tusd (S3 store), both in front of one MinIO on
loopback, in one run. The client is `sluice bench load --api tus --chunk-size`
(creation without a body, then PATCH requests), the same for both gateways.
Columns: MiB/s seen by the client, gateway CPU-seconds per GiB, gateway peak RSS,
bytes the gateway wrote to local disk (/proc/PID/io write_bytes). `--chunks 1024`
sends the whole GiB as one PATCH, as tus-js-client and Uppy do by default.
With --before BINARY, a second sluice build runs as the tool "before" in every
rotation, and the report adds sluice/before ratios."""

import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import (drive_under, driver_args, GIB, MIB, ProcStats, clear_bucket, client_env, emit_report,
                      paired_ratio, start_gateway, start_minio, stop, version)


def upload(sluice, tool, port, size, chunk, work):
    """One upload of `size` bytes in `chunk`-byte PATCH requests; returns the client's JSON summary."""
    url = f"http://127.0.0.1:{port}/files/" if tool == "tusd" else f"http://127.0.0.1:{port}/v1/tus/"
    out_json = os.path.join(work, "tus.json")
    out = subprocess.run([sluice, "bench", "load", url, "--api", "tus", "--users", "1", "--size", str(size),
                          "--chunk-size", str(chunk), "--timeout", "600s", "--retries", "0", "--quiet",
                          "--json", out_json], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice bench failed: {out.stderr[-2000:]}")
    with open(out_json) as f:
        summary = json.load(f)
    if summary["succeeded"] != 1:
        sys.exit(f"{tool}: the upload failed: {summary['endings']}")
    return summary


def main():
    ap = driver_args()
    ap.add_argument("--size", type=int, default=GIB, help="bytes per upload")
    ap.add_argument("--chunks", default="64,5", help="PATCH chunk sizes in MiB")
    ap.add_argument("--out", default=None)
    ap.add_argument("--before", default=None, help="a second sluice binary, run as the tool 'before'")
    args = ap.parse_args()
    sluice = os.path.abspath(args.sluice)
    before = os.path.abspath(args.before) if args.before else None

    work = tempfile.mkdtemp(prefix="sluice-tus-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    for bucket in ["gw-sluice", "gw-tusd"]:
        subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", f"s3://{bucket}"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    tools = ["sluice", "tusd"] + (["before"] if before else [])
    chunks = [int(c) for c in args.chunks.split(",") if c]
    rows = []
    try:
        for run in range(args.runs):
            for chunk in chunks:
                for tool in (tools if run % 2 == 0 else tools[::-1]):
                    binary = before if tool == "before" else sluice
                    proc, port = start_gateway("tusd" if tool == "tusd" else "sluice", binary, minio_url, env, work)
                    stats = ProcStats(proc.pid)
                    cpu0, disk0 = stats.cpu(), stats.disk_writes()
                    summary = upload(sluice, tool, port, args.size, chunk * MIB, work)
                    row = dict(tool=tool, chunk_mib=chunk, run=run, seconds=summary["wall_s"],
                               mib_s=args.size / MIB / summary["wall_s"],
                               cpu_s_per_gib=(stats.cpu() - cpu0) / (args.size / GIB),
                               rss=stats.peak_rss(), disk=stats.disk_writes() - disk0)
                    stop(proc)
                    rows.append(row)
                    print(f"  run {run + 1} {chunk:3} MiB chunks {tool:6} {row['mib_s']:7.1f} MiB/s "
                          f"{row['cpu_s_per_gib']:5.2f} CPU-s/GiB {row['rss'] / MIB:7.1f} MiB RSS "
                          f"{row['disk'] / MIB:8.1f} MiB to disk", flush=True)
                    clear_bucket("gw-tusd" if tool == "tusd" else "gw-sluice", minio_url, env, work)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# tus benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
             f"sluice: {version([sluice, '--version'])} (commit {commit}), serve defaults (16 MiB parts, 8 in flight, "
             "256 MiB budget); tus at /v1/tus/",
             f"tusd: {version(['tusd', '-version'])} (v2.10.1, S3 store, defaults)",
             *([f"before: {version([before, '--version'])} ({before}), the same defaults"] if before else []),
             f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1",
             f"client: sluice bench load --api tus --chunk-size N (creation without a body, then PATCH), "
             f"{args.size / GIB:g} GiB per upload",
             f"{args.runs} runs per case, tools alternated, medians; a fresh gateway process per run", "",
             f"{'chunk':8} {'tool':7} {'MiB/s':>8} {'CPU-s/GiB':>10} {'peak RSS':>10} {'to disk':>10} {'MiB/s vs tusd':>14}",
             "-" * 74]
    for chunk in chunks:
        by_tool = {t: [r for r in rows if r["chunk_mib"] == chunk and r["tool"] == t] for t in tools}
        base = med(r["mib_s"] for r in by_tool["tusd"])
        for tool in tools:
            rs = by_tool[tool]
            rate = med(r["mib_s"] for r in rs)
            lines.append(f"{str(chunk) + ' MiB':8} {tool:7} {rate:8.1f} {med(r['cpu_s_per_gib'] for r in rs):10.2f} "
                         f"{max(r['rss'] for r in rs) / MIB:6.1f} MiB {max(r['disk'] for r in rs) / MIB:6.1f} MiB "
                         f"{rate / base:13.2f}x")
        if before:
            vs, runs = paired_ratio(rows, "mib_s", "sluice", "before", chunk_mib=chunk)
            cpu, cpu_runs = paired_ratio(rows, "cpu_s_per_gib", "sluice", "before", chunk_mib=chunk)
            lines.append(f"  {chunk} MiB chunks sluice vs before: MiB/s {vs:.2f}x (runs "
                         f"{', '.join(f'{x:.2f}' for x in runs)}), CPU-s/GiB {cpu:.2f}x (runs "
                         f"{', '.join(f'{x:.2f}' for x in cpu_runs)})")
    lines += ["", "targets: >= 1.3x tusd with 64 MiB chunks, >= 1.0x with 5 MiB chunks, 0 bytes to local disk"]
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
