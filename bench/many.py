#!/usr/bin/env python3
"""Many files up and down: `sluice put DIR` / `sluice get PREFIX/ DIR` against
`s5cmd cp`, `aws s3 cp --recursive` and `rclone copy`, all at their defaults,
against one MinIO on loopback, in one run, tools alternated, N runs each.
Prints files/s, MiB/s, client CPU-seconds, peak RSS and ratios to s5cmd (median
of the per-run ratios). Then a second `sync` of an unchanged tree: sluice
against `aws s3 sync` (and s5cmd's and rclone's).

Client costs come from GNU time around the client process alone. MinIO's CPU
seconds over the same run, and how busy the whole machine was (all CPU time but
idle and iowait, from /proc/stat, over cores x wall), show what bounds a row:
when the machine is near 100 % busy, a faster client needs less CPU per byte
(its own or the server's), not more parallelism. warp, MinIO's own load
generator, is run once per case of objects up to 1 MiB against the same MinIO:
a client that reads and writes no local files, for comparison. Every prefix is deleted after
its run so the disk does not fill up."""

import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import (drive_under, GIB, MIB, MINIO_USER, MINIO_SECRET, ProcStats, client_env, driver_args, emit_report,
                      empty_trash, make_file, start_minio, version, warp_rate)

TOOLS = ["sluice", "s5cmd", "aws", "rclone"]


def run_measured(argv, env):
    """(wall seconds, user+sys CPU seconds, peak RSS bytes) of argv alone, under GNU time."""
    with tempfile.NamedTemporaryFile("r") as report:
        proc = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%e %U %S %M"] + argv, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            sys.exit(f"{argv[:3]} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-2000:]}")
        wall, user, system, rss_kib = report.read().split()[-4:]
    return float(wall), float(user) + float(system), int(rss_kib) * 1024


def machine_busy_seconds():
    """CPU seconds all cores spent on anything but idle and iowait since boot."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def make_tree(root, count, size):
    """`count` random files of `size` bytes, 100 to a directory."""
    os.makedirs(root)
    chunk = os.urandom(min(size, 4 * MIB))
    for i in range(count):
        d = os.path.join(root, f"d{i // 100:03}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"f{i:05}.bin")
        if size > len(chunk):
            make_file(path, size)
        else:
            with open(path, "wb") as f:
                # Distinct content per file without the cost of urandom for each.
                f.write(i.to_bytes(8, "little") + chunk[8:size])


def main():
    ap = driver_args()
    ap.add_argument("--cases", default="10000x10KiB,1000x1MiB,20x256MiB",
                    help="COUNTxSIZE, comma-separated (sizes in KiB or MiB)")
    ap.add_argument("--sync-files", type=int, default=10000, help="files in the unchanged-sync tree (0: skip)")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--ceiling-seconds", type=int, default=10,
                    help="seconds of warp put and get per case, MinIO's own rate for a lean client (0: skip)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tools = args.tools.split(",")

    work = tempfile.mkdtemp(prefix="sluice-many-")
    minio, url = start_minio(work)
    server = ProcStats(minio.pid)
    env = client_env(work)
    # rclone: an S3 remote named by environment variables only.
    env.update(RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Minio",
               RCLONE_CONFIG_BENCH_ENDPOINT=url, RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=MINIO_USER,
               RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=MINIO_SECRET, RCLONE_CONFIG=os.path.join(work, "none"))
    env.pop("AWS_CA_BUNDLE", None)
    sluice = os.path.abspath(args.sluice)
    bucket = "bench"
    subprocess.run(["s5cmd", "--endpoint-url", url, "mb", f"s3://{bucket}"], env=env, check=True,
                   stdout=subprocess.DEVNULL)

    def up(tool, src, prefix):
        dest = f"s3://{bucket}/{prefix}/"
        return {
            "sluice": [sluice, "put", src, dest, "--endpoint", url, "--quiet"],
            "s5cmd": ["s5cmd", "--endpoint-url", url, "cp", f"{src}/*", dest],
            "aws": ["aws", "--endpoint-url", url, "s3", "cp", "--recursive", "--only-show-errors", src, dest],
            "rclone": ["rclone", "copy", src, f"bench:{bucket}/{prefix}"],
        }[tool]

    def down(tool, prefix, dest):
        src = f"s3://{bucket}/{prefix}/"
        return {
            "sluice": [sluice, "get", src, dest, "--endpoint", url, "--quiet"],
            "s5cmd": ["s5cmd", "--endpoint-url", url, "cp", f"{src}*", dest + "/"],
            "aws": ["aws", "--endpoint-url", url, "s3", "cp", "--recursive", "--only-show-errors", src, dest],
            "rclone": ["rclone", "copy", f"bench:{bucket}/{prefix}", dest],
        }[tool]

    def sync(tool, src, prefix):
        dest = f"s3://{bucket}/{prefix}/"
        return {
            "sluice": [sluice, "sync", src, dest, "--endpoint", url, "--quiet"],
            "s5cmd": ["s5cmd", "--endpoint-url", url, "sync", f"{src}/", dest],
            "aws": ["aws", "--endpoint-url", url, "s3", "sync", "--only-show-errors", src, dest],
            "rclone": ["rclone", "sync", src, f"bench:{bucket}/{prefix}"],
        }[tool]

    def remove(prefix):
        subprocess.run(["s5cmd", "--endpoint-url", url, "rm", f"s3://{bucket}/{prefix}/*"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        empty_trash(work)

    cases = []
    for spec in args.cases.split(","):
        count, size = spec.split("x")
        unit = MIB if size.endswith("MiB") else 1024
        size_bytes = int(size[:-3]) * unit
        root = os.path.join(work, f"tree-{spec}")
        make_tree(root, int(count), size_bytes)
        cases.append((spec, root, int(count), size_bytes))

    raw = []
    try:
        for run in range(args.runs):
            for label, root, count, size in cases:
                order = tools if run % 2 == 0 else list(reversed(tools))
                for tool in order:
                    prefix = f"{tool}-{run}-{label}"
                    for direction in ("upload", "download"):
                        if direction == "upload":
                            argv = up(tool, root, prefix)
                        else:
                            dest = os.path.join(work, "down")
                            shutil.rmtree(dest, ignore_errors=True)
                            os.makedirs(dest)
                            argv = down(tool, prefix, dest)
                        server_before, busy_before = server.cpu(), machine_busy_seconds()
                        wall, cpu, rss = run_measured(argv, env)
                        server_cpu = server.cpu() - server_before
                        busy = (machine_busy_seconds() - busy_before) / (os.cpu_count() * wall)
                        if direction == "download":
                            got = sum(len(f) for _, _, f in os.walk(dest))
                            if got != count:
                                sys.exit(f"{tool} downloaded {got} of {count} files")
                            shutil.rmtree(dest, ignore_errors=True)
                        raw.append(dict(case=label, direction=direction, tool=tool, run=run, files=count,
                                        bytes=count * size, wall=wall, cpu=cpu, rss=rss, server_cpu=server_cpu,
                                        busy=busy))
                        print(f"  run {run + 1} {label:12} {direction:8} {tool:6} {count / wall:9.1f} files/s "
                              f"{count * size / MIB / wall:8.1f} MiB/s {cpu:7.2f} CPU-s {rss / MIB:7.1f} MiB RSS "
                              f"MinIO {server_cpu:6.2f} CPU-s, machine {busy:4.0%} busy",
                              flush=True)
                    remove(prefix)
        ceiling = []
        if args.ceiling_seconds:
            # warp, the MinIO team's load generator, against the same MinIO with the
            # case's object size: a client that reads and writes no files (it is
            # a process on the same cores too).
            subprocess.run(["s5cmd", "--endpoint-url", url, "mb", "s3://warp-bench"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # Objects of 1 MiB at most: warp needs many operations per run for a rate,
            # and a big object's row is read from how busy the machine was.
            for label, _, count, size in (c for c in cases if c[3] <= MIB):
                concurrency = 64
                for direction, op in (("upload", "put"), ("download", "get")):
                    rate = warp_rate(url, env, args.ceiling_seconds, concurrency, work, op=op,
                                     size=f"{size // 1024}KiB", objects=count if op == "get" else None,
                                     clear=True)
                    empty_trash(work)
                    ceiling.append(dict(case=label, direction=direction, concurrency=concurrency, rate=rate))
                    print(f"  ceiling {label:12} {direction:8} warp {rate or 0:9.1f} objects/s", flush=True)
        sync_rows = []
        if args.sync_files:
            root = os.path.join(work, "sync-tree")
            make_tree(root, args.sync_files, 10 * 1024)
            for tool in tools:
                prefix = f"sync-{tool}"
                subprocess.run(sync(tool, root, prefix), env=env, check=True, stdout=subprocess.DEVNULL)
            for run in range(args.runs):
                order = tools if run % 2 == 0 else list(reversed(tools))
                for tool in order:
                    wall, cpu, rss = run_measured(sync(tool, root, f"sync-{tool}"), env)
                    sync_rows.append(dict(tool=tool, run=run, wall=wall, cpu=cpu, rss=rss))
                    print(f"  run {run + 1} unchanged sync {tool:6} {wall:7.2f} s {cpu:7.2f} CPU-s "
                          f"{rss / MIB:7.1f} MiB RSS", flush=True)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    lines = [f"# many files benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"]
    lines.append(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
                 f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB RAM, Linux {platform.release()}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines.append(f"sluice: {version([sluice, '--version'])} (commit {commit}), defaults (--concurrency auto, "
                 "at most 64 files in flight, 256 MiB budget, crc32c)")
    peers = {
        "s5cmd": lambda: f"s5cmd: {version(['s5cmd', 'version'])} (v2.3.0), defaults (256 workers)",
        "aws": lambda: f"aws: {version(['aws', '--version'])}, defaults (10 threads)",
        "rclone": lambda: f"rclone: {version(['rclone', 'version'])}, defaults (4 transfers, 8 checkers)",
    }
    lines.extend(line() for tool, line in peers.items() if tool in tools)
    lines.append(f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1")
    lines.append(f"{args.runs} runs per tool, case and direction, tools alternated; medians; CPU = client user+sys "
                 "seconds for the whole transfer; RSS = client peak; ratios = median of per-run ratios to s5cmd; "
                 "MinIO = server CPU-s over the same run; busy = all CPU time of the machine but idle and iowait "
                 "over cores x wall")
    lines.append("")
    header = (f"{'case':12} {'dir':8} {'tool':6} {'files/s':>9} {'MiB/s':>8} {'CPU-s':>7} {'peak RSS':>10} "
              f"{'rate vs s5cmd':>14} {'CPU vs s5cmd':>13} {'MinIO CPU-s':>12} {'busy':>5}")
    lines.append(header)
    lines.append("-" * len(header))
    for label, _, count, size in cases:
        for direction in ("upload", "download"):
            for tool in tools:
                rows = [r for r in raw if (r["case"], r["direction"], r["tool"]) == (label, direction, tool)]
                base = {r["run"]: r for r in raw if (r["case"], r["direction"], r["tool"]) == (label, direction, "s5cmd")}
                wall = statistics.median(r["wall"] for r in rows)
                cpu = statistics.median(r["cpu"] for r in rows)
                rss = max(r["rss"] for r in rows)
                rate_ratio = statistics.median(base[r["run"]]["wall"] / r["wall"] for r in rows) if base else 0
                cpu_ratio = statistics.median(r["cpu"] / base[r["run"]]["cpu"] for r in rows) if base else 0
                server_cpu = statistics.median(r.get("server_cpu", 0) for r in rows)
                busy = statistics.median(r.get("busy", 0) for r in rows)
                lines.append(f"{label:12} {direction:8} {tool:6} {count / wall:9.1f} {count * size / MIB / wall:8.1f} "
                             f"{cpu:7.2f} {rss / MIB:7.1f} MiB {rate_ratio:13.2f}x {cpu_ratio:12.2f}x "
                             f"{server_cpu:12.2f} {busy:5.0%}")
    if ceiling:
        lines.append("")
        lines.append(f"warp (MinIO's load generator: no files read or written, same cores) put/get, "
                     f"{args.ceiling_seconds} s each, 64 at once, objects of the case's size (1 MiB at most), once after the runs")
        header = (f"{'case':12} {'dir':8} {'objects/s':>10} {'MiB/s':>8} "
                  f"{'sluice/warp':>12} {'s5cmd/warp':>11}")
        lines.append(header)
        lines.append("-" * len(header))
        for row in ceiling:
            size = next(size for label, _, _, size in cases if label == row["case"])
            rate = row["rate"] or 0

            def share(tool):
                rows = [r for r in raw if (r["case"], r["direction"], r["tool"]) == (row["case"], row["direction"], tool)]
                if not rows or not rate:
                    return "-"
                return f"{statistics.median(r['files'] / r['wall'] for r in rows) / rate:.2f}"
            lines.append(f"{row['case']:12} {row['direction']:8} {rate:10.1f} "
                         f"{rate * size / MIB:8.1f} {share('sluice'):>12} {share('s5cmd'):>11}")
    if sync_rows:
        lines.append("")
        lines.append(f"second sync of an unchanged tree of {args.sync_files} files of 10 KiB (nothing to move)")
        header = f"{'tool':6} {'seconds':>8} {'CPU-s':>7} {'peak RSS':>10} {'time vs aws':>12}"
        lines.append(header)
        lines.append("-" * len(header))
        aws = {r["run"]: r for r in sync_rows if r["tool"] == "aws"}
        for tool in tools:
            rows = [r for r in sync_rows if r["tool"] == tool]
            ratio = statistics.median(r["wall"] / aws[r["run"]]["wall"] for r in rows) if aws else 0
            lines.append(f"{tool:6} {statistics.median(r['wall'] for r in rows):8.2f} "
                         f"{statistics.median(r['cpu'] for r in rows):7.2f} {max(r['rss'] for r in rows) / MIB:7.1f} MiB "
                         f"{ratio:11.2f}x")
    emit_report(lines, raw + [dict(sync=True, **r) for r in sync_rows] + [dict(ceiling=True, **r) for r in ceiling],
                args.out)


if __name__ == "__main__":
    main()
