#!/usr/bin/env python3
"""Draft benchmark: 1 GiB through the IETF resumable-upload draft against tus on
the same gateway and against tusd's draft support, in one run: `sluice serve`
(the draft and tus on /v1/tus/) and tusd (S3 store, -enable-experimental-protocol,
the draft and tus on /files/), both in front of one MinIO on loopback. The client
is `sluice bench load --api draft|tus` for all four: with a chunk size, a
creation without a body and PATCHes of that size (the draft's last one says
Upload-Complete: ?1); with "whole", one request carrying the whole upload (the
draft's optimistic creation, tus's creation-with-upload). The draft is sent as
interop 6, the newest tusd serves. Columns: MiB/s seen by the client, gateway
CPU-seconds per GiB, gateway peak RSS, bytes the gateway wrote to local disk."""

import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import json

from benchlib import (drive_under, driver_args, GIB, MIB, ProcStats, clear_bucket, client_env, emit_report,
                      start_gateway, start_minio, stop, version)

CASES = [("sluice", "draft"), ("sluice", "tus"), ("tusd", "draft"), ("tusd", "tus")]


def upload(sluice, tool, api, port, size, chunk, work):
    """One upload of `size` bytes (in `chunk`-byte PATCHes, or whole when None);
    returns the client's JSON summary."""
    url = f"http://127.0.0.1:{port}/v1/tus/" if tool == "sluice" else f"http://127.0.0.1:{port}/files/"
    out_json = os.path.join(work, "draft.json")
    argv = [sluice, "bench", "load", url, "--api", api, "--users", "1", "--size", str(size),
            "--timeout", "600s", "--retries", "0", "--quiet", "--json", out_json]
    if chunk:
        argv += ["--chunk-size", str(chunk)]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice bench failed: {out.stderr[-2000:]}")
    with open(out_json) as f:
        summary = json.load(f)
    if summary["succeeded"] != 1:
        sys.exit(f"{tool} {api}: the upload failed: {summary['endings']}")
    return summary


def main():
    ap = driver_args()
    ap.add_argument("--size", type=int, default=GIB, help="bytes per upload")
    ap.add_argument("--chunks", default="5,whole", help="PATCH chunk sizes in MiB, or 'whole'")
    ap.add_argument("--cases", default=",".join(f"{t}-{a}" for t, a in CASES),
                    help="which of sluice-draft, sluice-tus, tusd-draft, tusd-tus to run (an A/B of two, say)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cases = [tuple(c.split("-", 1)) for c in args.cases.split(",") if c]
    if any(c not in CASES for c in cases):
        sys.exit(f"--cases: expected some of {', '.join(f'{t}-{a}' for t, a in CASES)}")
    sluice = os.path.abspath(args.sluice)

    work = tempfile.mkdtemp(prefix="sluice-draft-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    for bucket in ["gw-sluice", "gw-tusd"]:
        subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", f"s3://{bucket}"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    chunks = [c for c in args.chunks.split(",") if c]
    rows = []
    try:
        for run in range(args.runs):
            for chunk in chunks:
                chunk_bytes = None if chunk == "whole" else int(chunk) * MIB
                for tool, api in (cases if run % 2 == 0 else cases[::-1]):
                    extra = ["-enable-experimental-protocol"] if tool == "tusd" else []
                    proc, port = start_gateway(tool, sluice, minio_url, env, work, extra)
                    stats = ProcStats(proc.pid)
                    cpu0, disk0 = stats.cpu(), stats.disk_writes()
                    summary = upload(sluice, tool, api, port, args.size, chunk_bytes, work)
                    row = dict(tool=tool, api=api, chunk=chunk, run=run, seconds=summary["wall_s"],
                               mib_s=args.size / MIB / summary["wall_s"],
                               cpu_s_per_gib=(stats.cpu() - cpu0) / (args.size / GIB),
                               rss=stats.peak_rss(), disk=stats.disk_writes() - disk0)
                    stop(proc)
                    rows.append(row)
                    print(f"  run {run + 1} {chunk:>5} {tool:6} {api:5} {row['mib_s']:7.1f} MiB/s "
                          f"{row['cpu_s_per_gib']:5.2f} CPU-s/GiB {row['rss'] / MIB:7.1f} MiB RSS "
                          f"{row['disk'] / MIB:8.1f} MiB to disk", flush=True)
                    clear_bucket(f"gw-{tool}", minio_url, env, work)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# draft benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
             f"sluice: {version([sluice, '--version'])} (commit {commit}), serve defaults (16 MiB parts, 8 in flight, "
             "256 MiB budget); the draft and tus at /v1/tus/",
             f"tusd: {version(['tusd', '-version'])} (S3 store, defaults, -enable-experimental-protocol)",
             f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1",
             "client: sluice bench load --api draft|tus (draft as interop 6), "
             f"{args.size / GIB:g} GiB per upload; 'whole' = one request with every byte",
             f"{args.runs} runs per case, cases alternated, medians; a fresh gateway process per run", "",
             f"{'chunk':7} {'gateway':7} {'api':6} {'MiB/s':>8} {'CPU-s/GiB':>10} {'peak RSS':>10} {'to disk':>10}"
             f" {'vs sluice tus':>14} {'vs tusd draft':>14}",
             "-" * 96]
    for chunk in chunks:
        def rate(tool, api):
            values = [r["mib_s"] for r in rows if r["chunk"] == chunk and r["tool"] == tool and r["api"] == api]
            return med(values) if values else float("nan")
        for tool, api in cases:
            rs = [r for r in rows if r["chunk"] == chunk and r["tool"] == tool and r["api"] == api]
            mib_s = rate(tool, api)
            label = chunk if chunk == "whole" else f"{chunk} MiB"
            lines.append(f"{label:7} {tool:7} {api:6} {mib_s:8.1f} {med(r['cpu_s_per_gib'] for r in rs):10.2f} "
                         f"{max(r['rss'] for r in rs) / MIB:6.1f} MiB {max(r['disk'] for r in rs) / MIB:6.1f} MiB "
                         f"{mib_s / rate('sluice', 'tus'):13.2f}x {mib_s / rate('tusd', 'draft'):13.2f}x")
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
