#!/usr/bin/env python3
"""Abuse benchmark: normal uploads through `sluice serve` (in front of MinIO on
loopback), first alone, then with one attack at a time running beside them, in
one run.

Normal load, by `sluice bench load` (closed model): 1 KiB uploads (16 users) and
64 MiB uploads (2 users), each for --seconds; uploads/s, MiB/s and p99 latency.
Attacks, from a separate process (this script with `attack KIND PORT SECONDS`),
each reconnecting whenever the gateway cuts it off:

- trickle_put: 8 PUTs declaring 2.5 TB (refused at once: 413), then 200 GiB,
  one byte every 5 s; after an answer each waits 1 s before reconnecting
- trickle_patch: 8 tus uploads of 100 GiB, PATCHed one byte every 5 s
- slowloris: 200 connections sending a request head one header every 5 s
- idle: 5,000 connections that send nothing
- form_flood: 4 form POSTs whose part header never ends
- patch_1byte: 8 clients PATCHing 1-byte chunks back to back

The attacker connects from 127.0.0.2 and the normal load from 127.0.0.1, as
separate hosts would (the gateway penalizes an address that keeps sending
malformed requests, so an attacker sharing the load's address would have the
load penalized with it).

A fresh gateway per phase, with its default settings; its RSS and open file
descriptors are sampled every
0.25 s. Targets with an attack on: >= 80% of the clean throughput, p99 <= 2x the
clean p99, RSS <= memory budget (256 MiB) + 64 MiB, descriptors bounded."""

import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import (MIB, clear_bucket, client_env, driver_args, emit_report, free_port, start_minio, stop,
                      version, wait_for_port)

BUDGET = 256 * MIB
ATTACKS = ["trickle_put", "trickle_patch", "slowloris", "idle", "form_flood", "patch_1byte"]
HEAD_END = b"\r\n\r\n"
# Where attacks come from (all of 127.0.0.0/8 is loopback on Linux).
ATTACKER_ADDRESS = "127.0.0.2"


# ---------------------------------------------------------------- attacks

class Tally:
    """How attack attempts ended (answered with a status, closed, ...)."""

    def __init__(self):
        self.counts = {}

    def add(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1


async def connect(port):
    """A connection to the gateway from the attacker's address."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER_ADDRESS, 0))


async def read_head(reader, limit=10):
    """The status code of the answer on `reader`, or None if the connection ended."""
    try:
        head = await asyncio.wait_for(reader.readuntil(HEAD_END), limit)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.LimitOverrunError, ConnectionError):
        return None, {}
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    try:
        return int(lines[0].split()[1]), headers
    except (IndexError, ValueError):
        return None, headers


async def request(port, method, path, headers, body=b""):
    """One request on a new connection; returns (status, headers)."""
    reader, writer = await connect(port)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode() + b"\r\n" + body)
        await writer.drain()
        return await read_head(reader)
    finally:
        writer.close()


async def trickle(port, tally, head, until):
    """Sends `head`, then one byte every 5 s until the gateway answers or closes;
    returns the status it was answered (0: closed; None: still open at the end)."""
    ended = None
    try:
        reader, writer = await connect(port)
    except OSError:
        tally.add("connect_failed")
        await asyncio.sleep(1)
        return
    answer = asyncio.ensure_future(read_head(reader, limit=3600))
    try:
        writer.write(head)
        await writer.drain()
        while time.monotonic() < until and not answer.done():
            await asyncio.wait([answer], timeout=5)
            if answer.done():
                break
            writer.write(b"x")
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        if answer.done():
            status, _ = answer.result()
            tally.add(f"answered_{status}" if status else "closed")
            ended = status or 0
        else:
            answer.cancel()
            tally.add("still_open_at_end")
        writer.close()
    return ended


async def attack_trickle_put(port, until, tally, i):
    # 2.5 TB first, as the attacker did; the gateway refuses that at once
    # (413: its parts could not fit one upload's memory share), so the attacker
    # then declares 200 GiB, which is taken, and trickles that.
    length = 2_500_000_000_000
    while time.monotonic() < until:
        head = (f"PUT /v1/objects/abuse/hog-{i}-{random.random()} HTTP/1.1\r\nHost: x\r\n"
                f"Content-Length: {length}\r\n\r\n").encode()
        ended = await trickle(port, tally, head, until)
        if ended == 413:
            length = 200 * 1024 ** 3
        elif ended is not None:
            await asyncio.sleep(1)  # reconnecting in a tight loop is another attack (a flood)


async def attack_trickle_patch(port, until, tally, i):
    length = 100 * 1024 ** 3
    while time.monotonic() < until:
        status, headers = await request(port, "POST", "/v1/tus/", {
            "Tus-Resumable": "1.0.0", "Upload-Length": str(length), "Content-Length": "0"})
        if status != 201:
            tally.add(f"create_{status}")
            await asyncio.sleep(1)
            continue
        location = headers["location"]
        offset = 0
        while time.monotonic() < until:
            head = (f"PATCH {location} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\n"
                    f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: {offset}\r\n"
                    f"Content-Length: {length - offset}\r\n\r\n").encode()
            await trickle(port, tally, head, until)
            status, headers = await request(port, "HEAD", location, {"Tus-Resumable": "1.0.0"})
            if status != 200:
                break
            offset = int(headers.get("upload-offset", offset))


async def attack_slowloris(port, until, tally, i):
    while time.monotonic() < until:
        try:
            reader, writer = await connect(port)
        except OSError:
            tally.add("connect_failed")
            await asyncio.sleep(1)
            continue
        try:
            writer.write(b"PUT /v1/objects/abuse/loris HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
            n = 0
            while time.monotonic() < until:
                if reader.at_eof():
                    break
                try:
                    data = await asyncio.wait_for(reader.read(4096), 5)
                    if not data:
                        break
                except asyncio.TimeoutError:
                    pass
                writer.write(f"X-Slow-{n}: {n}\r\n".encode())
                await writer.drain()
                n += 1
            tally.add("closed" if time.monotonic() < until else "still_open_at_end")
        except (ConnectionError, OSError):
            tally.add("closed")
        finally:
            writer.close()


async def attack_idle(port, until, tally, i):
    while time.monotonic() < until:
        try:
            reader, writer = await connect(port)
        except OSError:
            tally.add("connect_failed")
            await asyncio.sleep(1)
            continue
        try:
            data = await asyncio.wait_for(reader.read(4096), max(0.1, until - time.monotonic()))
            tally.add("answered_503" if data.startswith(b"HTTP/1.1 503") else "closed")
        except asyncio.TimeoutError:
            tally.add("still_open_at_end")
        except (ConnectionError, OSError):
            tally.add("closed")
        finally:
            writer.close()


async def attack_form_flood(port, until, tally, i):
    chunk = b"A" * 65536
    while time.monotonic() < until:
        try:
            reader, writer = await connect(port)
        except OSError:
            tally.add("connect_failed")
            await asyncio.sleep(1)
            continue
        answer = asyncio.ensure_future(read_head(reader, limit=60))
        try:
            writer.write(b"POST /v1/objects HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Type: multipart/form-data; boundary=B\r\n\r\n")
            first = b"--B\r\nX-Flood: "
            writer.write(f"{len(first):x}\r\n".encode() + first + b"\r\n")
            while not answer.done() and time.monotonic() < until:
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not answer.done():
                try:
                    await asyncio.wait_for(asyncio.shield(answer), 5)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                    pass
            status = answer.result()[0] if answer.done() and not answer.cancelled() else None
            tally.add(f"answered_{status}" if status else "closed")
            writer.close()


async def attack_patch_1byte(port, until, tally, i):
    while time.monotonic() < until:
        status, headers = await request(port, "POST", "/v1/tus/", {
            "Tus-Resumable": "1.0.0", "Upload-Length": str(1 << 20), "Content-Length": "0"})
        if status != 201:
            tally.add(f"create_{status}")
            await asyncio.sleep(1)
            continue
        location = headers["location"]
        reader, writer = await connect(port)
        try:
            offset = 0
            while time.monotonic() < until and offset < (1 << 20):
                writer.write((f"PATCH {location} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\n"
                              f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: {offset}\r\n"
                              f"Content-Length: 1\r\n\r\nx").encode())
                await writer.drain()
                status, _ = await read_head(reader)
                tally.add(f"answered_{status}" if status else "closed")
                if status != 204:
                    break
                offset += 1
        except (ConnectionError, OSError):
            tally.add("closed")
        finally:
            writer.close()


WORKERS = {"trickle_put": 8, "trickle_patch": 8, "slowloris": 200, "idle": 5000, "form_flood": 4,
           "patch_1byte": 8}


TALLY = Tally()


async def run_attack(kind, port, seconds):
    tally = TALLY
    until = time.monotonic() + seconds
    worker = globals()[f"attack_{kind}"]
    tasks = []
    for i in range(WORKERS[kind]):
        tasks.append(asyncio.ensure_future(worker(port, until, tally, i)))
        if kind == "idle" and i % 500 == 499:
            await asyncio.sleep(0.05)  # do not overflow the accept backlog at once
    await asyncio.wait(tasks, timeout=seconds + 15)
    for t in tasks:
        t.cancel()
    return tally.counts


# ---------------------------------------------------------------- measurement

class Sampler(threading.Thread):
    """Samples a process's RSS and open descriptors every 0.25 s."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.rss, self.fds, self.running = pid, 0, 0, True

    def run(self):
        while self.running:
            try:
                for line in open(f"/proc/{self.pid}/status"):
                    if line.startswith("VmRSS:"):
                        self.rss = max(self.rss, int(line.split()[1]) * 1024)
                self.fds = max(self.fds, len(os.listdir(f"/proc/{self.pid}/fd")))
            except OSError:
                return
            time.sleep(0.25)


def start_sluice(sluice, minio_url, env, work):
    port = free_port()
    log = open(os.path.join(work, "sluice.log"), "a")
    proc = subprocess.Popen([sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", "s3://abuse",
                             "--endpoint", minio_url, "--memory-limit", "256MiB"],
                            env=env, stdout=log, stderr=log, cwd=work)
    wait_for_port(port)
    return proc, port


def load(sluice, port, users, size, seconds, work):
    out_json = os.path.join(work, "load.json")
    out = subprocess.run([sluice, "bench", "load", f"http://127.0.0.1:{port}/v1/objects", "--users", str(users),
                          "--size", size, "--duration", f"{seconds}s", "--retries", "20", "--timeout", "120s",
                          "--key-prefix", "normal", "--quiet", "--json", out_json], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice bench load failed: {out.stderr[-2000:]}")
    with open(out_json) as f:
        row = json.load(f)
    return dict(uploads_per_s=row["uploads_per_s"], mib_s=row["mib_per_s"],
                p99_s=row["latency_s"]["p99"], succeeded=row["succeeded"], failed=row.get("failed", 0))


def cpu_seconds(pid):
    """User + system CPU seconds a live process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(sluice, minio_url, env, work, attack, seconds):
    proc, port = start_sluice(sluice, minio_url, env, work)
    sampler = Sampler(proc.pid)
    sampler.start()
    attacker = None
    try:
        if attack != "clean":
            attacker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "attack", attack, str(port),
                                         str(2 * seconds + 10)], stdout=subprocess.PIPE, text=True)
            time.sleep(5)  # let the attack build up
        small = load(sluice, port, 16, "1KiB", seconds, work)
        big = load(sluice, port, 2, "64MiB", seconds, work)
    finally:
        counts = {}
        if attacker:
            attacker.terminate()
            try:
                out, _ = attacker.communicate(timeout=30)
                counts = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
            except (subprocess.TimeoutExpired, ValueError):
                attacker.kill()
        sampler.running = False
        sampler.join()
        gateway_cpu_s = cpu_seconds(proc.pid)
        stop(proc)
        clear_bucket("abuse", minio_url, env, work)
    attacker_cpu_s = counts.pop("cpu_s", 0.0)
    return dict(attack=attack, small=small, big=big, rss=sampler.rss, fds=sampler.fds, attack_outcomes=counts,
                gateway_cpu_s=gateway_cpu_s, attacker_cpu_s=attacker_cpu_s)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "attack":
        kind, port, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        import signal

        def report(*_):
            import resource
            usage = resource.getrusage(resource.RUSAGE_SELF)
            print(json.dumps(dict(TALLY.counts, cpu_s=round(usage.ru_utime + usage.ru_stime, 1))), flush=True)
            os._exit(0)
        signal.signal(signal.SIGTERM, report)
        asyncio.run(run_attack(kind, port, seconds))
        report()
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    ap = driver_args()
    ap.add_argument("--seconds", type=int, default=15, help="normal load per size and phase")
    ap.add_argument("--attacks", default=",".join(ATTACKS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sluice = os.path.abspath(args.sluice)
    attacks = [a for a in args.attacks.split(",") if a]
    work = tempfile.mkdtemp(prefix="sluice-abuse-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", "s3://abuse"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    rows = []
    try:
        for run in range(args.runs):
            # Clean at both ends of the run (the baseline is their mean, so a
            # machine that drifts over minutes biases no attack), attacks rotated.
            rotated = attacks[run % len(attacks):] + attacks[:run % len(attacks)] if attacks else []
            for attack in ["clean"] + rotated + ["clean_end"]:
                row = phase(sluice, minio_url, env, work, "clean" if attack == "clean_end" else attack,
                            args.seconds)
                row["attack"] = attack
                row["run"] = run
                rows.append(row)
                print(f"  run {run + 1} {attack:14} 1KiB {row['small']['uploads_per_s']:7.1f}/s "
                      f"p99 {row['small']['p99_s'] * 1000:6.1f} ms | 64MiB {row['big']['mib_s']:6.1f} MiB/s "
                      f"p99 {row['big']['p99_s']:5.2f} s | RSS {row['rss'] / MIB:6.1f} MiB fds {row['fds']:5} "
                      f"| CPU s gateway {row['gateway_cpu_s']:5.1f} attacker {row['attacker_cpu_s']:5.1f} "
                      f"| {row['attack_outcomes']}", flush=True)
    finally:
        stop(minio)
        subprocess.run(["rm", "-rf", work])

    def ratio(attack, size, key):
        values = []
        for run in range(args.runs):
            cleans = [r[size][key] for r in rows if r["run"] == run and r["attack"] in ("clean", "clean_end")]
            this = [r for r in rows if r["run"] == run and r["attack"] == attack][0]
            baseline = statistics.mean(cleans)
            if baseline and this[size][key] is not None:
                values.append(this[size][key] / baseline)
        return statistics.median(values) if values else None

    lines = [f"sluice abuse benchmark, {time.strftime('%Y-%m-%d')}, {args.runs} run(s), "
             f"{args.seconds} s of load per size and phase",
             f"machine: {platform.node()} {os.cpu_count()} cores, {platform.platform()}",
             f"sluice: {version([sluice, '--version'])}; minio: {version(['minio', '--version'])}",
             f"gateway: sluice serve --memory-limit 256MiB, defaults otherwise (min body rate 1 KiB/s after 10 s, "
             f"header timeout 10 s, 20,000 connections); normal load: sluice bench load, 16 users x 1 KiB and "
             f"2 users x 64 MiB",
             "",
             "ratios are medians over runs of (with the attack) / (mean of the clean phases at the start and the "
             "end of the same run); targets: throughput >= 0.80, p99 <= 2.00, RSS <= 320 MiB",
             "the attacker (Python asyncio) runs on the same two cores as the gateway, MinIO and the load client; "
             "CPU s: seconds the gateway and the attacker used in the phase (medians)",
             "",
             f"{'phase':14} {'1KiB/s':>8} {'ratio':>6} {'p99 ms':>7} {'ratio':>6} {'64MiB MiB/s':>11} {'ratio':>6} "
             f"{'p99 s':>6} {'ratio':>6} {'RSS MiB':>8} {'fds':>6} {'gw CPU s':>8} {'atk CPU s':>9}  verdict"]
    for attack in ["clean", "clean_end"] + attacks:
        mine = [r for r in rows if r["attack"] == attack]
        med = lambda size, key: statistics.median(r[size][key] for r in mine)  # noqa: E731
        rss = max(r["rss"] for r in mine) / MIB
        fds = max(r["fds"] for r in mine)
        if attack in ("clean", "clean_end"):
            rs = ["", "", "", ""]
            verdict = ""
        else:
            vals = [ratio(attack, "small", "uploads_per_s"), ratio(attack, "small", "p99_s"),
                    ratio(attack, "big", "mib_s"), ratio(attack, "big", "p99_s")]
            rs = [f"{v:.2f}" if v is not None else "-" for v in vals]
            ok = (vals[0] or 0) >= 0.8 and (vals[2] or 0) >= 0.8 and (vals[1] or 9) <= 2 and (vals[3] or 9) <= 2 \
                and rss <= (BUDGET + 64 * MIB) / MIB
            verdict = "meets targets" if ok else "MISSES a target"
        lines.append(f"{attack:14} {med('small', 'uploads_per_s'):8.1f} {rs[0]:>6} "
                     f"{med('small', 'p99_s') * 1000:7.1f} {rs[1]:>6} {med('big', 'mib_s'):11.1f} {rs[2]:>6} "
                     f"{med('big', 'p99_s'):6.2f} {rs[3]:>6} {rss:8.1f} {fds:6} "
                     f"{statistics.median(r['gateway_cpu_s'] for r in mine):8.1f} "
                     f"{statistics.median(r['attacker_cpu_s'] for r in mine):9.1f}  {verdict}")
    lines.append("")
    lines.append("attack outcomes (per phase, last run): " + json.dumps(
        {r["attack"]: r["attack_outcomes"] for r in rows
         if r["run"] == args.runs - 1 and r["attack"] not in ("clean", "clean_end")}))
    emit_report(lines, rows, args.out)


if __name__ == "__main__":
    main()
