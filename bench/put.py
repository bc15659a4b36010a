#!/usr/bin/env python3
"""Runs `sluice put`, `s5cmd cp` and `aws s3 cp` against one MinIO on loopback,
alternating the tools, and prints median MiB/s, client CPU-seconds per GiB
(user + sys), peak RSS and the sluice/s5cmd ratios. In the same rotation warp,
the MinIO team's load generator (no file to read, random data made as it
sends), PUTs objects of each file size at --warp-concurrency: the store's own
PUT ceiling for such objects, and the sluice/warp ratio of MiB/s. Client costs come from GNU
time around the client process alone (the `cat` feeding standard input is not
counted).
Every object is deleted after its run so the disk does not fill up."""

import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import (drive_under, driver_args, GIB, MIB, client_env, clear_bucket, emit_report, empty_trash, make_file,
                      paired_ratio, start_minio, version, warp_rate)


def run_measured(argv, env, stdin_file=None):
    """Runs argv under GNU time; returns (wall seconds, user+sys CPU seconds, peak RSS
    bytes) of that process alone. (wait4 from this script would report at least
    this script's own RSS, which a child inherits as its starting maximum.)"""
    with tempfile.NamedTemporaryFile("r") as report:
        feeder = None
        stdin = subprocess.DEVNULL
        if stdin_file:
            feeder = subprocess.Popen(["cat", stdin_file], stdout=subprocess.PIPE)
            stdin = feeder.stdout
        proc = subprocess.Popen(["/usr/bin/time", "-o", report.name, "-f", "%e %U %S %M"] + argv, env=env,
                                stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if feeder:
            feeder.stdout.close()
        _, err = proc.communicate()
        if feeder:
            feeder.wait()
        if proc.returncode != 0:
            sys.exit(f"{argv[0]} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
        wall, user, system, rss_kib = report.read().split()[-4:]
    return float(wall), float(user) + float(system), int(rss_kib) * 1024


def main():
    ap = driver_args()
    ap.add_argument("--sizes", default="1,4", help="file sizes in GiB")
    ap.add_argument("--stdin-size", type=float, default=1, help="GiB sent through standard input")
    ap.add_argument("--warp-seconds", type=int, default=20,
                    help="seconds of warp put per file size at concurrency 1, times concurrency/2 above (0: no warp)")
    ap.add_argument("--warp-concurrency", default="1,4",
                    help="warp's --concurrent values, each a row (1: one object at a time, as one put)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    warp_concurrency = [int(c) for c in args.warp_concurrency.split(",") if c] if args.warp_seconds else []

    work = tempfile.mkdtemp(prefix="sluice-bench-")
    minio, url = start_minio(work)
    env = client_env(work)
    sluice = os.path.abspath(args.sluice)
    bucket = "bench"
    for name in [bucket] + (["warp-bench"] if warp_concurrency else []):
        subprocess.run(["s5cmd", "--endpoint-url", url, "mb", f"s3://{name}"], env=env, check=True,
                       stdout=subprocess.DEVNULL)

    tools = {
        "sluice": lambda src, key: [sluice, "put", src, f"s3://{bucket}/{key}", "--endpoint", url, "--quiet"],
        "s5cmd": lambda src, key: (["s5cmd", "--endpoint-url", url, "pipe", f"s3://{bucket}/{key}"] if src == "-"
                                   else ["s5cmd", "--endpoint-url", url, "cp", src, f"s3://{bucket}/{key}"]),
        "aws": lambda src, key: ["aws", "--endpoint-url", url, "s3", "cp", "--only-show-errors", src,
                                 f"s3://{bucket}/{key}"],
    }
    cases = []
    for gib in [float(s) for s in args.sizes.split(",") if s]:
        path = os.path.join(work, f"file-{gib:g}GiB.bin")
        make_file(path, int(gib * GIB))
        cases.append((f"{gib:g} GiB file", path, False, int(gib * GIB)))
    if args.stdin_size > 0:
        size = int(args.stdin_size * GIB)
        path = os.path.join(work, f"stdin-{args.stdin_size:g}GiB.bin")
        if not os.path.exists(path):
            make_file(path, size)
        cases.append((f"{args.stdin_size:g} GiB stdin", path, True, size))

    raw = []
    try:
        for run in range(args.runs):
            for label, path, from_stdin, size in cases:
                order = list(tools) if run % 2 == 0 else list(reversed(tools))
                for tool in order:
                    key = f"{tool}-{run}-{label.replace(' ', '_')}"
                    argv = tools[tool]("-" if from_stdin else path, key)
                    wall, cpu, rss = run_measured(argv, env, stdin_file=path if from_stdin else None)
                    raw.append(dict(case=label, tool=tool, run=run, bytes=size, wall=wall, cpu=cpu, rss=rss))
                    print(f"  run {run + 1} {label:14} {tool:7} {size / MIB / wall:8.1f} MiB/s "
                          f"{cpu / (size / GIB):6.2f} CPU-s/GiB {rss / MIB:7.1f} MiB RSS", flush=True)
                    subprocess.run(["s5cmd", "--endpoint-url", url, "rm", f"s3://{bucket}/{key}"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                    empty_trash(work)
                if from_stdin:
                    continue
                for concurrency in warp_concurrency:
                    # warp needs a few objects done per concurrent upload for a rate
                    seconds = args.warp_seconds * max(1, concurrency // 2)
                    objects_per_s = warp_rate(url, env, seconds, concurrency, work, size=f"{size // MIB}MiB")
                    if objects_per_s is None:
                        sys.exit("warp gave no rate (its output is above)")
                    tool = f"warp c{concurrency}"
                    wall = 1 / objects_per_s
                    raw.append(dict(case=label, tool=tool, run=run, bytes=size, wall=wall, cpu=None, rss=None))
                    print(f"  run {run + 1} {label:14} {tool:7} {size / MIB / wall:8.1f} MiB/s", flush=True)
                    clear_bucket("warp-bench", url, env, work)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    lines = []
    lines.append(f"# sluice put benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    lines.append(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
                 f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB RAM, Linux {platform.release()}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines.append(f"sluice: {version([sluice, '--version'])} (commit {commit}), defaults "
                 f"(16 MiB parts, 8 in flight, crc32c, 256 MiB budget)")
    lines.append(f"s5cmd: {version(['s5cmd', 'version'])} (v2.3.0 built from the module), defaults")
    lines.append(f"aws: {version(['aws', '--version'])}, defaults")
    lines.append(f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1")
    lines.append(f"{args.runs} runs per tool and case, tools alternated; medians; CPU = client user+sys; "
                 "RSS = client peak")
    lines.append("")
    header = f"{'case':15} {'tool':7} {'MiB/s':>8} {'CPU-s/GiB':>10} {'peak RSS':>10} {'MiB/s vs s5cmd':>15} {'CPU vs s5cmd':>13}"
    lines.append(header)
    lines.append("-" * len(header))
    summary = {}
    for label, _, _, size in cases:
        for tool in tools:
            rows = [r for r in raw if r["case"] == label and r["tool"] == tool]
            summary[(label, tool)] = (
                statistics.median(size / MIB / r["wall"] for r in rows),
                statistics.median(r["cpu"] / (size / GIB) for r in rows),
                max(r["rss"] for r in rows),
            )
        base_rate, base_cpu, _ = summary[(label, "s5cmd")]
        for tool in tools:
            rate, cpu, rss = summary[(label, tool)]
            lines.append(f"{label:15} {tool:7} {rate:8.1f} {cpu:10.2f} {rss / MIB:8.1f} MiB "
                         f"{rate / base_rate:14.2f}x {cpu / base_cpu:12.2f}x")
        for concurrency in warp_concurrency if "file" in label else []:
            tool = f"warp c{concurrency}"
            rate = statistics.median(size / MIB / r["wall"] for r in raw if r["case"] == label and r["tool"] == tool)
            lines.append(f"{label:15} {tool:7} {rate:8.1f} {'':>10} {'':>12} {rate / base_rate:14.2f}x")
    if warp_concurrency:
        lines.append("")
        lines.append(f"sluice put against warp put of objects of the file's size ({args.warp_seconds} s x "
                     "max(1, concurrency/2)), in the same rotation (MiB/s; the median of per-run ratios):")
        for label, _, from_stdin, _ in cases:
            if from_stdin:
                continue
            for concurrency in warp_concurrency:
                for row in raw:
                    if row["case"] == label:
                        row["mib_s"] = row["bytes"] / MIB / row["wall"]
                ratio, runs = paired_ratio([r for r in raw if r["case"] == label], "mib_s", "sluice",
                                           f"warp c{concurrency}")
                lines.append(f"  {label:15} sluice / warp --concurrent {concurrency}: {ratio:.2f}x "
                             f"(runs {', '.join(f'{x:.2f}' for x in runs)})")
    emit_report(lines, raw, args.out)

if __name__ == "__main__":
    main()
