"""Shared pieces of the benchmark drivers: free ports, a MinIO on loopback, test
files, tool versions, per-process CPU / RSS / disk counters from /proc, and
paired ratios."""

import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

GIB = 1024 ** 3
MIB = 1024 ** 2
MINIO_USER, MINIO_SECRET = "benchadmin", "benchadmin-secret"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for_port(port, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on port {port}")


def drive_under():
    """Where the drivers' work directories (trees, downloads, MinIO's data) go, as
    a report's setup line says it: "one drive under /tmp (ext4, no journal)".
    Python's tempfile decides (TMPDIR); the file system is named because small-file
    figures depend on it (bench/README.md, "Small files and the disk")."""
    import tempfile
    where = os.path.realpath(tempfile.gettempdir())
    # The longest mount point holding it (the last of equals: mounted over).
    mount, fstype, device = "", "unknown", ""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            dev, point, kind = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)
                                for field in line.split()[:3])
            inside = point == "/" or where == point or where.startswith(point + "/")
            if inside and len(point) >= len(mount):
                mount, fstype, device = point, kind, dev
    if fstype == "ext4":
        try:
            # /dev/mapper/x and /dev/root are links to the name sysfs knows (dm-0, vda).
            with open(f"/sys/fs/ext4/{os.path.basename(os.path.realpath(device))}/journal_task") as task:
                fstype += ", no journal" if task.read().strip() == "<none>" else ", journal"
        except OSError:
            pass
    return f"one drive under {where} ({fstype})"


def start_minio(work, address="127.0.0.1", netns=None):
    """Starts MinIO with its data under `work` on `address` (inside network
    namespace `netns`, ports 9000/9001 there, when given); returns (process, url)."""
    port, console = (9000, 9001) if netns else (free_port(), free_port())
    env = dict(os.environ, MINIO_ROOT_USER=MINIO_USER, MINIO_ROOT_PASSWORD=MINIO_SECRET)
    log = open(os.path.join(work, "minio.log"), "w")
    wrap = ["ip", "netns", "exec", netns] if netns else []
    proc = subprocess.Popen(
        wrap + ["minio", "server", os.path.join(work, "data"), "--address", f"{address}:{port}",
                "--console-address", f"{address}:{console}", "--quiet"],
        env=env, stdout=log, stderr=log)
    url = f"http://{address}:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(url + "/minio/health/live", timeout=1)
            return proc, url
        except Exception:  # noqa: BLE001
            time.sleep(0.5)
    proc.kill()
    sys.exit("MinIO did not start")


def client_env(work):
    """Environment for S3 clients of that MinIO, isolated from the machine's AWS setup."""
    return dict(os.environ, AWS_ACCESS_KEY_ID=MINIO_USER, AWS_SECRET_ACCESS_KEY=MINIO_SECRET,
                AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                AWS_CONFIG_FILE=os.path.join(work, "none"), AWS_SHARED_CREDENTIALS_FILE=os.path.join(work, "none"))


def empty_trash(work):
    """MinIO moves deleted data to a trash directory it empties lazily; empty it now."""
    import shutil
    shutil.rmtree(os.path.join(work, "data", ".minio.sys", "tmp", ".trash"), ignore_errors=True)


def make_file(path, size):
    """Random content, written by `head` so that the driver stays small."""
    with open(path, "wb") as f:
        subprocess.run(["head", "-c", str(size), "/dev/urandom"], stdout=f, check=True)


def version(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e})"


class ProcStats:
    """CPU seconds (user + sys), peak RSS and bytes written to storage of a process."""

    def __init__(self, pid):
        self.pid = pid

    def cpu(self):
        fields = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss(self):
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def disk_writes(self):
        for line in open(f"/proc/{self.pid}/io"):
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
        return 0


def driver_args():
    """The argument parser every driver starts from (--sluice BINARY, --runs N), after
    making SIGTERM (or Ctrl-C) exit through `finally`, so that MinIO stops and the
    work directory goes."""
    import argparse
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--runs", type=int, default=3)
    return ap


def paired_ratio(rows, key, tool, peer, **match):
    """(median, per-run ratios) of `tool`'s `key` over `peer`'s `key` in the same
    run, among rows matching `match`; a row's tool is its "tool", else its "kind"
    (warp's rows). Each run measures the tools back to back, so a run's ratio
    compares neighbours in time; on a machine whose speed drifts by a third over
    minutes, the ratio of two medians would compare values measured far apart."""
    def value(name, run):
        for r in rows:
            if (r.get("tool", r.get("kind")) == name and r.get("run") == run and r.get(key)
                    and all(r.get(k) == v for k, v in match.items())):
                return r[key]
        return None
    ratios = []
    for run in sorted({r["run"] for r in rows if "run" in r}):
        a, b = value(tool, run), value(peer, run)
        if a and b:
            ratios.append(a / b)
    return (statistics.median(ratios) if ratios else None), ratios


def emit_report(lines, raw, out):
    """Prints the report with its raw runs appended as JSON, and writes it to `out`."""
    import json
    text = "\n".join(list(lines) + ["", "raw runs (JSON):", json.dumps(raw)])
    print()
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def start_gateway(tool, sluice, minio_url, env, work, extra=(), store_dir=None):
    """Starts `sluice serve` (bucket gw-sluice) or tusd with its S3 store (bucket
    gw-tusd) in front of MinIO on a free port, with `extra` arguments; returns
    (process, port). With `store_dir`, each stores into that directory instead
    (sluice's local directory store, tusd's filestore): no object store at all."""
    port = free_port()
    log = open(os.path.join(work, f"{tool}.log"), "a")
    if store_dir and tool == "sluice":
        argv = [sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", store_dir]
    elif store_dir:
        argv = ["tusd", "-host", "127.0.0.1", "-port", str(port), "-upload-dir", store_dir]
    elif tool == "sluice":
        argv = [sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", "s3://gw-sluice",
                "--endpoint", minio_url]
    else:
        argv = ["tusd", "-host", "127.0.0.1", "-port", str(port), "-s3-bucket", "gw-tusd",
                "-s3-endpoint", minio_url, "-upload-dir", os.path.join(work, "tusd-uploads")]
    proc = subprocess.Popen(argv + list(extra), env=env, stdout=log, stderr=log, cwd=work)
    wait_for_port(port)
    return proc, port


class Busy:
    """`count` processes that keep a core busy each (a shared, loaded machine)
    while the block runs."""

    def __init__(self, count):
        self.count = count
        self.procs = []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(self.count)]
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            proc.kill()
            proc.wait()


def stop(proc):
    """SIGTERM, then SIGKILL after 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def clear_bucket(bucket, minio_url, env, work):
    """Deletes every object of `bucket` and empties MinIO's trash."""
    subprocess.run(["s5cmd", "--endpoint-url", minio_url, "rm", f"s3://{bucket}/*"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    empty_trash(work)


def warp_rate(minio_url, env, seconds, concurrency, work, op="put", size="10KiB", objects=None, clear=False):
    """warp's direct rate (objects/s, the average) for `op` (put or get) of objects of
    `size` in bucket warp-bench of that MinIO; get first stores `objects` objects.
    Unless `clear`, warp leaves what it wrote."""
    host = minio_url.removeprefix("http://")
    argv = ["warp", op, "--host", host, "--access-key", MINIO_USER, "--secret-key", MINIO_SECRET,
            "--obj.size", size, "--concurrent", str(concurrency), "--duration", f"{seconds}s",
            "--bucket", "warp-bench"]
    if objects:
        argv += ["--objects", str(objects)]
    if not clear:
        argv += ["--noclear"]
    # warp writes its raw data file into the working directory
    out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=work)
    # The summary of the operation asked for (a get first summarizes its uploads).
    text = out.stdout + out.stderr
    section = text[text.find(f"Operation: {op.upper()}"):]
    rates = re.findall(r"([\d.]+) obj/s", section)
    if not rates:
        print(out.stdout[-2000:], out.stderr[-2000:], file=sys.stderr)
        return None
    return float(rates[0])
