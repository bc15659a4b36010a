#!/usr/bin/env python3
"""Gateway benchmark: `sluice serve` against tusd (S3 store), both in front of one
MinIO on loopback, in one run.

1. Relayed uploads (curl -> gateway -> MinIO) of 1 GiB and 4 GiB files: MiB/s seen
   by curl, gateway CPU-seconds per GiB, gateway peak RSS, bytes the gateway wrote
   to local disk (/proc/PID/io write_bytes). A fresh gateway process per run.
2. Storms: N simultaneous 10 KiB uploads, all started at once, by `sluice bench load`
   (closed model; 503 + Retry-After is retried and counts only if it then succeeds):
   success rate, uploads/s, p50/p99/max latency, gateway peak RSS; and warp's direct
   10 KiB PUT rate against the same MinIO, measured in the same rotation, as the
   ceiling.

With --before BINARY, a second sluice build (say the commit before a change) runs
as the tool "before" in every rotation, and the report adds sluice/before ratios.

With --store dir, neither gateway has an object store behind it: sluice serves its
local directory store (the embedded default) and tusd its filestore, each in a
directory of its own, so the storms measure the gateways rather than MinIO's PUT
rate (warp's ceiling is then not measured). --busy N runs N processes that each keep
a core busy during every measured run: the shared, loaded machine."""

import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (drive_under, GIB, MIB, Busy, ProcStats, clear_bucket, client_env, driver_args, emit_report,
                      make_file, paired_ratio, start_gateway, start_minio, stop, version, warp_rate)

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE = None  # the sluice binary; also the storms' load client (`sluice bench load`)


def relay(tool, port, path, size):
    """One streamed upload by curl (from standard input with a Content-Length, so that
    curl never appends the file name to the URL); returns its wall seconds."""
    common = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "-T", "-",
              "-H", f"Content-Length: {size}"]
    if tool == "sluice":
        argv = common + [f"http://127.0.0.1:{port}/v1/objects/relay/{os.path.basename(path)}"]
    else:
        argv = common + ["-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", f"Upload-Length: {size}",
                         "-H", "Content-Type: application/offset+octet-stream", f"http://127.0.0.1:{port}/files/"]
    with open(path, "rb") as body:
        out = subprocess.run(argv, stdin=body, capture_output=True, text=True)
    code, seconds = out.stdout.split()
    if not code.startswith("2"):
        sys.exit(f"{tool} relay answered {code}: {out.stderr}")
    return float(seconds)


def storm(tool, port, count, work):
    """`count` simultaneous 10 KiB uploads by `sluice bench load` (closed model, one
    upload per user, 503 + Retry-After retried); returns its JSON summary with the
    columns of the report."""
    if tool in ("sluice", "before"):
        url, api = f"http://127.0.0.1:{port}/v1/objects", "put"
    else:
        url, api = f"http://127.0.0.1:{port}/files/", "tus"
    out_json = os.path.join(work, "storm.json")
    out = subprocess.run([SLUICE, "bench", "load", url, "--api", api, "--users", str(count), "--size", "10KiB",
                          "--retries", "20", "--timeout", "120s", "--quiet", "--json", out_json],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice bench failed: {out.stderr[-2000:]}")
    with open(out_json) as f:
        row = json.load(f)
    row.update(success_rate=row["succeeded"] / count, p50_s=row["latency_s"]["p50"],
               p99_s=row["latency_s"]["p99"], max_s=row["latency_s"]["max"])
    del row["timeline"]
    return row


def store_dir(tool, args, work):
    """The directory `tool` stores into with --store dir, else None."""
    return os.path.join(work, f"dir-{tool}") if args.store == "dir" else None


def launch(tool, args, minio_url, env, work):
    """Starts `tool`'s gateway; "before" is sluice from the --before binary."""
    if tool == "before":
        return start_gateway("sluice", args.before, minio_url, env, work, store_dir=store_dir(tool, args, work))
    return start_gateway(tool, args.sluice, minio_url, env, work, store_dir=store_dir(tool, args, work))


def clear(tool, args, minio_url, env, work):
    """Removes what `tool` stored."""
    if args.store == "dir":
        shutil.rmtree(store_dir(tool, args, work), ignore_errors=True)
    else:
        clear_bucket(bucket_of(tool), minio_url, env, work)


def bucket_of(tool):
    return "gw-sluice" if tool == "before" else f"gw-{tool}"


def main():
    ap = driver_args()
    ap.add_argument("--before", default=None, help="a second sluice binary, run as the tool 'before'")
    ap.add_argument("--sizes", default="1,4", help="relay file sizes in GiB")
    ap.add_argument("--storms", default="1000,10000")
    ap.add_argument("--out", default=None)
    ap.add_argument("--store", choices=["minio", "dir"], default="minio",
                    help="what the gateways store into: MinIO (default), or a local directory each")
    ap.add_argument("--busy", type=int, default=0, help="processes keeping a core busy during measured runs")
    args = ap.parse_args()
    args.sluice = os.path.abspath(args.sluice)
    if args.before:
        args.before = os.path.abspath(args.before)
    global SLUICE
    SLUICE = args.sluice

    work = tempfile.mkdtemp(prefix="sluice-gw-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    for bucket in ["gw-sluice", "gw-tusd", "warp-bench"] if args.store == "minio" else []:
        subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", f"s3://{bucket}"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    tools = ["sluice", "tusd"] + (["before"] if args.before else [])
    relays, storms = [], []
    try:
        files = []
        for gib in [float(s) for s in args.sizes.split(",") if s]:
            path = os.path.join(work, f"relay-{gib:g}GiB.bin")
            make_file(path, int(gib * GIB))
            files.append((f"{gib:g} GiB", path, int(gib * GIB)))
        # One unmeasured relay per tool first: MinIO's first large writes after start
        # (and cold page caches) are slower than any later run, whichever tool comes first.
        if files:
            for tool in tools:
                proc, port = launch(tool, args, minio_url, env, work)
                relay("tusd" if tool == "tusd" else "sluice", port, files[0][1], files[0][2])
                stop(proc)
                clear(tool, args, minio_url, env, work)
        for run in range(args.runs):
            for label, path, size in files:
                for tool in (tools if run % 2 == 0 else tools[::-1]):
                    proc, port = launch(tool, args, minio_url, env, work)
                    stats = ProcStats(proc.pid)
                    cpu0, disk0 = stats.cpu(), stats.disk_writes()
                    with Busy(args.busy):
                        seconds = relay("tusd" if tool == "tusd" else "sluice", port, path, size)
                    row = dict(kind="relay", case=label, tool=tool, run=run, bytes=size, seconds=seconds,
                               mib_s=size / MIB / seconds, cpu_s_per_gib=(stats.cpu() - cpu0) / (size / GIB),
                               rss=stats.peak_rss(), disk=stats.disk_writes() - disk0)
                    stop(proc)
                    relays.append(row)
                    print(f"  relay run {run + 1} {label:6} {tool:6} {row['mib_s']:7.1f} MiB/s "
                          f"{row['cpu_s_per_gib']:5.2f} CPU-s/GiB {row['rss'] / MIB:7.1f} MiB RSS "
                          f"{row['disk'] / MIB:8.1f} MiB to disk", flush=True)
                    clear(tool, args, minio_url, env, work)
        counts = [int(c) for c in args.storms.split(",") if c]
        storm_tools = tools + (["warp"] if args.store == "minio" else [])
        for run in range(args.runs):
            for count in counts:
                # Each tool in turn, warp's direct rate measured in the same rotation so
                # that every ratio compares neighbours in time on a noisy machine.
                shift = run % len(storm_tools)
                for tool in storm_tools[shift:] + storm_tools[:shift]:
                    if tool == "warp":
                        with Busy(args.busy):
                            rate = warp_rate(minio_url, env, 10, 64, work)
                        storms.append(dict(kind="warp", count=count, run=run, uploads_per_s=rate))
                        print(f"  storm run {run + 1} {count:6} warp   direct {rate} obj/s", flush=True)
                        clear_bucket("warp-bench", minio_url, env, work)
                        continue
                    proc, port = launch(tool, args, minio_url, env, work)
                    stats = ProcStats(proc.pid)
                    with Busy(args.busy):
                        row = storm(tool, port, count, work)
                    row.update(kind="storm", tool=tool, count=count, run=run, rss=stats.peak_rss())
                    stop(proc)
                    storms.append(row)
                    print(f"  storm run {run + 1} {count:6} {tool:6} {row['success_rate'] * 100:6.2f}% ok "
                          f"{row['uploads_per_s']:7.1f}/s p50 {row['p50_s']:.2f}s p99 {row['p99_s']:.2f}s "
                          f"max {row['max_s']:.2f}s retried {row['retried_503']} endings {row['endings']} "
                          f"{row['rss'] / MIB:.1f} MiB RSS", flush=True)
                    clear(tool, args, minio_url, env, work)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    lines = [f"# sluice serve gateway benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
             f"sluice: {version([args.sluice, '--version'])} (commit "
             f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}),"
             " serve defaults (16 MiB parts, 8 in flight, 256 MiB budget, 256 uploads + queue 16384 (30 s), store concurrency 128)",
             f"tusd: {version(['tusd', '-version'])} (v2.10.1, "
             f"{'S3 store' if args.store == 'minio' else 'filestore'}, defaults)",
             *(["store: --store dir: sluice's local directory store and tusd's filestore, a directory each "
                "under /tmp; MinIO runs but holds nothing of theirs"] if args.store == "dir" else []),
             *([f"load: {args.busy} process(es) keeping a core busy each during every measured run"]
               if args.busy else []),
             *([f"before: {version([args.before, '--version'])} ({args.before}), the same defaults"]
               if args.before else []),
             f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1; warp v1.0.0",
             f"{args.runs} runs per case after one unmeasured warm-up relay per tool, tools alternated, medians; "
             "a fresh gateway process per run",
             "ratios (vs columns): median over runs of the ratio within each run, whose tools ran back to back;"
             " per-run ratios listed under each table", "",
             f"{'relay':8} {'tool':7} {'MiB/s':>8} {'CPU-s/GiB':>10} {'peak RSS':>10} {'to disk':>10} {'MiB/s vs tusd':>14}",
             "-" * 74]
    per_run = []
    for label, _, _ in files:
        rows = {t: [r for r in relays if r["case"] == label and r["tool"] == t] for t in tools}
        for tool in tools:
            rs = rows[tool]
            vs_tusd, runs = paired_ratio(relays, "mib_s", tool, "tusd", case=label)
            lines.append(f"{label:8} {tool:7} {med(r['mib_s'] for r in rs):8.1f} "
                         f"{med(r['cpu_s_per_gib'] for r in rs):10.2f} "
                         f"{max(r['rss'] for r in rs) / MIB:6.1f} MiB {max(r['disk'] for r in rs) / MIB:6.1f} MiB "
                         f"{vs_tusd:13.2f}x")
            if tool == "sluice":
                per_run.append(f"  {label} sluice vs tusd per run: {', '.join(f'{x:.2f}' for x in runs)}")
                if args.before:
                    vs, before_runs = paired_ratio(relays, "mib_s", "sluice", "before", case=label)
                    cpu, cpu_runs = paired_ratio(relays, "cpu_s_per_gib", "sluice", "before", case=label)
                    per_run.append(f"  {label} sluice vs before: MiB/s {vs:.2f}x (runs "
                                   f"{', '.join(f'{x:.2f}' for x in before_runs)}), CPU-s/GiB {cpu:.2f}x (runs "
                                   f"{', '.join(f'{x:.2f}' for x in cpu_runs)})")
    lines += per_run
    lines += ["", f"{'storm':7} {'tool':7} {'success':>8} {'uploads/s':>10} {'p50 s':>7} {'p99 s':>7} {'max s':>7} "
              f"{'peak RSS':>10} {'vs tusd':>8} {'vs warp':>8}", "-" * 90]
    per_run = []
    for count in sorted({r["count"] for r in storms}):
        rows = {t: [r for r in storms if r["count"] == count and r.get("tool") == t] for t in tools}
        warps = [r["uploads_per_s"] for r in storms if r["count"] == count and r["kind"] == "warp" and r["uploads_per_s"]]
        for tool in tools:
            rs = rows[tool]
            vs_tusd, tusd_runs = paired_ratio(storms, "uploads_per_s", tool, "tusd", count=count)
            vs_warp, warp_runs = paired_ratio(storms, "uploads_per_s", tool, "warp", count=count)
            lines.append(f"{count:<7} {tool:7} {min(r['success_rate'] for r in rs) * 100:7.2f}% "
                         f"{med(r['uploads_per_s'] for r in rs):10.1f} "
                         f"{med(r['p50_s'] for r in rs):7.2f} {med(r['p99_s'] for r in rs):7.2f} "
                         f"{max(r['max_s'] or 0 for r in rs):7.2f} {max(r['rss'] for r in rs) / MIB:6.1f} MiB "
                         f"{vs_tusd:7.2f}x " + (f"{vs_warp:7.2f}x" if vs_warp else f"{'-':>8}"))
            if tool == "sluice":
                per_run.append(f"  {count} sluice per run: vs tusd {', '.join(f'{x:.2f}' for x in tusd_runs)}"
                               + (f"; vs warp {', '.join(f'{x:.2f}' for x in warp_runs)}" if warp_runs else ""))
                if args.before:
                    vs, before_runs = paired_ratio(storms, "uploads_per_s", "sluice", "before", count=count)
                    per_run.append(f"  {count} sluice vs before: uploads/s {vs:.2f}x (runs "
                                   f"{', '.join(f'{x:.2f}' for x in before_runs)})")
        if warps:
            lines.append(f"{count:<7} {'warp':7} {'':>8} {med(warps):10.1f}   (direct 10 KiB PUT to MinIO, "
                         f"64 concurrent, 10 s; runs {', '.join(f'{w:.0f}' for w in warps)})")
    lines += per_run
    emit_report(lines, relays + storms, args.out)

if __name__ == "__main__":
    main()
