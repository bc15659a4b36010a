#!/usr/bin/env python3
"""Runs the workspace's test binaries two at a time (scripts/test.sh calls it).

`cargo test` runs one test binary after another, and most of the suite's time
is spent waiting: on MinIO, Kafka, Spark, Chromium, timeouts a test must sit
through. This builds every test binary with `cargo test --no-run`, then runs
them in `--jobs` lanes, the slowest known ones first, never two that keep the
CPU busy at once, each in its package's directory as cargo would, with the doc
tests as one more job. Each binary's output is printed whole when it ends (as
cargo prints it, so a failure reads the same), and a table at the end says
where the time and the CPU went.

Every binary runs even after a failure (like --no-fail-fast); the exit status
is 1 if any failed. Arguments after `--` go to every test binary (a filter,
--nocapture, ...).

    scripts/run-tests.py [--jobs N] [-- TEST-ARGS...]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The slowest binaries of the suite as last measured alone on the machine
# (seconds), started first so that no lane is left with a long one at the end,
# and whether they keep the CPU busy (Spark, a thousand uploads, Kafka's JVM
# tools): two of those together take three times as long each, so one of them
# runs at a time, beside binaries that mostly wait. Only hints: a binary not
# named here runs after these, and a stale figure costs minutes, not
# correctness.
KNOWN = {
    "sluice-cli/chaos": (320, True),
    "sluice-cli/spark_delta": (200, True),
    "sluice-cli/kafka": (190, True),
    "sluice-iceberg/upkeep": (100, True),
    "sluice-cli/uppy": (110, False),
    "sluice-cli/stores": (100, False),
    "sluice-cli/tus": (100, False),
    "sluice-cli/imports": (78, False),
    "sluice-cli/events": (70, False),
    "sluice-cli/lifecycle_crash": (55, False),
    "sluice-cli/iceberg_catalog": (55, True),
    "sluice-server/events": (50, False),
    "sluice-cli/deploy": (40, False),
    "sluice-cli/direct": (38, False),
    "sluice-cli/iceberg_spark": (30, True),
    "sluice-cli/draft": (29, False),
}


def build(cargo_args):
    """Builds the test binaries; returns (package, name, kind, executable, dir) each."""
    command = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"]
    proc = subprocess.run(command + cargo_args, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    binaries = []
    for line in proc.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        directory = str(Path(message["manifest_path"]).parent)
        target = message["target"]
        name = Path(directory).name
        binaries.append((name, target["name"], target["kind"][0], message["executable"], directory))
    return binaries


class Job:
    def __init__(self, label, command, directory, known=(0, False)):
        self.label, self.command, self.directory = label, command, directory
        self.known_seconds, self.busy = known
        self.status, self.seconds, self.cpu = None, 0.0, 0.0

    def run(self, lock):
        with lock:
            print(f"     Started {self.label}", flush=True)
        # Bytes, not text: a test (or a JVM it runs) may print anything.
        with tempfile.TemporaryFile(mode="w+b") as log:
            began = time.monotonic()
            child = subprocess.Popen(
                self.command, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )
            # The CPU of the binary and of what it started and waited for.
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = self.status = os.waitstatus_to_exitcode(status)
            self.seconds = time.monotonic() - began
            self.cpu = usage.ru_utime + usage.ru_stime
            log.seek(0)
            with lock:
                print(f"     Running {self.label} ({self.seconds:.0f} s, {self.cpu:.0f} CPU-s, exit {self.status})")
                sys.stdout.flush()
                sys.stdout.buffer.write(log.read())
                sys.stdout.buffer.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("SLUICE_TEST_JOBS", "2")))
    parser.add_argument("test_args", nargs="*")
    args = parser.parse_args()
    cargo_args = ["--workspace"]

    jobs = []
    for package, name, kind, executable, directory in build(cargo_args):
        label = f"{package}/{name}" if kind == "test" else f"{package} {kind} unit tests"
        known = KNOWN.get(label, (0, False))
        jobs.append(Job(label, [executable] + args.test_args, directory, known))
    root = str(Path(__file__).resolve().parent.parent)
    jobs.append(Job("doc tests", ["cargo", "test", "--doc"] + cargo_args + ["--"] + args.test_args, root))
    jobs.sort(key=lambda job: -job.known_seconds)

    queue, began = list(jobs), time.monotonic()
    lock, changed = threading.Lock(), threading.Condition()
    busy_running = [0]

    def take():
        """The next job a free lane may start: none busy beside a busy one."""
        for job in queue:
            if not (job.busy and busy_running[0]):
                queue.remove(job)
                busy_running[0] += job.busy
                return job
        return None

    def lane():
        while True:
            with changed:
                job = take()
                while job is None and queue:
                    changed.wait()
                    job = take()
                if job is None:
                    return
            try:
                job.run(lock)
            finally:
                # Even if running it failed here: the other lane may wait on it.
                with changed:
                    busy_running[0] -= job.busy
                    changed.notify_all()

    lanes = [threading.Thread(target=lane) for _ in range(max(1, args.jobs))]
    for thread in lanes:
        thread.start()
    for thread in lanes:
        thread.join()

    print(f"\n==> {len(jobs)} test binaries in {time.monotonic() - began:.0f} s, {args.jobs} at a time")
    for job in sorted(jobs, key=lambda job: -job.seconds)[:15]:
        print(f"    {job.seconds:6.0f} s {job.cpu:6.0f} CPU-s  {job.label}")
    # A job whose run raised here has no status: failed too.
    failed = [job for job in jobs if job.status != 0]
    for job in failed:
        ended = "it did not finish" if job.status is None else f"exit {job.status}"
        print(f"FAILED: {job.label} ({ended})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
