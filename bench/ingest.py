#!/usr/bin/env python3
"""Record-stream benchmark (bench/ingest.sh): HTTP group commit under 32 closed-loop
clients, `sluice ingest` from standard input against `sluice put` of the same bytes,
and `sluice ingest --from kafka://…` against Kafka's ConsumerPerformance on the same
topic, all into one MinIO on loopback, in one run; medians over --runs."""

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

from benchlib import (MIB, ProcStats, client_env, driver_args, emit_report, free_port, start_minio, stop,
                      version, wait_for_port)

STREAM_CONFIG = """[streams.bench]
flush_age = "50ms"
compression = "zstd"
"""

# Into a table (Delta or Iceberg): Parquet files of 8 MiB of records, or
# what came in a second (a table's readers want fewer, larger files than an
# archive's).
TABLE_STREAM_CONFIG = """[streams.bench]
flush_age = "1s"
flush_bytes = "8MiB"
compression = "zstd"
format = "parquet"
table = "{table}"
"""


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("sluice_stream_") and '{stream="bench"}' in line:
            name, value = line.split('{stream="bench"}')
            values[name] = float(value)
    return values


def http_run(sluice, minio_url, env, work, seconds, run, table=None):
    config = os.path.join(work, "streams.toml")
    with open(config, "w") as f:
        f.write(TABLE_STREAM_CONFIG.format(table=table) if table else STREAM_CONFIG)
    port = free_port()
    log = open(os.path.join(work, "serve.log"), "a")
    # Each format's table in a bucket of its own (their roots would meet).
    bucket = f"ingest-http-{table or 'none'}"
    gateway = subprocess.Popen([sluice, "serve", "--config", config, "--listen", f"127.0.0.1:{port}",
                                "--store", f"s3://{bucket}", "--endpoint", minio_url],
                               env=env, stdout=log, stderr=log, cwd=work)
    try:
        wait_for_port(port)
        stats = ProcStats(gateway.pid)
        cpu0 = stats.cpu()
        out_json = os.path.join(work, f"load-{run}.json")
        subprocess.run([sluice, "bench", "load", "--api", "records", f"http://127.0.0.1:{port}/v1/streams/bench",
                        "--users", "32", "--size", "500KiB", "--duration", f"{seconds}s", "--quiet",
                        "--json", out_json], env=env, check=True, stdout=subprocess.DEVNULL)
        cpu = stats.cpu() - cpu0
        rss = stats.peak_rss()
        m = metrics(port)
    finally:
        stop(gateway)
    load = json.load(open(out_json))
    wall = load["wall_s"]
    records = m["sluice_stream_records_total"]
    return {
        "case": "http", "table": table or "none", "run": run, "records": records, "records_per_s": records / wall,
        "mib_per_s": m["sluice_stream_record_bytes_total"] / MIB / wall,
        "ack_p50_ms": load["latency_s"]["p50"] * 1000, "ack_p99_ms": load["latency_s"]["p99"] * 1000,
        "failed": load.get("failed", 0), "cpu_s_per_m_records": cpu / (records / 1e6),
        "gateway_peak_rss_mib": rss / MIB, "objects": m["sluice_stream_batches_total"],
        "mean_object_mib": m["sluice_stream_stored_bytes_total"] / max(1, m["sluice_stream_batches_total"]) / MIB,
        "compression_ratio": m["sluice_stream_record_bytes_total"] / max(1, m["sluice_stream_stored_bytes_total"]),
    }


def make_records(path, mib):
    """`mib` MiB of 1 KiB NDJSON records (sluice bench's generator, through Python here)."""
    words = ["click", "view", "scroll", "cart", "checkout", "search", "login", "logout", "error", "retry",
             "timeout", "mobile", "desktop", "tablet", "home", "product"]
    import random
    rnd = random.Random(7)
    with open(path, "w") as f:
        for seq in range(mib * 1024):
            head = f'{{"seq":{seq},"user":"u{rnd.randrange(10**6):06}","event":"{rnd.choice(words)}","text":"'
            body = " ".join(rnd.choice(words) for _ in range(200))
            line = (head + body)[:1021] + '"}'
            f.write(line + "\n")


def timed(argv, env, stdin_path, work):
    """Runs `argv` with `stdin_path` as its input; (wall s, CPU s, peak RSS bytes) of
    that process alone (wait4's own rusage)."""
    err_path = os.path.join(work, "stderr.txt")
    with open(stdin_path, "rb") as stdin, open(err_path, "wb") as err:
        start = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:2]} failed: {open(err_path).read()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def stdin_run(sluice, minio_url, env, work, path, run):
    size = os.path.getsize(path)
    rows = []
    for tool, argv in [
        ("ingest", [sluice, "ingest", "--stream", "bench", "--store", "s3://ingest-stdin", "--endpoint", minio_url,
                    "--quiet"]),
        ("put", [sluice, "put", "-", f"s3://ingest-stdin/put/{run}.ndjson", "--endpoint", minio_url, "--quiet"]),
    ]:
        wall, cpu, rss = timed(argv, env, path, work)
        rows.append({"case": "stdin", "tool": tool, "run": run, "mib_per_s": size / MIB / wall,
                     "cpu_s_per_gib": cpu / (size / 1024 ** 3), "peak_rss_mib": rss / MIB})
    return rows


def kafka_setup(records_path, count, work):
    """Topic `bench` (8 partitions) filled with `count` records drawn from the
    first 10,000 lines of the records file by Kafka's ProducerPerformance."""
    bootstrap, cp = os.environ["KAFKA_BOOTSTRAP"], os.environ["KAFKA_CP"]
    payloads = os.path.join(work, "payloads.ndjson")
    with open(records_path) as src, open(payloads, "w") as dst:
        for _, line in zip(range(10_000), src):
            dst.write(line)
    subprocess.run(["java", "-Xmx512m", "-cp", cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                    bootstrap, "--create", "--topic", "bench", "--partitions", "8"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["java", "-Xmx1g", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", "bench",
                    "--num-records", str(count), "--throughput", "-1", "--payload-file", payloads,
                    "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=20",
                    "batch.size=1048576"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kafka_run(sluice, minio_url, env, work, count, run, idle=3, table=None, tag=""):
    bootstrap, cp = os.environ["KAFKA_BOOTSTRAP"], os.environ["KAFKA_CP"]
    rows = []
    start = time.monotonic()
    out = subprocess.run(["java", "-Xmx512m", "-cp", cp, "org.apache.kafka.tools.ConsumerPerformance",
                          "--bootstrap-server", bootstrap, "--topic", "bench", "--messages", str(count),
                          "--group", f"perf-{tag}{run}", "--timeout", "120000"],
                         check=True, capture_output=True, text=True)
    wall = time.monotonic() - start
    line = [l for l in out.stdout.splitlines() if l and l[0].isdigit()][-1].split(",")
    rows.append({"case": "kafka", "tool": "ConsumerPerformance", "run": run,
                 "records": float(line[4]), "records_per_s": float(line[5]), "process_wall_s": wall})
    # A stream of its own per run: the same stream would find the batches of
    # the run before stored and skip every message (exactly-once at work).
    argv = [sluice, "ingest", "--stream", f"kbench{tag}{run}", "--from", f"kafka://{bootstrap}/bench", "--group",
            f"sluice-{tag}{run}", "--store", "s3://ingest-kafka", "--endpoint", minio_url, "--idle-exit", f"{idle}s",
            "--json"] + (["--table", table] if table else [])
    out_path = os.path.join(work, "kafka-ingest.json")
    with open(out_path, "wb") as out_file, open(os.path.join(work, "stderr.txt"), "wb") as err:
        proc = subprocess.Popen(argv, env=env, stdout=out_file, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("sluice ingest from Kafka failed: " + open(os.path.join(work, "stderr.txt")).read())
    summary = json.load(open(out_path))
    busy = summary["seconds"] - idle
    rows.append({"case": "kafka", "tool": "sluice", "run": run, "records": summary["records"],
                 "records_per_s": summary["records"] / busy, "objects": summary["objects"],
                 "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
                 "stored_mib": summary["stored_bytes"] / MIB})
    return rows


def small_files_run(sluice, minio_url, env, work, files):
    """An hour-equivalent of one-second flushes: `files` small Parquet files
    committed to one Delta table, then `sluice tables compact`: files before
    and after, and what compacting took."""
    path = os.path.join(work, "small.ndjson")
    with open(path, "w") as f:
        for n in range(files * 100):
            f.write(f'{{"id":{n},"user":"u{n % 9973:05}","event":"click","value":{n * 0.5}}}\n')
    argv = [sluice, "ingest", "--stream", "small", "--store", "s3://ingest-small", "--endpoint", minio_url,
            "--table", "delta", "--flush-records", "100", "--quiet"]
    wall, cpu, rss = timed(argv, env, path, work)
    data = os.path.join(work, "data", "ingest-small", "small")

    def parquet_files():
        # MinIO keeps each object as a directory named after its key (the
        # log's checkpoints left out).
        return sum(1 for root, dirs, _ in os.walk(data) if "_delta_log" not in root
                   for d in dirs if d.endswith(".parquet") and d != "_delta_log")

    def commits():
        log = os.path.join(data, "_delta_log")
        return sum(1 for d in os.listdir(log) if d.endswith(".json"))

    before, log_before = parquet_files(), commits()
    start = time.monotonic()
    out = subprocess.run([sluice, "tables", "compact", "--store", "s3://ingest-small", "--endpoint", minio_url,
                          "small", "--min-files", "4"], env=env, check=True, capture_output=True, text=True)
    compact_s = time.monotonic() - start
    return {"case": "smallfiles", "files": files, "ingest_s": wall, "ingest_cpu_s": cpu,
            "files_before": before, "commits": log_before, "compact_s": compact_s,
            "compact_said": out.stdout.strip()}


def kafka_lines(rows, count, table=None):
    rows = [r for r in rows if r.get("build") != "before"]
    perf = [r for r in rows if r.get("tool") == "ConsumerPerformance"]
    ours = [r for r in rows if r.get("case") == "kafka" and r.get("tool") == "sluice"]
    if not perf or not ours:
        return ["Kafka: not measured (no broker)."]
    ratios = [o["records_per_s"] / p["records_per_s"] for o, p in zip(ours, perf)]
    med = lambda key, rs: statistics.median(r[key] for r in rs)  # noqa: E731
    return [
        f"Kafka topic of {count:,} records of 1 KiB in 8 partitions (fresh consumer group per run)",
        f"  ConsumerPerformance rec/s {med('records_per_s', perf):>12,.0f}   (reads only)",
        f"  sluice ingest rec/s       {med('records_per_s', ours):>12,.0f}   (reads, checks, compresses, stores,"
        " commits; idle wait excluded)",
        f"  sluice/ConsumerPerf       {statistics.median(ratios):>12.2f}   per run: "
        + ", ".join(f"{r:.2f}" for r in ratios) + ("   (target >= 0.5, into a Delta table)" if table
                                                   else "   (target >= 0.5)"),
        f"  sluice CPU-s, peak RSS    {med('cpu_s', ours):>8.1f} s, {med('peak_rss_mib', ours):.0f} MiB;"
        f" {med('objects', ours):.0f} objects, {med('stored_mib', ours):.0f} MiB stored",
    ]


def before_lines(rows):
    """sluice against --before, case by case: medians and per-run ratios."""
    lines = ["sluice against --before (the same case, alternated within each run)"]
    med = lambda key, rs: statistics.median(r[key] for r in rs)  # noqa: E731
    for case, tool, rate, cpu in [("http", None, "records_per_s", "cpu_s_per_m_records"),
                                  ("kafka", "sluice", "records_per_s", "cpu_s")]:
        pick = lambda build: [r for r in rows if r["case"] == case and r.get("build", "sluice") == build  # noqa: E731
                              and (tool is None or r.get("tool") == tool)]
        after, before = pick("sluice"), pick("before")
        if not after or not before:
            continue
        ratios = [a[rate] / b[rate] for a, b in zip(after, before)]
        cpu_ratios = [a[cpu] / b[cpu] for a, b in zip(after, before)]
        lines += [
            f"  {case:<6} records/s after {med(rate, after):>10,.0f}  before {med(rate, before):>10,.0f}  "
            f"after/before {statistics.median(ratios):.2f} (runs " + ", ".join(f"{r:.2f}" for r in ratios) + ")",
            f"  {case:<6} {cpu:<22} after {med(cpu, after):.2f}  before {med(cpu, before):.2f}  "
            f"after/before {statistics.median(cpu_ratios):.2f}",
        ]
    return lines + [""]


def main():
    ap = driver_args()
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--stdin-mib", type=int, default=1024)
    ap.add_argument("--kafka-records", type=int, default=2_000_000)
    ap.add_argument("--cases", default="http,stdin,kafka",
                    help="which of http, stdin, kafka and smallfiles to run (comma-separated)")
    ap.add_argument("--table", default="",
                    help="HTTP and Kafka into a table: delta, iceberg, or delta,iceberg (HTTP into each, "
                         "alternated within every run, with the Iceberg/Delta ratio; Kafka into the first)")
    ap.add_argument("--small-files", type=int, default=3600,
                    help="smallfiles: files of 100 records committed before compacting")
    ap.add_argument("--before", help="a second sluice binary, run after sluice in every run of http and kafka")
    ap.add_argument("--out")
    args = ap.parse_args()
    before = os.path.abspath(args.before) if args.before else None
    cases = set(args.cases.split(","))
    tables = [t for t in args.table.split(",") if t]
    if not set(tables) <= {"delta", "iceberg"}:
        ap.error("--table takes delta, iceberg or delta,iceberg")
    args.table = tables[0] if tables else None
    if not cases or not cases <= {"http", "stdin", "kafka", "smallfiles"}:
        ap.error("--cases takes http, stdin, kafka and smallfiles")
    args.sluice = os.path.abspath(args.sluice)
    work = tempfile.mkdtemp(prefix="sluice-ingest-bench-")
    minio = None
    try:
        minio, minio_url = start_minio(work)
        env = client_env(work)
        for bucket in ["ingest-http-none", "ingest-http-delta", "ingest-http-iceberg", "ingest-stdin",
                       "ingest-kafka", "ingest-small"]:
            os.makedirs(os.path.join(work, "data", bucket), exist_ok=True)
        records_path = os.path.join(work, "records.ndjson")
        # Kafka alone draws on the first 10,000 records only.
        make_records(records_path, args.stdin_mib if "stdin" in cases else 10)
        kafka = "kafka" in cases and "KAFKA_BOOTSTRAP" in os.environ and args.kafka_records > 0
        if kafka:
            kafka_setup(records_path, args.kafka_records, work)
        rows = []
        for run in range(args.runs):
            if "http" in cases:
                for build, binary in [("sluice", args.sluice)] + ([("before", before)] if before else []):
                    for table in tables or [None]:
                        row = http_run(binary, minio_url, env, work, args.seconds, run, table)
                        row["build"] = build
                        rows.append(row)
                        print(json.dumps(row), flush=True)
            if "stdin" in cases:
                for row in stdin_run(args.sluice, minio_url, env, work, records_path, run):
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            if kafka:
                for build, binary in [("sluice", args.sluice)] + ([("before", before)] if before else []):
                    tag = "" if build == "sluice" else build
                    for row in kafka_run(binary, minio_url, env, work, args.kafka_records, run, table=args.table,
                                         tag=tag):
                        row["build"] = build
                        rows.append(row)
                        print(json.dumps(row), flush=True)
        if "smallfiles" in cases:
            rows.append(small_files_run(args.sluice, minio_url, env, work, args.small_files))
            print(json.dumps(rows[-1]), flush=True)
        http = [r for r in rows if r["case"] == "http" and r.get("build") != "before"
                and r["table"] == (args.table or "none")]
        http_iceberg = [r for r in rows if r["case"] == "http" and r.get("build") != "before"
                        and r["table"] == "iceberg"]
        med = lambda key, rs: statistics.median(r[key] for r in rs)  # noqa: E731
        ingest = [r for r in rows if r.get("tool") == "ingest"]
        put = [r for r in rows if r.get("tool") == "put"]
        ratios = [i["mib_per_s"] / p["mib_per_s"] for i, p in zip(ingest, put)]
        lines = [
            f"# bench/ingest.sh, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            f"# machine: {platform.node()}, {os.cpu_count()} cores; sluice {version([args.sluice, '--version'])}; "
            f"{version(['minio', '--version'])}",
            f"# runs: {args.runs}; medians; cases: {args.cases}; table: {args.table or 'none'}. HTTP: 32 users, "
            f"500 records of 1 KiB per request, {args.seconds} s, "
            + (f"Parquet into a table ({','.join(tables)}), flush_bytes 8MiB, flush_age 1s" if tables
               else "flush_age 50ms")
            + ", zstd level 3; MinIO on the same 2 cores.",
            "",
        ]
        def http_lines(rows, table):
            target = {"delta": "150,000", "iceberg": "0.8x Delta's"}.get(table, "200,000")
            into = {"delta": " into a Delta table", "iceberg": " into an Iceberg table"}.get(table, "")
            return [
                "HTTP POST /v1/streams/bench (group commit)" + into,
                f"  records/s acknowledged   {med('records_per_s', rows):>12,.0f}   (target >= {target})",
                f"  MiB/s of records         {med('mib_per_s', rows):>12.1f}",
                f"  ack p50 / p99 ms         {med('ack_p50_ms', rows):>8.1f} / {med('ack_p99_ms', rows):.1f}",
                f"  CPU-s per M records      {med('cpu_s_per_m_records', rows):>12.2f}   (gateway only)",
                f"  gateway peak RSS MiB     {med('gateway_peak_rss_mib', rows):>12.0f}",
                f"  objects, mean MiB        {med('objects', rows):>8.0f}, {med('mean_object_mib', rows):.2f}"
                f"   (compression {med('compression_ratio', rows):.1f}:1)",
                f"  failed requests          {sum(r['failed'] for r in rows):>12}",
                "",
            ]
        if http:
            lines += http_lines(http, args.table)
        if http_iceberg and args.table != "iceberg":
            lines += http_lines(http_iceberg, "iceberg")
            delta_rows = [r for r in rows if r["case"] == "http" and r.get("build") != "before"
                          and r["table"] == "delta"]
            pairs = list(zip(http_iceberg, delta_rows))
            rate = [i["records_per_s"] / d["records_per_s"] for i, d in pairs]
            cpu = [i["cpu_s_per_m_records"] / d["cpu_s_per_m_records"] for i, d in pairs]
            lines += [
                "Iceberg against Delta (HTTP, alternated within each run)",
                f"  records/s Iceberg/Delta  {statistics.median(rate):>12.2f}   per run: "
                + ", ".join(f"{r:.2f}" for r in rate) + "   (target >= 0.8)",
                f"  CPU-s per M Iceberg/Delta {statistics.median(cpu):>11.2f}",
                "",
            ]
        if ingest:
            lines += [
                f"standard input, {args.stdin_mib} MiB of 1 KiB records",
                f"  sluice ingest MiB/s      {med('mib_per_s', ingest):>12.1f}   "
                f"CPU-s/GiB {med('cpu_s_per_gib', ingest):.2f}   peak RSS {med('peak_rss_mib', ingest):.0f} MiB",
                f"  sluice put MiB/s         {med('mib_per_s', put):>12.1f}   "
                f"CPU-s/GiB {med('cpu_s_per_gib', put):.2f}   peak RSS {med('peak_rss_mib', put):.0f} MiB",
                f"  ingest/put rate          {statistics.median(ratios):>12.2f}   per run: "
                + ", ".join(f"{r:.2f}" for r in ratios),
                "",
            ]
        if "kafka" in cases:
            lines += kafka_lines(rows, args.kafka_records, args.table)
        if before:
            lines += [f"before: {version([before, '--version'])} ({before})"] + before_lines(rows)
        small = [r for r in rows if r["case"] == "smallfiles"]
        if small:
            s = small[-1]
            lines += [
                f"small files: {s['files']} flushes of 100 records into one Delta table (an hour of 1 s flushes)",
                f"  ingest                   {s['ingest_s']:>8.1f} s wall, {s['ingest_cpu_s']:.1f} CPU-s,"
                f" {s['commits']} commits",
                f"  Parquet files before     {s['files_before']:>8}",
                f"  sluice tables compact    {s['compact_s']:>8.1f} s: {s['compact_said']}",
                "",
            ]
        lines.append("")
        emit_report(lines, rows, args.out)
    finally:
        if minio:
            stop(minio)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
