#!/usr/bin/env python3
"""Import benchmark: 1 GiB fetched from a local origin into MinIO by the
gateway (POST /v1/imports, polled until completed) against `curl -s URL |
sluice put - s3://bucket/key` (the pipe a user would write), in one run,
alternating. The origin is a `sluice serve` on a directory at 127.0.0.2 (the
gateway's --import-allow), the same for both. Reported: wall-clock MiB/s,
CPU-seconds per GiB (the gateway process for the import; curl and sluice put
together for the pipe) and peak RSS."""

import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request

from benchlib import (drive_under, GIB, MIB, ProcStats, client_env, driver_args, emit_report, free_port, make_file,
                      start_minio, stop, version, wait_for_port, clear_bucket)


def start(argv, env, work, name, port, host="127.0.0.1"):
    log = open(os.path.join(work, f"{name}.log"), "a")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=work)
    wait_for_port(port) if host == "127.0.0.1" else time.sleep(1.5)
    return proc


def call(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)


def imported(port, url):
    record = call(port, "POST", "/v1/imports", {"url": url})
    while record["state"] == "running":
        time.sleep(0.05)
        record = call(port, "GET", f"/v1/imports/{record['id']}")
    if record["state"] != "completed":
        raise SystemExit(f"import failed: {record}")
    return record


def piped(sluice, url, minio_url, env, key):
    """curl | sluice put -; CPU and peak RSS of each from its own rusage
    (os.wait4): RUSAGE_CHILDREN's peak is the largest of every child waited
    for so far, not of these two."""
    curl = subprocess.Popen(["curl", "-sS", "-f", url], stdout=subprocess.PIPE)
    put = subprocess.Popen([sluice, "put", "-", f"s3://gw-import/{key}", "--endpoint", minio_url, "--quiet"],
                           stdin=curl.stdout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    curl.stdout.close()
    errors = put.stderr.read().decode(errors="replace")
    cpu, rss = 0.0, 0
    for proc in (put, curl):
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        rss = max(rss, usage.ru_maxrss * 1024)
    if put.returncode != 0 or curl.returncode != 0:
        raise SystemExit(f"pipe failed: {errors}")
    return cpu, rss


def main():
    ap = driver_args()
    ap.add_argument("--size", type=int, default=GIB)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sluice = os.path.abspath(args.sluice)
    work = tempfile.mkdtemp(prefix="sluice-import-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", "s3://gw-import"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    origin_dir = os.path.join(work, "origin")
    os.makedirs(origin_dir)
    make_file(os.path.join(origin_dir, "big.bin"), args.size)
    origin_port = free_port()
    origin = subprocess.Popen([sluice, "serve", "--listen", f"127.0.0.2:{origin_port}", "--store", origin_dir,
                               "--upload-page=false"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=work)
    time.sleep(1.5)
    url = f"http://127.0.0.2:{origin_port}/v1/objects/big.bin"
    modes = ["import", "curl|put"]
    rows = []
    try:
        for run in range(args.runs):
            for mode in (modes if run % 2 == 0 else modes[::-1]):
                if mode == "import":
                    port = free_port()
                    proc = start([sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", "s3://gw-import",
                                  "--endpoint", minio_url, "--imports", "--import-allow", "127.0.0.2"],
                                 env, work, "gateway", port)
                    stats = ProcStats(proc.pid)
                    cpu0 = stats.cpu()
                    started = time.monotonic()
                    record = imported(port, url)
                    seconds = time.monotonic() - started
                    cpu, rss = stats.cpu() - cpu0, stats.peak_rss()
                    fetched = record["bytes_fetched"]
                    stop(proc)
                else:
                    started = time.monotonic()
                    cpu, rss = piped(sluice, url, minio_url, env, f"piped-{run}")
                    seconds = time.monotonic() - started
                    fetched = args.size
                row = dict(tool=mode, run=run, seconds=seconds, mib_s=args.size / MIB / seconds,
                           cpu_s_per_gib=cpu / (args.size / GIB), rss=rss, fetched=fetched)
                rows.append(row)
                print(f"  run {run + 1} {mode:8} {row['mib_s']:7.1f} MiB/s {row['cpu_s_per_gib']:6.3f} CPU-s/GiB "
                      f"{rss / MIB:7.1f} MiB RSS", flush=True)
                clear_bucket("gw-import", minio_url, env, work)
    finally:
        stop(origin)
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# import benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
             f"sluice: {version([sluice, '--version'])} (commit {commit}), defaults",
             f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1",
             f"origin: sluice serve on a directory at 127.0.0.2 (ranges); {args.size / GIB:g} GiB per transfer",
             "import: POST /v1/imports, polled (50 ms) until completed; CPU and RSS of the gateway",
             "curl|put: curl -s URL | sluice put - s3://…; CPU of curl and sluice put together, RSS the larger",
             f"{args.runs} runs, modes alternated, medians", "",
             f"{'mode':9} {'MiB/s':>8} {'CPU-s/GiB':>10} {'peak RSS':>10} {'fetched/size':>13}", "-" * 56]
    for mode in modes:
        rs = [r for r in rows if r["tool"] == mode]
        lines.append(f"{mode:9} {med(r['mib_s'] for r in rs):8.1f} {med(r['cpu_s_per_gib'] for r in rs):10.3f} "
                     f"{max(r['rss'] for r in rs) / MIB:6.1f} MiB {max(r['fetched'] for r in rs) / args.size:13.3f}")
    ratio = lambda key: (med(r[key] for r in rows if r["tool"] == "import")
                         / med(r[key] for r in rows if r["tool"] == "curl|put"))
    lines += ["", f"import / curl|put: rate {ratio('mib_s'):.2f}x, CPU per GiB {ratio('cpu_s_per_gib'):.2f}x"]
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
