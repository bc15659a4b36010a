#!/usr/bin/env python3
"""Direct-to-bucket benchmark: 1 GiB uploaded through `sluice serve` (relayed: one
PUT /v1/objects/KEY by curl) and straight to the bucket with the gateway only
signing, in each of @uppy/aws-s3's ways (64 MiB parts, 4 in flight, sent to MinIO
by this script): `companion` (Uppy 5 and 6's Companion routes, /s3/multipart),
`session` (the same under a /s3/session/SESSION path, Uppy 6's
companionEndpoint), `sign` (POST /s3/sign per request, Uppy 6's signRequest;
the bucket completes the upload and the gateway finds it) and `sts` (GET /s3/sts,
then s5cmd with the temporary credentials, Uppy 6's getCredentials), in front of
one MinIO on loopback, in one run, alternating. The point is the gateway's cost:
CPU-seconds per GiB and peak RSS of the gateway process (a fresh one per upload,
measured until it announced the object), next to wall-clock MiB/s."""

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

from benchlib import (drive_under, GIB, MIB, ProcStats, client_env, driver_args, emit_report, free_port, make_file,
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


def companion(port, path, size, base=""):
    created = gateway_json(port, "POST", f"{base}/s3/multipart",
                           {"filename": "big.bin", "type": "application/octet-stream", "metadata": {}})
    key, upload = created["key"], created["uploadId"]
    q = urllib.parse.quote
    parts = []

    def one(number):
        signed = gateway_json(port, "GET",
                              f"{base}/s3/multipart/{q(upload, safe='')}/{number}?key={q(key, safe='')}")
        offset = (number - 1) * PART
        etag = put_part(signed["url"], path, offset, min(PART, size - offset))
        return {"ETag": etag, "PartNumber": number}

    count = (size + PART - 1) // PART
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(one, range(1, count + 1)))
    gateway_json(port, "POST", f"{base}/s3/multipart/{q(upload, safe='')}/complete?key={q(key, safe='')}",
                 {"parts": parts})


def session(port, path, size):
    companion(port, path, size, gateway_json(port, "POST", "/s3/session")["path"])


def bucket_request(method, url, body=b""):
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
    conn.request(method, parsed.path + "?" + parsed.query, body=body)
    answer = conn.getresponse()
    text = answer.read().decode()
    if answer.status != 200:
        raise SystemExit(f"{method} {parsed.path} answered {answer.status}: {text}")
    return text


def sign(port, path, size):
    created = gateway_json(port, "POST", "/s3/sign", {"method": "POST", "key": "big.bin"})
    key = created["key"]
    answer = bucket_request("POST", created["url"])
    upload = answer.split("<UploadId>")[1].split("</UploadId>")[0]

    def one(number):
        signed = gateway_json(port, "POST", "/s3/sign",
                              {"method": "PUT", "key": key, "uploadId": upload, "partNumber": number})
        offset = (number - 1) * PART
        return number, put_part(signed["url"], path, offset, min(PART, size - offset))

    count = (size + PART - 1) // PART
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(one, range(1, count + 1)))
    body = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>" for n, etag in parts
    ) + "</CompleteMultipartUpload>"
    signed = gateway_json(port, "POST", "/s3/sign", {"method": "POST", "key": key, "uploadId": upload})
    bucket_request("POST", signed["url"], body.encode())


def sts(port, path, size, minio_url, env):
    answer = gateway_json(port, "GET", "/s3/sts")
    credentials = answer["credentials"]
    temporary = dict(env, AWS_ACCESS_KEY_ID=credentials["AccessKeyId"],
                     AWS_SECRET_ACCESS_KEY=credentials["SecretAccessKey"],
                     AWS_SESSION_TOKEN=credentials["SessionToken"])
    subprocess.run(["s5cmd", "--endpoint-url", minio_url, "cp", "--part-size", str(PART // MIB),
                    "--concurrency", "4", path, f"s3://{answer['bucket']}/{answer['prefix']}big.bin"],
                   env=temporary, check=True, stdout=subprocess.DEVNULL)


def announced(port, kind, timeout=30):
    """Waits until the gateway counted an upload of `kind` (the completion point)."""
    deadline = time.monotonic() + timeout
    line = f'sluice_uploads_completed_total{{kind="{kind}"}} '
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
            for text in answer.read().decode().splitlines():
                if text.startswith(line) and float(text[len(line):]) >= 1:
                    return
        time.sleep(0.2)
    raise SystemExit(f"no {kind} upload was announced")


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
    modes = ["relayed", "companion", "session", "sign", "sts"]
    kinds = {"relayed": "put", "companion": "direct_multipart", "session": "direct_multipart",
             "sign": "direct_multipart", "sts": "direct_credentials"}
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
                elif mode == "sts":
                    sts(port, path, args.size, minio_url, env)
                else:
                    {"companion": companion, "session": session, "sign": sign}[mode](port, path, args.size)
                seconds = time.monotonic() - started
                announced(port, kinds[mode])
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
             f"server: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1",
             f"relayed: curl -T FILE /v1/objects/KEY; companion: /s3/multipart + signed part PUTs + complete; "
             f"session: the same under POST /s3/session's path; sign: POST /s3/sign for create, parts and "
             f"complete (sent to the bucket); sts: GET /s3/sts, s5cmd cp with its credentials; "
             f"{PART // MIB} MiB parts, 4 in flight; {args.size / GIB:g} GiB per upload",
             "wall time: until the upload ended; gateway CPU and RSS: until it announced the object",
             f"{args.runs} runs, modes alternated, medians; a fresh gateway process per upload", "",
             f"{'mode':9} {'MiB/s':>8} {'gateway CPU-s/GiB':>18} {'gateway peak RSS':>17}", "-" * 57]
    for mode in modes:
        rs = [r for r in rows if r["tool"] == mode]
        lines.append(f"{mode:9} {med(r['mib_s'] for r in rs):8.1f} {med(r['cpu_s_per_gib'] for r in rs):18.3f} "
                     f"{max(r['rss'] for r in rs) / MIB:13.1f} MiB")
    relayed_cpu = med(r["cpu_s_per_gib"] for r in rows if r["tool"] == "relayed")
    lines.append("")
    for mode in modes[1:]:
        mode_cpu = med(r["cpu_s_per_gib"] for r in rows if r["tool"] == mode)
        lines.append(f"gateway CPU {mode} / relayed: {mode_cpu / relayed_cpu:.3f} "
                     f"(target: near zero: the bytes bypass the gateway)")
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
