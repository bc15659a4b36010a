#!/usr/bin/env python3
"""A/B of sluice builds on one download: `sluice get PREFIX/ DIR` for each build,
and `s5cmd cp 'PREFIX/*' DIR/`, the order rotated each round so that no build
always follows the same one (the disk's writeback of the last run and ext4's
work after the last removal fall on each in turn).

The objects must already be under PREFIX (for example `s5cmd cp 'DIR/*'
s3://bench/big/`), and the store's credentials in the environment. Each run
downloads into a fresh directory (removed, then `sync`, then a pause before the
next; with --back-to-back, neither); GNU time gives wall, user and sys time and peak RSS of the client alone.

    bench/ab-download.py --endpoint http://127.0.0.1:9100 --source s3://bench/big/ \\
        --server-pid "$(pgrep -f "minio server")" --rounds 5 old=/tmp/sluice-old new=target/release/sluice 'c32=target/release/sluice --concurrency 32'
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def server_cpu(pid):
    """CPU seconds the store's process has used (user + system), or 0 without a pid."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(argv, dest, server_pid, settle=True):
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
    parser.add_argument("--args", default="", help="extra arguments for every sluice build")
    parser.add_argument("builds", nargs="+",
                        help="name=path of a sluice binary, with arguments of its own after the path ('c32=target/release/sluice --concurrency 32')")
    opts = parser.parse_args()
    source = opts.source if opts.source.endswith("/") else opts.source + "/"
    tools = {}
    for build in opts.builds:
        name, _, command = build.partition("=")
        path, *own = command.split()
        tools[name] = [path, "get", source, opts.dest, "--endpoint", opts.endpoint, "--quiet"] + own + opts.args.split()
    tools["s5cmd"] = ["s5cmd", "--endpoint-url", opts.endpoint, "cp", source + "*", opts.dest + "/"]
    names = list(tools)
    rows = []
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores; get {source} into {opts.dest}"
          + (", back to back (no sync between runs)" if opts.back_to_back else ""))
    for name in names:
        print(f"# {name}: {' '.join(tools[name])}")
    print("# round tool wall-s user-s sys-s rss-MiB store-cpu-s")
    for r in range(opts.rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            row = run(tools[name], opts.dest, opts.server_pid, settle=not opts.back_to_back)
            row.update(round=r + 1, tool=name)
            rows.append(row)
            print(f"{r + 1} {name} {row['wall']:.2f} {row['user']:.2f} {row['sys']:.2f} {row['rss_mib']:.1f} {row['server']:.2f}", flush=True)
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


if __name__ == "__main__":
    main()
