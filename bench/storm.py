#!/usr/bin/env python3
"""A closed-model upload storm: N uploads of SIZE bytes, all started at once, each
on its own connection, against sluice (`PUT /v1/objects/...`) or tusd (tus
creation-with-upload `POST /files/`). A 503 with Retry-After is retried after the
time it names (at most --max-retries times); the upload counts as a success only
if it ends in 2xx. Prints one JSON line: count, successes, retried, uploads/s,
p50/p99/max latency (from first attempt to final answer)."""

import argparse
import asyncio
import json
import os
import statistics
import time


async def one_request(host, port, request_head, body, timeout):
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(request_head + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if length:
            await asyncio.wait_for(reader.readexactly(length), timeout)
        return status, headers
    finally:
        writer.close()


async def upload(i, args, body, stats):
    if args.target == "sluice":
        head = (f"PUT /v1/objects/storm/{args.run_id}/{i} HTTP/1.1\r\nHost: {args.host}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    else:
        head = (f"POST /files/ HTTP/1.1\r\nHost: {args.host}\r\nTus-Resumable: 1.0.0\r\n"
                f"Upload-Length: {len(body)}\r\nContent-Type: application/offset+octet-stream\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    start = time.monotonic()
    for attempt in range(args.max_retries + 1):
        try:
            status, headers = await one_request(args.host, args.port, head, body, args.timeout)
        except (OSError, asyncio.TimeoutError, ValueError, IndexError, asyncio.IncompleteReadError) as e:
            stats["errors"][type(e).__name__] = stats["errors"].get(type(e).__name__, 0) + 1
            return
        if 200 <= status < 300:
            stats["latencies"].append(time.monotonic() - start)
            if attempt:
                stats["retried"] += 1
            return
        if status == 503 and "retry-after" in headers and attempt < args.max_retries:
            stats["503"] += 1
            await asyncio.sleep(float(headers["retry-after"]))
            continue
        stats["errors"][f"HTTP {status}"] = stats["errors"].get(f"HTTP {status}", 0) + 1
        return


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", choices=["sluice", "tusd"], required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--size", type=int, default=10 * 1024)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--max-retries", type=int, default=20)
    ap.add_argument("--run-id", default=str(os.getpid()))
    args = ap.parse_args()
    body = os.urandom(args.size)
    stats = {"latencies": [], "retried": 0, "503": 0, "errors": {}}
    start = time.monotonic()
    await asyncio.gather(*(upload(i, args, body, stats) for i in range(args.count)))
    wall = time.monotonic() - start
    lat = sorted(stats["latencies"])
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")
    print(json.dumps({
        "target": args.target, "count": args.count, "size": args.size, "successes": len(lat),
        "success_rate": len(lat) / args.count, "retried_then_ok": stats["retried"], "answers_503": stats["503"],
        "errors": stats["errors"], "wall_s": round(wall, 3), "uploads_per_s": round(len(lat) / wall, 1),
        "p50_s": round(pick(0.50), 3), "p99_s": round(pick(0.99), 3), "max_s": round(lat[-1], 3) if lat else None,
        "mean_s": round(statistics.mean(lat), 3) if lat else None,
    }))


if __name__ == "__main__":
    asyncio.run(main())
