#!/usr/bin/env python3
"""Direct-to-bucket benchmark: 1 GiB uploaded through `sluice serve` (relayed: one
PUT /v1/objects/KEY by curl) and straight to the bucket with the gateway only
signing (direct: the @uppy/aws-s3 flow of /s3/multipart, 64 MiB parts, 4 in
flight, PUT to MinIO by this script), in front of one MinIO on loopback, in one
run, alternating. The point is the gateway's cost: CPU-seconds per GiB and peak
RSS of the gateway process (a fresh one per upload), next to wall-clock MiB/s."""

import concurrent.futures
import datetime
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

from benchlib import (GIB, MIB, ProcStats, client_env, driver_args, emit_report, free_port, make_file,
                      start_minio, stop, version, wait_for_port, clear_bucket)

PART = 64 * MIB


def start_sluice(sluice, minio_url, env, work):
    port = free_port()
    log = open(os.path.join(work, "sluice.log"), "a")
    proc = subprocess.Popen([sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", "s3://gw-direct",
                             "--endpoint", minio_url, "--direct"], env=env, stdout=log, stderr=log, cwd=work)
    wait_for_port(port)
    return proc, port


def relayed(port, path, key):
    out = subprocess.run(["curl", "-sS", "-f", "-T", path, f"http://127.0.0.1:{port}/v1/objects/{key}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"relayed upload failed: {out.stderr}")


def gateway_json(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)


def put_part(url, path, offset, length):
    parsed = urllib.parse.urlsplit(url)
    with open(path, "rb") as f:
        f.seek(offset)
        body = f.read(length)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
    conn.request("PUT", parsed.path + "?" + parsed.query, body=body)
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        raise SystemExit(f"part PUT answered {answer.status}")
    return answer.getheader("ETag")


def direct(port, path, size):
    created = gateway_json(port, "POST", "/s3/multipart",
                           {"filename": "big.bin", "type": "application/octet-stream", "metadata": {}})
    key, upload = created["key"], created["uploadId"]
    q = urllib.parse.quote
    parts = []

    def one(number):
        signed = gateway_json(port, "GET", f"/s3/multipart/{q(upload, safe='')}/{number}?key={q(key, safe='')}")
        offset = (number - 1) * PART
        etag = put_part(signed["url"], path, offset, min(PART, size - offset))
        return {"ETag": etag, "PartNumber": number}

    count = (size + PART - 1) // PART
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(one, range(1, count + 1)))
    gateway_json(port, "POST", f"/s3/multipart/{q(upload, safe='')}/complete?key={q(key, safe='')}",
                 {"parts": parts})


def main():
    ap = driver_args()
    ap.add_argument("--size", type=int, default=GIB)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sluice = os.path.abspath(args.sluice)
    work = tempfile.mkdtemp(prefix="sluice-direct-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", "s3://gw-direct"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    path = os.path.join(work, "file.bin")
    make_file(path, args.size)
    modes = ["relayed", "direct"]
    rows = []
    try:
        for run in range(args.runs):
            for mode in (modes if run % 2 == 0 else modes[::-1]):
                proc, port = start_sluice(sluice, minio_url, env, work)
                stats = ProcStats(proc.pid)
                cpu0 = stats.cpu()
                started = time.monotonic()
                if mode == "relayed":
                    relayed(port, path, f"relayed-{run}")
                else:
                    direct(port, path, args.size)
                seconds = time.monotonic() - started
                row = dict(tool=mode, run=run, seconds=seconds, mib_s=args.size / MIB / seconds,
                           cpu_s_per_gib=(stats.cpu() - cpu0) / (args.size / GIB), rss=stats.peak_rss())
                stop(proc)
                rows.append(row)
                print(f"  run {run + 1} {mode:8} {row['mib_s']:7.1f} MiB/s {row['cpu_s_per_gib']:6.3f} gateway "
                      f"CPU-s/GiB {row['rss'] / MIB:7.1f} MiB gateway RSS", flush=True)
                clear_bucket("gw-direct", minio_url, env, work)
    finally:
        minio.terminate()
        minio.wait()
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# direct-upload benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
             f"sluice: {version([sluice, '--version'])} (commit {commit}), serve --direct, defaults",
             f"server: {version(['minio', '--version'])}, one drive under /tmp, 127.0.0.1",
             f"relayed: curl -T FILE /v1/objects/KEY; direct: /s3/multipart + signed part PUTs "
             f"({PART // MIB} MiB parts, 4 in flight) + complete; {args.size / GIB:g} GiB per upload",
             f"{args.runs} runs, modes alternated, medians; a fresh gateway process per upload", "",
             f"{'mode':8} {'MiB/s':>8} {'gateway CPU-s/GiB':>18} {'gateway peak RSS':>17}", "-" * 56]
    for mode in modes:
        rs = [r for r in rows if r["tool"] == mode]
        lines.append(f"{mode:8} {med(r['mib_s'] for r in rs):8.1f} {med(r['cpu_s_per_gib'] for r in rs):18.3f} "
                     f"{max(r['rss'] for r in rs) / MIB:13.1f} MiB")
    relayed_cpu = med(r["cpu_s_per_gib"] for r in rows if r["tool"] == "relayed")
    direct_cpu = med(r["cpu_s_per_gib"] for r in rows if r["tool"] == "direct")
    lines += ["", f"gateway CPU direct / relayed: {direct_cpu / relayed_cpu:.3f} "
              f"(target: near zero: the bytes bypass the gateway)"]
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
