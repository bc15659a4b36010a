#!/usr/bin/env python3
"""A/B of sluice builds on one download: `sluice get PREFIX/ DIR` for each build,
and `s5cmd cp 'PREFIX/*' DIR/` (or, with --upload-from DIR, on one upload:
`sluice put DIR PREFIX/RUN/` and `s5cmd cp 'DIR/*' PREFIX/RUN/`, a fresh RUN
each time), the order rotated each round so that no build
always follows the same one (the disk's writeback of the last run and ext4's
work after the last removal fall on each in turn).

The objects must already be under PREFIX (for example `s5cmd cp 'DIR/*'
s3://bench/big/`), and the store's credentials in the environment. Each run
downloads into a fresh directory (removed, then `sync`, then a pause before the
next; with --back-to-back, neither); GNU time gives wall, user and sys time and peak RSS of the client alone.

    bench/ab-download.py --endpoint http://127.0.0.1:9100 --source s3://bench/big/ \\
        --server-pid "$(pgrep -f "minio server")" --rounds 5 old=/tmp/sluice-old new=target/release/sluice 'c32=target/release/sluice --concurrency 32'

With --warp SIZE, warp's own PUT (uploads) or GET (downloads) rate for objects
of SIZE, 64 at once for 10 s, is measured after the rounds: the store's
ceiling for a client that reads and writes no files.
"""

import argparse
import re
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def server_cpu(pid):
    """CPU seconds the store's process has used (user + system), or 0 without a pid."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(argv, dest, server_pid, settle=True):
    if dest:
        shutil.rmtree(dest, ignore_errors=True)
    if settle:
        subprocess.run(["sync"], check=True)
        time.sleep(3)
    timed = ["/usr/bin/time", "-f", "%e %U %S %M"] + argv
    before = server_cpu(server_pid)
    done = subprocess.run(timed, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server = server_cpu(server_pid) - before
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stderr}")
    wall, user, system, rss = done.stderr.strip().splitlines()[-1].split()
    return {"wall": float(wall), "user": float(user), "sys": float(system), "rss_mib": int(rss) / 1024, "server": server}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--source", required=True, help="s3://bucket/prefix/ holding the objects")
    parser.add_argument("--dest", default="/tmp/sluice-ab-download")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server-pid", type=int, help="the store's process: its CPU during each run is reported too")
    parser.add_argument("--back-to-back", action="store_true",
                        help="no sync and pause between runs: the last run's writeback and a page cache that fills "
                             "the memory fall on the next (the regime of bench/many.sh)")
    parser.add_argument("--upload-from", metavar="DIR", help="time uploads of DIR's files instead of downloads")
    parser.add_argument("--warp", metavar="SIZE", help="warp's own rate for objects of SIZE (10KiB), as the store's ceiling")
    parser.add_argument("--args", default="", help="extra arguments for every sluice build")
    parser.add_argument("builds", nargs="+",
                        help="name=path of a sluice binary, with arguments of its own after the path ('c32=target/release/sluice --concurrency 32')")
    opts = parser.parse_args()
    source = opts.source if opts.source.endswith("/") else opts.source + "/"
    tools = {}
    # RUN stands for a fresh prefix per upload.
    upload = opts.upload_from.rstrip("/") if opts.upload_from else None
    for build in opts.builds:
        name, _, command = build.partition("=")
        path, *own = command.split()
        verb = ["put", upload, source + "RUN/"] if upload else ["get", source, opts.dest]
        tools[name] = [path] + verb + ["--endpoint", opts.endpoint, "--quiet"] + own + opts.args.split()
    if upload:
        tools["s5cmd"] = ["s5cmd", "--endpoint-url", opts.endpoint, "cp", upload + "/*", source + "RUN/"]
    else:
        tools["s5cmd"] = ["s5cmd", "--endpoint-url", opts.endpoint, "cp", source + "*", opts.dest + "/"]
    names = list(tools)
    rows = []
    what = f"put {upload}/ under {source}" if upload else f"get {source} into {opts.dest}"
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores; {what}"
          + (", back to back (no sync between runs)" if opts.back_to_back else ""))
    for name in names:
        print(f"# {name}: {' '.join(tools[name])}")
    print("# round tool wall-s user-s sys-s rss-MiB store-cpu-s")
    for r in range(opts.rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            argv = list(tools[name])
            if upload:
                # The destination, and only it, gets a prefix of the run's own.
                at = argv.index(source + "RUN/")
                argv[at] = f"{source}run-{int(time.time() * 1000)}-{name}/"
            row = run(argv, None if upload else opts.dest, opts.server_pid, settle=not opts.back_to_back)
            if upload:
                # Not timed: the run's objects go, so that nothing piles up under
                # the prefix (a later download A/B of it would fetch them).
                subprocess.run(["s5cmd", "--endpoint-url", opts.endpoint, "rm", argv[at] + "*"],
                               stdout=subprocess.DEVNULL, check=True)
            row.update(round=r + 1, tool=name)
            rows.append(row)
            print(f"{r + 1} {name} {row['wall']:.2f} {row['user']:.2f} {row['sys']:.2f} {row['rss_mib']:.1f} {row['server']:.2f}", flush=True)
    # The files of one run, for the rate beside warp's.
    files = sum(len(f) for _, _, f in os.walk(upload or opts.dest))
    if not upload:
        shutil.rmtree(opts.dest, ignore_errors=True)
    print(f"# medians of {opts.rounds} rounds; ratios to s5cmd (rate = its wall / ours; CPU = ours / its)")
    base = [r for r in rows if r["tool"] == "s5cmd"]
    base_wall = statistics.median(r["wall"] for r in base)
    base_cpu = statistics.median(r["user"] + r["sys"] for r in base)
    for name in names:
        mine = [r for r in rows if r["tool"] == name]
        wall = statistics.median(r["wall"] for r in mine)
        cpu = statistics.median(r["user"] + r["sys"] for r in mine)
        print(f"# {name:>8}: wall {wall:6.2f} s  CPU {cpu:6.2f} s (user {statistics.median(r['user'] for r in mine):.2f}, "
              f"sys {statistics.median(r['sys'] for r in mine):.2f})  peak RSS {max(r['rss_mib'] for r in mine):6.1f} MiB  "
              f"rate {base_wall / wall:.2f}x  CPU {cpu / base_cpu:.2f}x  store CPU {statistics.median(r['server'] for r in mine):.2f} s")
    if opts.warp:
        op = "put" if upload else "get"
        rate = warp_rate(opts.endpoint, op, opts.warp)
        ours = statistics.median(r["wall"] for r in rows if r["tool"] == names[0])
        s5cmd = statistics.median(r["wall"] for r in rows if r["tool"] == "s5cmd")
        print(f"# warp {op} {opts.warp}, 64 at once, 10 s: {rate:.0f} objects/s; {names[0]} {files / ours:.0f} files/s "
              f"({files / ours / rate:.2f}x warp), s5cmd {files / s5cmd:.0f} files/s ({files / s5cmd / rate:.2f}x warp)")


def warp_rate(endpoint, op, size):
    """warp's average rate (objects/s) for `op` of objects of `size`, 64 at once for 10 s."""
    key, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    argv = ["warp", op, "--host", endpoint.removeprefix("http://"), "--access-key", key, "--secret-key", secret,
            "--obj.size", size, "--concurrent", "64", "--duration", "10s", "--bucket", "warp-ab", "--noclear"]
    # warp writes its raw data file into the working directory.
    with tempfile.TemporaryDirectory() as work:
        out = subprocess.run(argv, capture_output=True, text=True, cwd=work)
    text = out.stdout + out.stderr
    rates = re.findall(r"([\d.]+) obj/s", text[text.find(f"Operation: {op.upper()}"):])
    if not rates:
        sys.exit(f"warp gave no rate:\n{text[-2000:]}")
    return float(rates[0])


if __name__ == "__main__":
    main()
