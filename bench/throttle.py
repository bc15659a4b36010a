#!/usr/bin/env python3
"""Throttling benchmark: `sluice serve` behind `sluice chaos-proxy`, which caps
PutObject per key prefix like S3 (answering 503 SlowDown above the rate), in front
of one MinIO on loopback.

An open-model load (`sluice bench load --rate R --duration D`, 10 KiB objects, no
client retries) goes through the gateway:
  (a) every key under one prefix (`bench/RUN/N`): one capped prefix;
  (b) keys spread over hashed shard prefixes (`HHHH/bench/RUN/N`): one cap each.
Both run at the issue's cap (500/s), at a scaled-down cap (40/s) whose 16 shards
(640/s) stay within what the gateway reaches on two cores, and (b) once with no
cap at all: the gateway's own ceiling through the proxy on this machine.

Per second it reports what the proxy saw (store requests answered, throttled) next
to what the client saw (uploads succeeded, refused with 503, other errors), and
checks the issue's targets:
  (a) achieved >= 90% of the cap, and <= 10% of store requests throttled, both
      after the first 5 seconds;
  (b) achieved >= 90% of min(shards x cap, offered rate);
  both: no lost upload: every upload ended 201 or 503 with Retry-After, the bucket
  holds exactly the 201s' objects and no incomplete multipart upload.
A fresh gateway per run, so that the adaptive limits start from scratch."""

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchlib import (driver_args, ProcStats, clear_bucket, client_env, emit_report, free_port, start_gateway, start_minio,
                      stop, version, wait_for_port, warp_rate)

BUCKET = "gw-sluice"  # the bucket benchlib.start_gateway serves
WARMUP_S = 5


def http_json(url, method="GET"):
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = answer.read()
    return json.loads(body) if body else None


def start_proxy(sluice, minio_url, cap, latency, work):
    port = free_port()
    log = open(os.path.join(work, "proxy.log"), "a")
    argv = [sluice, "chaos-proxy", "--listen", f"127.0.0.1:{port}", "--upstream", minio_url,
            "--write-rate", str(cap), "--prefix-depth", "1", "--latency", latency]  # --write-rate 0: no cap
    proc = subprocess.Popen(argv, stdout=log, stderr=log)
    wait_for_port(port)
    return proc, f"http://127.0.0.1:{port}"


def metric_lines(port, names):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return [line for line in text.splitlines() if line.split("{")[0].split(" ")[0] in names]


def stored_objects(minio_url, env):
    out = subprocess.run(["s5cmd", "--endpoint-url", minio_url, "ls", f"s3://{BUCKET}/*"], env=env,
                         capture_output=True, text=True)
    return sum(1 for line in out.stdout.splitlines() if line.strip())


def incomplete_uploads(sluice, minio_url, env):
    """`sluice janitor --dry-run` straight to MinIO: how many multipart uploads exist."""
    out = subprocess.run([sluice, "janitor", "--store", f"s3://{BUCKET}", "--endpoint", minio_url,
                          "--older-than", "0s", "--dry-run"], env=env, capture_output=True, text=True)
    for word in (out.stdout + out.stderr).split("\n"):
        if " listed" in word:
            return int(word.split(" listed")[0].split()[-1])
    sys.exit(f"sluice janitor said: {out.stdout}{out.stderr}")


def one_run(args, case, keys, work, minio_url, proxy_url, env):
    clear_bucket(BUCKET, minio_url, env, work)
    gateway, port = start_gateway("sluice", args.sluice, proxy_url, env, work)
    stats = ProcStats(gateway.pid)
    cpu_before = stats.cpu()
    time.sleep(1)  # the proxy's buckets refill after the previous run
    http_json(proxy_url + "/_chaos/stats/reset", method="POST")
    out_json = os.path.join(work, "load.json")
    load = subprocess.run([args.sluice, "bench", "load", f"http://127.0.0.1:{port}/v1/objects", "--rate",
                           str(args.rate), "--duration", f"{args.duration}s", "--size", "10KiB", "--retries", "0",
                           "--keys", keys, "--timeout", "60s", "--quiet", "--json", out_json],
                          capture_output=True, text=True)
    if load.returncode != 0:
        sys.exit(f"sluice bench load failed: {load.stderr[-2000:]}")
    proxy = http_json(proxy_url + "/_chaos/stats")
    metrics = metric_lines(port, {"sluice_store_concurrency_limit", "sluice_store_retries_total",
                                  "sluice_store_throttled_total", "sluice_retry_budget_exhausted_total",
                                  "sluice_admission_rejections_total", "sluice_uploads_ended_total"})
    cpu, rss = stats.cpu() - cpu_before, stats.peak_rss()
    stop(gateway)
    with open(out_json) as f:
        summary = json.load(f)
    stored = stored_objects(minio_url, env)
    incomplete = incomplete_uploads(args.sluice, minio_url, env)
    return dict(case=case, keys=keys, summary=summary, proxy=proxy, metrics=metrics, gateway_cpu_s=cpu,
                gateway_peak_rss=rss, stored=stored, incomplete=incomplete)


def analyse(run, args, cap, shards):
    """The run's figures over the steady window [WARMUP_S, duration) and its checks."""
    summary, proxy = run["summary"], run["proxy"]
    window = range(WARMUP_S, args.duration)
    client = {s["second"]: s for s in summary["timeline"]}
    store = {s["second"]: s for s in proxy["seconds"]}
    succeeded = [client.get(s, {}).get("succeeded", 0) for s in window]
    requests = sum(store.get(s, {}).get("requests", 0) for s in window)
    throttled = sum(store.get(s, {}).get("rate_limited", 0) + store.get(s, {}).get("slowdown", 0) for s in window)
    capacity = min(shards * cap, args.rate) if cap else args.rate
    endings = summary["endings"]
    lost = {k: v for k, v in endings.items() if k not in ("201", "503")}
    figures = dict(
        achieved=statistics.mean(succeeded),
        achieved_median=statistics.median(succeeded),
        capacity=capacity,
        throttled_share=throttled / requests if requests else 0.0,
        succeeded=summary["succeeded"],
        refused=endings.get("503", 0),
        other=sum(lost.values()),
        lost=lost,
        stored=run["stored"],
        incomplete=run["incomplete"],
        p50=summary["latency_s"]["p50"],
        p99=summary["latency_s"]["p99"],
    )
    checks = {} if not cap else {f"achieved >= 90% of {capacity}/s": figures["achieved"] >= 0.9 * capacity}
    checks |= {
        "every upload 201 or 503 + Retry-After": not lost,
        "stored objects == 201s": run["stored"] == summary["succeeded"],
        "no incomplete multipart upload": run["incomplete"] == 0,
    }
    if cap and shards == 1:
        checks["<= 10% of store requests throttled"] = figures["throttled_share"] <= 0.10
    return figures, checks


def slim(run):
    """A run for the raw JSON: the figures and the client's summary without the
    per-second data the tables above already show."""
    summary = {k: v for k, v in run["summary"].items() if k not in ("timeline", "latency_distribution")}
    return {k: v for k, v in run.items() if k not in ("proxy", "summary")} | {"summary": summary,
                                                                            "proxy_totals": run["proxy"]["totals"]}


def timeline_lines(run, args):
    client = {s["second"]: s for s in run["summary"]["timeline"]}
    store = {s["second"]: s for s in run["proxy"]["seconds"]}
    last = max(list(client) + list(store) + [args.duration - 1])
    lines = [f"  {'s':>3} {'store ok':>9} {'throttled':>9} {'other':>6} | {'started':>7} {'201':>6} {'not 201':>7} "
             f"{'mean lat s':>10}"]
    for s in range(last + 1):
        p, c = store.get(s, {}), client.get(s, {})
        throttled = p.get("rate_limited", 0) + p.get("slowdown", 0)
        other = p.get("requests", 0) - p.get("store_ok", 0) - throttled
        lines.append(f"  {s:>3} {p.get('store_ok', 0):>9} {throttled:>9} {other:>6} | {c.get('started', 0):>7} "
                     f"{c.get('succeeded', 0):>6} {c.get('failed', 0):>7} {c.get('mean_latency_s', 0):>10.3f}")
    return lines


def main():
    ap = driver_args()
    ap.add_argument("--rate", type=int, default=2000, help="offered uploads per second")
    ap.add_argument("--duration", type=int, default=30, help="seconds of offered load")
    ap.add_argument("--cap", type=int, default=500, help="PutObject per second per prefix (the proxy's --write-rate)")
    ap.add_argument("--scaled-cap", type=int, default=40,
                    help="a second, lower cap, so that the shards' capacity is within the gateway's reach (0: skip)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--latency", default="0ms", help="added by the proxy to every store request")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.sluice = os.path.abspath(args.sluice)

    work = tempfile.mkdtemp(prefix="sluice-throttle-bench-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    for bucket in [BUCKET, "warp-bench"]:
        subprocess.run(["s5cmd", "--endpoint-url", minio_url, "mb", f"s3://{bucket}"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    # (cap per prefix, 0 = none): the cap, a scaled-down cap that 16 shards
    # stay under on two cores, and no cap at all (the gateway's own ceiling here).
    caps = [args.cap] + [c for c in (args.scaled_cap,) if c] + [0]
    cases = [(cap, name, keys, shards) for cap in caps
             for name, keys, shards in [("a: one prefix", "common", 1),
                                        (f"b: {args.shards} shards", f"shards:{args.shards}", args.shards)]
             if cap or shards > 1]
    runs, warps = [], []
    try:
        # The store's own ceiling here: warp's direct 10 KiB PUT rate into MinIO.
        for _ in range(args.runs):
            warps.append(warp_rate(minio_url, env, 10, 64, work))
            clear_bucket("warp-bench", minio_url, env, work)
            print(f"==> warp direct: {warps[-1]} obj/s", file=sys.stderr)
        for cap in caps:
            proxy, proxy_url = start_proxy(args.sluice, minio_url, cap, args.latency, work)
            try:
                for i in range(args.runs):
                    for case_cap, name, keys, shards in cases:
                        if case_cap != cap:
                            continue
                        label = f"{name} @ {cap}/s" if cap else f"{name}, no cap"
                        print(f"==> run {i + 1}/{args.runs}: {label}", file=sys.stderr)
                        run = one_run(args, label, keys, work, minio_url, proxy_url, env)
                        run["cap"], run["first"] = cap, i == 0
                        run["figures"], run["checks"] = analyse(run, args, cap, shards)
                        runs.append(run)
                        f = run["figures"]
                        print(f"    achieved {f['achieved']:.0f}/s of {f['capacity']}/s, throttled "
                              f"{100 * f['throttled_share']:.1f}%, 201 {f['succeeded']}, 503 {f['refused']}, "
                              f"other {f['other']}", file=sys.stderr)
            finally:
                stop(proxy)
    finally:
        stop(minio)
        subprocess.run(["rm", "-rf", work])

    labels = list(dict.fromkeys(r["case"] for r in runs))
    lines = [
        f"sluice throttling benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        f"sluice: {version([args.sluice, '--version'])}; MinIO: {version(['minio', '--version'])}",
        f"setup: MinIO <- sluice chaos-proxy (--write-rate CAP per prefix, depth 1, burst 0.1 s, "
        f"--latency {args.latency}) <- sluice serve (defaults, s3://{BUCKET}) <- sluice bench load "
        f"--rate {args.rate} --duration {args.duration}s --size 10KiB --retries 0, all on loopback;",
        f"       keys bench/RUN/N (a) or HHHH/bench/RUN/N (b); a fresh gateway per run; {args.runs} run(s) per "
        f"case, medians; steady window = seconds {WARMUP_S}..{args.duration}; 'no cap' is the gateway's own "
        f"ceiling through the proxy on this machine",
        f"MinIO's own rate here (warp v1.0.0 put, 10 KiB, 64 concurrent, 10 s, straight to MinIO): median "
        f"{statistics.median(w for w in warps if w) if any(warps) else float('nan'):.0f} obj/s "
        f"(runs {', '.join(f'{w:.0f}' if w else 'n/a' for w in warps)})",
        "",
        f"{'case':<24} {'achieved/s':>10} {'target':>7} {'throttled':>9} {'201':>7} {'503':>7} {'other':>6} "
        f"{'stored':>7} {'p50 s':>6} {'p99 s':>6} {'gw CPU s':>8} {'gw RSS MiB':>10}",
    ]
    for label in labels:
        mine = [r for r in runs if r["case"] == label]
        med = lambda key: statistics.median(r["figures"][key] for r in mine)  # noqa: E731
        target = f"{0.9 * mine[0]['figures']['capacity']:.0f}" if mine[0]["cap"] else "-"
        lines.append(
            f"{label:<24} {med('achieved'):>10.0f} {target:>7} {100 * med('throttled_share'):>8.1f}% "
            f"{med('succeeded'):>7.0f} {med('refused'):>7.0f} {med('other'):>6.0f} {med('stored'):>7.0f} "
            f"{med('p50'):>6.2f} {med('p99'):>6.2f} "
            f"{statistics.median(r['gateway_cpu_s'] for r in mine):>8.1f} "
            f"{statistics.median(r['gateway_peak_rss'] for r in mine) / 2**20:>10.0f}")
    lines += ["", "checks (every run):"]
    for label in labels:
        mine = [r for r in runs if r["case"] == label]
        for check in mine[0]["checks"]:
            held = sum(1 for r in mine if r["checks"][check])
            lines.append(f"  {label:<24} {check:<42} {'PASS' if held == len(mine) else 'FAIL'} "
                         f"({held}/{len(mine)})")
    for run in runs:
        if not run["first"]:
            continue
        lines += ["", f"{run['case']}, first run: per second (the proxy's store requests | the client's uploads, "
                      f"by the second they ended)"]
        lines += timeline_lines(run, args)
        lines += ["  gateway metrics at the end:"] + [f"    {m}" for m in run["metrics"]]
    raw = [slim(r) for r in runs] + [{"case": "warp direct", "uploads_per_s": w} for w in warps]
    emit_report(lines, raw, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
