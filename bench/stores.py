#!/usr/bin/env python3
"""The same transfers on each store sluice speaks, in one run: S3 on MinIO,
Azure Blob on Azurite (in memory) and Google Cloud Storage on fake-gcs-server
(in memory), all on loopback. Per store:

- the CLI: `sluice put` of 1 GiB and `sluice get` of it back; `sluice put DIR`
  of 10,000 x 10 KiB and `sluice get PREFIX/ DIR` of them back;
- the gateway: a 1 GiB PUT and GET with curl; 10,000 x 10 KiB PUTs from
  `sluice bench load` (64 users);
- the store's own ceiling where a tool for it exists: warp on MinIO (PUTs of
  64 MiB objects at 4 in flight, of 10 KiB at 64); none for Azurite or
  fake-gcs-server (azcopy and gsutil are not here).

Each case runs --runs times, stores alternated; medians are printed with the
client's CPU-seconds per GiB (the CLI's, or the gateway's for gateway cases),
the store process's CPU-seconds per GiB, and peak RSS. Ratios are each store's
rate over S3's for the same case: they say what the emulator costs, not what
Azure or GCS would do."""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (drive_under, GIB, MIB, MINIO_SECRET, MINIO_USER, ProcStats, client_env, driver_args, emit_report,
                      free_port, make_file, start_minio, stop, version, wait_for_port, warp_rate)

AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SMALL_COUNT, SMALL_SIZE = 10_000, 10 * 1024


def start_azurite(work, azurite):
    port = free_port()
    log = open(os.path.join(work, "azurite.log"), "w")
    proc = subprocess.Popen([azurite, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                             "--skipApiVersionCheck", "--silent"], stdout=log, stderr=log)
    wait_for_port(port)
    return proc, f"http://127.0.0.1:{port}/devstoreaccount1"


def start_fake_gcs(work, binary):
    port = free_port()
    log = open(os.path.join(work, "fake-gcs.log"), "w")
    proc = subprocess.Popen([binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
                             "-external-url", f"http://127.0.0.1:{port}", "-public-host", f"127.0.0.1:{port}",
                             "-log-level", "error"], stdout=log, stderr=log)
    wait_for_port(port)
    return proc, f"http://127.0.0.1:{port}"


def measured(argv, env):
    """(wall seconds, CPU seconds, peak RSS) of argv, with its output."""
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.monotonic()
        proc = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%U %S %M"] + argv, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"{argv[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        user, system, rss_kib = report.read().split()[-3:]
    return wall, float(user) + float(system), int(rss_kib) * 1024, proc.stdout


class Store:
    def __init__(self, name, location, endpoint, env, server):
        self.name, self.location, self.endpoint, self.env = name, location, endpoint, env
        self.server = ProcStats(server.pid)

    def url(self, rest):
        return f"{self.location}{rest}"


def cli_cases(sluice, store, work, big, tree, run):
    rows = []
    flags = ["--endpoint", store.endpoint]
    cases = [
        ("cli put 1 GiB", [sluice, "put", big, store.url(f"big-{run}.bin")] + flags, GIB),
        ("cli get 1 GiB", [sluice, "get", store.url(f"big-{run}.bin"), os.path.join(work, "big.back")] + flags, GIB),
        ("cli put 10,000 x 10 KiB", [sluice, "put", tree, store.url(f"small-{run}/")] + flags, SMALL_COUNT * SMALL_SIZE),
        ("cli get 10,000 x 10 KiB",
         [sluice, "get", store.url(f"small-{run}/"), os.path.join(work, f"down-{store.name}-{run}")] + flags,
         SMALL_COUNT * SMALL_SIZE),
    ]
    for case, argv, size in cases:
        server_before = store.server.cpu()
        wall, cpu, rss, _ = measured(argv, store.env)
        rows.append({"store": store.name, "case": case, "run": run, "seconds": wall, "mib_s": size / MIB / wall,
                     "files_s": SMALL_COUNT / wall if "10,000" in case else None,
                     "cpu_s_per_gib": cpu / (size / GIB), "server_cpu_s_per_gib": (store.server.cpu() - server_before) / (size / GIB),
                     "rss": rss})
    os.remove(os.path.join(work, "big.back"))
    shutil.rmtree(os.path.join(work, f"down-{store.name}-{run}"), ignore_errors=True)
    return rows


def gateway_cases(sluice, store, work, big, run):
    port = free_port()
    log = open(os.path.join(work, f"gateway-{store.name}.log"), "a")
    gateway = subprocess.Popen([sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", store.url(f"gw-{run}/"),
                                "--endpoint", store.endpoint], env=store.env, stdout=log, stderr=log, cwd=work)
    wait_for_port(port)
    stats = ProcStats(gateway.pid)
    base = f"http://127.0.0.1:{port}/v1/objects"
    rows = []
    try:
        cases = [
            ("gateway PUT 1 GiB", ["curl", "-sS", "-f", "-T", big, f"{base}/big.bin", "-o", "/dev/null"], GIB),
            ("gateway GET 1 GiB", ["curl", "-sS", "-f", f"{base}/big.bin", "-o", "/dev/null"], GIB),
            ("gateway 10,000 x 10 KiB PUTs",
             [sluice, "bench", "load", base, "--api", "put", "--users", "64", "--iterations",
              str(SMALL_COUNT // 64 + 1), "--size", "10KiB", "--quiet", "--json", os.path.join(work, "load.json")],
             (SMALL_COUNT // 64 + 1) * 64 * SMALL_SIZE),
        ]
        for case, argv, size in cases:
            gateway_before, server_before = stats.cpu(), store.server.cpu()
            wall, _, _, _ = measured(argv, store.env)
            if "PUTs" in case:
                summary = json.load(open(os.path.join(work, "load.json")))
                failed = summary.get("failed", summary.get("errors", 0))
                if failed:
                    sys.exit(f"{store.name} {case}: {failed} uploads failed")
            count = (SMALL_COUNT // 64 + 1) * 64
            rows.append({"store": store.name, "case": case, "run": run, "seconds": wall, "mib_s": size / MIB / wall,
                         "files_s": count / wall if "PUTs" in case else None,
                         "cpu_s_per_gib": (stats.cpu() - gateway_before) / (size / GIB),
                         "server_cpu_s_per_gib": (store.server.cpu() - server_before) / (size / GIB),
                         "rss": stats.peak_rss()})
    finally:
        stop(gateway)
    return rows


def main():
    ap = driver_args()
    ap.add_argument("--azurite", required=True)
    ap.add_argument("--fake-gcs", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    # The gateway runs in the work directory: paths must not be relative.
    args.sluice, args.azurite = os.path.abspath(args.sluice), os.path.abspath(args.azurite)
    work = tempfile.mkdtemp(prefix="sluice-bench-stores-")
    minio, minio_url = start_minio(work)
    env = client_env(work)
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"):
        env.pop(name, None)
    emulators = []

    def with_bucket(store):
        subprocess.run([args.sluice, "mb", store.url(""), "--endpoint", store.endpoint], env=store.env, check=True,
                       capture_output=True)
        return store

    def fresh(name):
        """The store `name` on an empty bucket. The emulators are started anew for
        each run: Azurite keeps what a run deleted in memory until its own clean-up
        (a later run's CreateMultipartUpload once waited over 30 s, six times, on
        it), and fake-gcs-server's memory backend scans every object it ever held
        on each write (a second run's 10,000-file put took over 16 minutes)."""
        if name == "s3 (MinIO)":
            return Store(name, "s3://bench/", minio_url, env, minio)
        if name == "azure (Azurite)":
            proc, url = start_azurite(work, args.azurite)
            store_env = dict(env, AZURE_STORAGE_CONNECTION_STRING=(
                f"AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};BlobEndpoint={url}"))
            store = Store(name, "az://bench/", url, store_env, proc)
        else:
            proc, url = start_fake_gcs(work, args.fake_gcs)
            store = Store(name, "gs://bench/", url, dict(env, STORAGE_EMULATOR_HOST=url), proc)
        emulators.append(proc)
        return with_bucket(store)

    try:
        with_bucket(Store("s3 (MinIO)", "s3://bench/", minio_url, env, minio))
        names = ["s3 (MinIO)", "azure (Azurite)", "gcs (fake-gcs)"]
        versions = {"azure": version([args.azurite, "--version"]), "gcs": fake_gcs_version(args.fake_gcs)}
        big = os.path.join(work, "big.bin")
        make_file(big, GIB)
        tree = os.path.join(work, "tree")
        os.makedirs(tree)
        payload = os.urandom(SMALL_SIZE)
        for i in range(SMALL_COUNT):
            d = os.path.join(tree, f"d{i // 100:03}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i:05}.bin"), "wb") as f:
                f.write(payload[i % 97:] + payload[:i % 97])
        rows = []
        for run in range(args.runs):
            order = names[run % len(names):] + names[:run % len(names)]
            for name in order:
                store = fresh(name)
                rows += cli_cases(args.sluice, store, work, big, tree, run)
                rows += gateway_cases(args.sluice, store, work, big, run)
                if store.location.startswith("s3://"):
                    subprocess.run([args.sluice, "rm", store.url(""), "--endpoint", store.endpoint], env=store.env,
                                   check=True, capture_output=True)
                else:
                    stop(emulators.pop())
                print(f"run {run}: {store.name} done", file=sys.stderr)
        ceilings = {
            # 1 GiB objects give warp too few samples in a short run; 64 MiB ones do not.
            "warp PUT 64 MiB objects": f"{(warp_rate(minio_url, env, 30, 4, work, size='64MiB', clear=True) or 0) * 64:.0f} MiB/s",
            "warp PUT 10 KiB objects": f"{warp_rate(minio_url, env, 20, 64, work, clear=True) or 0:.0f} objects/s",
        }
        lines = [f"# stores benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                 f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
                 f"sluice: {version([args.sluice, '--version'])}, defaults",
                 f"s3: {version(['minio', '--version'])}, {drive_under()}, 127.0.0.1",
                 f"azure: Azurite {versions['azure']}, in memory, 127.0.0.1, started anew for each run",
                 f"gcs: {versions['gcs']}, in memory, 127.0.0.1, started anew for each run",
                 f"{args.runs} runs, stores in rotating order, medians; CPU = the CLI's or the gateway's; store CPU = the store process's",
                 "",
                 f"{'case':32} {'store':16} {'MiB/s':>8} {'files/s':>8} {'CPU-s/GiB':>10} {'store CPU-s/GiB':>16} {'peak RSS':>10}",
                 "-" * 106]
        cases = list(dict.fromkeys(r["case"] for r in rows))
        for case in cases:
            for store in names:
                mine = [r for r in rows if r["case"] == case and r["store"] == store]
                med = lambda k: statistics.median(r[k] for r in mine)  # noqa: E731
                files = f"{med('files_s'):8.0f}" if mine[0]["files_s"] else f"{'':8}"
                lines.append(f"{case:32} {store:16} {med('mib_s'):8.1f} {files} {med('cpu_s_per_gib'):10.2f} "
                             f"{med('server_cpu_s_per_gib'):16.2f} {med('rss') / MIB:7.0f} MiB")
            rate = {store: statistics.median(r["mib_s"] for r in rows if r["case"] == case and r["store"] == store)
                    for store in names}
            s3 = rate[names[0]]
            lines.append(f"{'':32} rate over s3: " + ", ".join(
                f"{store.split()[0]} {rate[store] / s3:.2f}x" for store in names[1:]))
        lines += ["", "MinIO's own ceiling (warp, 20 s each): " + ", ".join(f"{k} {v}" for k, v in ceilings.items())]
        emit_report(lines, rows, args.out)
    finally:
        stop(minio)
        for proc in emulators:
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def fake_gcs_version(binary):
    """fake-gcs-server has no --version: the module version Go recorded."""
    found = subprocess.run(["go", "version", "-m", binary], capture_output=True, text=True).stdout
    for line in found.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "mod" and parts[1].endswith("fake-gcs-server"):
            return f"fake-gcs-server {parts[2]}"
    return "fake-gcs-server (version unknown)"


if __name__ == "__main__":
    main()
