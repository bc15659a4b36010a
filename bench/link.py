#!/usr/bin/env python3
"""`--concurrency auto` against a sweep of fixed `--concurrency` values, on a
link limited by `tbf` (bench/link.sh makes it): a 4 GiB file with `sluice put`
/ `sluice get`, and a tree of 1,000 files of 1 MiB with `sluice put DIR` /
`sluice get PREFIX/ DIR`, against MinIO inside a network namespace.

Each run measures every setting back to back (the order reversed on odd runs);
the report gives each setting's median MiB/s, the best fixed setting, and auto's
rate as a share of it (median of the per-run shares), with the limits auto
moved through (from its debug log) in the raw runs."""

import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import (drive_under, GIB, MIB, client_env, driver_args, emit_report, empty_trash, make_file, start_minio,
                      version)

LIMIT_MOVE = re.compile(r"transfers in flight from=(\d+) to=(\d+)")


def remove(path):
    """A file or a tree, if there."""
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def run_sluice(argv, env):
    """(wall s, CPU s, peak RSS bytes, limits auto moved to) of one sluice run."""
    with tempfile.NamedTemporaryFile("r") as report:
        proc = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%e %U %S %M"] + argv, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stderr = proc.stderr.decode(errors="replace")
        if proc.returncode != 0:
            sys.exit(f"{argv[:4]} failed ({proc.returncode}): {stderr[-2000:]}")
        wall, user, system, rss_kib = report.read().split()[-4:]
    moves = [int(to) for _, to in LIMIT_MOVE.findall(stderr)]
    return float(wall), float(user) + float(system), int(rss_kib) * 1024, moves


def main():
    ap = driver_args()
    ap.add_argument("--netns", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--rate", default="1gbit", help="the link's rate, for the report")
    ap.add_argument("--sweep", default="1,2,4,8,16,32,64", help="fixed --concurrency values")
    ap.add_argument("--big", default="4GiB", help="the single file's size (GiB or MiB)")
    ap.add_argument("--files", type=int, default=1000, help="files of 1 MiB in the tree")
    ap.add_argument("--out", default=None)
    ap.set_defaults(runs=2)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="sluice-link-")
    minio, url = start_minio(work, args.address, args.netns)
    env = client_env(work)
    env.update(NO_COLOR="1", SLUICE_LOG="warn,sluice_upload=debug")
    bucket = "link"
    os.makedirs(os.path.join(work, "data", bucket))
    sluice = os.path.abspath(args.sluice)
    settings = ["auto"] + args.sweep.split(",")

    big_bytes = int(args.big[:-3]) * (GIB if args.big.endswith("GiB") else MIB)
    big = os.path.join(work, "big.bin")
    make_file(big, big_bytes)
    tree = os.path.join(work, "tree")
    chunk = os.urandom(MIB)
    for i in range(args.files):
        d = os.path.join(tree, f"d{i // 100:03}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05}.bin"), "wb") as f:
            f.write(i.to_bytes(8, "little") + chunk[8:])
    cases = [(f"1 x {args.big}", big, big_bytes, False),
             (f"{args.files} x 1MiB", tree, args.files * MIB, True)]

    raw = []
    try:
        for run in range(args.runs):
            order = settings if run % 2 == 0 else list(reversed(settings))
            for label, source, size, many in cases:
                for setting in order:
                    key = f"{setting}-{run}" + ("/" if many else ".bin")
                    dest = os.path.join(work, "down")
                    remove(dest)
                    common = ["--endpoint", url, "--quiet", "--concurrency", setting]
                    for direction in ("upload", "download"):
                        if direction == "upload":
                            argv = [sluice, "put", source, f"s3://{bucket}/{key}"] + common
                        else:
                            argv = [sluice, "get", f"s3://{bucket}/{key}", dest] + common
                        wall, cpu, rss, moves = run_sluice(argv, env)
                        raw.append(dict(case=label, direction=direction, setting=setting, run=run, bytes=size,
                                        wall=wall, cpu=cpu, rss=rss, limits=moves))
                        print(f"  run {run + 1} {label:12} {direction:8} {setting:>4} {size / MIB / wall:8.1f} MiB/s "
                              f"{cpu:6.2f} CPU-s {rss / MIB:6.1f} MiB RSS limits {moves}", flush=True)
                    remove(dest)
                    subprocess.run([sluice, "rm", f"s3://{bucket}/{key}", "--endpoint", url, "--quiet"],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    empty_trash(work)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    lines = [f"# concurrency on a limited link, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"]
    lines.append(f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines.append(f"sluice: {version([sluice, '--version'])} (commit {commit}), defaults but --concurrency")
    lines.append(f"link: veth into a network namespace, tbf {args.rate} each way (burst 256kb, 20 ms queue); "
                 f"server: {version(['minio', '--version'])} in the namespace, {drive_under()}")
    lines.append(f"{args.runs} runs, every setting back to back in each (order reversed on odd runs); "
                 "medians; auto vs best = median over runs of auto's rate / the best fixed setting's rate")
    lines.append("")
    header = f"{'case':14} {'dir':8} " + " ".join(f"{s:>7}" for s in settings) + "   best  auto/best"
    lines.append(header + "   (MiB/s)")
    lines.append("-" * len(header))
    for label, _, size, _ in cases:
        for direction in ("upload", "download"):
            rows = [r for r in raw if (r["case"], r["direction"]) == (label, direction)]
            median = {s: statistics.median(size / MIB / r["wall"] for r in rows if r["setting"] == s)
                      for s in settings}
            best = max(args.sweep.split(","), key=lambda s: median[s])
            shares = []
            for run in range(args.runs):
                by = {r["setting"]: size / MIB / r["wall"] for r in rows if r["run"] == run}
                shares.append(by["auto"] / by[best])
            lines.append(f"{label:14} {direction:8} " + " ".join(f"{median[s]:7.1f}" for s in settings)
                         + f"   {best:>4}  {statistics.median(shares):8.2f}")
    lines.append("")
    lines.append("auto's limits, in the order it moved them (per run):")
    for label, _, _, _ in cases:
        for direction in ("upload", "download"):
            for r in raw:
                if (r["case"], r["direction"], r["setting"]) == (label, direction, "auto"):
                    lines.append(f"  {label:14} {direction:8} run {r['run'] + 1}: 8 -> "
                                 + (" -> ".join(map(str, r["limits"])) or "(unchanged)"))
    emit_report(lines, raw, args.out)


if __name__ == "__main__":
    main()
