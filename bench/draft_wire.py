#!/usr/bin/env python3
"""The same scripted wire checks of the IETF resumable-upload draft against
`sluice serve` and tusd, side by side: tests/clients/draft_wire.mjs (a client
on Node's http.request) walks each server through every step the draft names,
as interop 6 (the newest tusd serves) and as interop 8 (the current draft), and
this prints, for each step, the status each server answered and the draft's
headers it sent. Where they differ is where one of them departs from the draft
(docs/RESUMABLE.md and the note say which and why). Both servers keep their
uploads on local disk here: the wire does not depend on the store.

    bench/draft_wire.py --sluice target/release/sluice [--out FILE]"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import tempfile

from benchlib import free_port, stop, version, wait_for_port

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "tests", "clients", "draft_wire.mjs")
MAX = 64 << 20
SHOWN = ["upload-offset", "upload-complete", "upload-length", "upload-limit", "location",
         "cache-control", "accept-patch", "repr-digest", "content-type"]


def start(tool, sluice, work):
    port = free_port()
    log = open(os.path.join(work, f"{tool}.log"), "a")
    if tool == "sluice":
        store = os.path.join(work, "sluice-store")
        os.makedirs(store, exist_ok=True)
        argv = [sluice, "serve", "--listen", f"127.0.0.1:{port}", "--store", store,
                "--max-upload-size", str(MAX)]
        path = "/v1/tus/"
    else:
        argv = ["tusd", "-host", "127.0.0.1", "-port", str(port), "-upload-dir", os.path.join(work, "tusd"),
                "-enable-experimental-protocol", "-max-size", str(MAX)]
        path = "/files/"
    proc = subprocess.Popen(argv, stdout=log, stderr=log, cwd=work)
    wait_for_port(port)
    return proc, f"http://127.0.0.1:{port}", path


def walk(origin, path, interop):
    out = subprocess.run(["node", CLIENT, origin, path, str(interop), str(MAX)], capture_output=True,
                         text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def cell(step):
    if step is None:
        return "-"
    if step["status"] == 0:
        return "(cut)"
    headers = step["headers"]
    notes = []
    for name in SHOWN:
        if name in headers:
            value = headers[name]
            if name == "location":
                value = "yes"
            elif name == "content-type":
                value = value.split(";")[0]
            elif name == "repr-digest":
                value = "yes"
            notes.append(f"{name}: {value}")
    body = step.get("body")
    if isinstance(body, dict) and body.get("type"):
        notes.append("problem " + body["type"].split("#")[-1])
    elif isinstance(body, str) and body:
        notes.append(f"text {body[:40]!r}")
    return f"{step['status']} " + "; ".join(notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sluice = os.path.abspath(args.sluice)
    work = tempfile.mkdtemp(prefix="sluice-draft-wire-")
    runs = {}
    try:
        for tool in ["sluice", "tusd"]:
            proc, origin, path = start(tool, sluice, work)
            try:
                for interop in [8, 6]:
                    runs[(tool, interop)] = walk(origin, path, interop)
            finally:
                stop(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    columns = [("sluice", 8), ("tusd", 8), ("sluice", 6), ("tusd", 6)]
    steps = [s["step"] for s in runs[("sluice", 8)]]
    lines = [f"# the draft's wire, sluice and tusd side by side, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"sluice: {version([sluice, '--version'])}, serve on a local directory store, --max-upload-size {MAX}",
             f"tusd: {version(['tusd', '-version'])}, local upload dir, -enable-experimental-protocol, -max-size {MAX}",
             "client: tests/clients/draft_wire.mjs (Node http.request), the same steps against each", ""]
    for step in steps:
        lines.append(f"## {step}")
        for tool, interop in columns:
            found = next((s for s in runs[(tool, interop)] if s["step"] == step), None)
            lines.append(f"  {tool:6} interop {interop}: {cell(found)}")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
