#!/usr/bin/env python3
"""Reads the reports of the benchmarks (put, gateway, tus, throttle) from one
results directory and writes summary.md: every ratio against its peer (for
throttle: against the capacity the proxy allows) in one table, with the issue's
target and whether it was met. Ratios are of medians over the runs, as in each
report; the gateway's are medians of per-run ratios (benchlib.paired_ratio), as
in its report.

    python3 bench/compare.py bench/results/2026-11-22"""

import json
import os
import statistics
import sys

from benchlib import paired_ratio

med = statistics.median


def raw_runs(path):
    """The JSON list after "raw runs (JSON):" in a report."""
    with open(path) as f:
        text = f.read()
    marker = "raw runs (JSON):\n"
    return json.loads(text[text.index(marker) + len(marker):].strip().splitlines()[0])


def ratio(rows, key, tool, peer, **match):
    """median(key) of `tool` rows over median(key) of `peer` rows, among rows matching."""
    def pick(t):
        values = [r[key] for r in rows if r.get("tool") == t and all(r.get(k) == v for k, v in match.items())]
        return med(values) if values else None
    a, b = pick(tool), pick(peer)
    return a / b if a and b else None


def put_rows(rows):
    for r in rows:
        r["mib_s"] = r["bytes"] / 2**20 / r["wall"]
        r["cpu_s_per_gib"] = r["cpu"] / (r["bytes"] / 2**30)
    out = []
    for case in sorted({r["case"] for r in rows}):
        out.append(("put", f"{case}: MiB/s vs s5cmd", ratio(rows, "mib_s", "sluice", "s5cmd", case=case), ">= 1.25x", lambda v: v >= 1.25))
        out.append(("put", f"{case}: CPU-s/GiB vs s5cmd", ratio(rows, "cpu_s_per_gib", "sluice", "s5cmd", case=case), "(lower is better)", None))
    return out


def gateway_rows(rows):
    out = []
    relays = [r for r in rows if r.get("kind") == "relay"]
    for case in sorted({r["case"] for r in relays}):
        value, _ = paired_ratio(relays, "mib_s", "sluice", "tusd", case=case)
        out.append(("gateway", f"relay {case}: MiB/s vs tusd", value, ">= 1.3x", lambda v: v >= 1.3))
    storms = [r for r in rows if r.get("kind") in ("storm", "warp")]
    for count in sorted({r["count"] for r in storms if r["kind"] == "storm"}):
        target = count == 10000
        for peer, label, goal in (("tusd", "tusd", 3.0), ("warp", "warp direct", 0.75)):
            value, _ = paired_ratio(storms, "uploads_per_s", "sluice", peer, count=count)
            out.append(("gateway", f"storm {count}: uploads/s vs {label}", value, f">= {goal:g}x" if target else "",
                        (lambda v, goal=goal: v >= goal) if target else None))
    return out


def tus_rows(rows):
    out = []
    for chunk in sorted({r["chunk_mib"] for r in rows}, reverse=True):
        goal = 1.3 if chunk >= 64 else 1.0
        out.append(("tus", f"{chunk} MiB chunks: MiB/s vs tusd", ratio(rows, "mib_s", "sluice", "tusd", chunk_mib=chunk),
                    f">= {goal}x", lambda v, goal=goal: v >= goal))
    return out


def throttle_rows(rows):
    out = []
    for case in dict.fromkeys(r["case"] for r in rows if r.get("cap")):
        mine = [r["figures"] for r in rows if r["case"] == case]
        achieved = med(f["achieved"] for f in mine) / mine[0]["capacity"]
        out.append(("throttle", f"{case}: uploads/s vs capacity {mine[0]['capacity']}/s", achieved, ">= 0.90x",
                    lambda v: v >= 0.9))
        if case.startswith("a:"):
            out.append(("throttle", f"{case}: share of store requests throttled",
                        med(f["throttled_share"] for f in mine), "<= 10%", lambda v: v <= 0.10))
        ceiling = [r["figures"]["achieved"] for r in rows if "figures" in r and not r.get("cap")]
        warp = [r["uploads_per_s"] for r in rows if r["case"] == "warp direct" and r["uploads_per_s"]]
        if case.startswith("b:") and warp:
            out.append(("throttle", f"{case}: uploads/s vs warp straight to MinIO (the store's own rate here)",
                        med(f["achieved"] for f in mine) / med(warp), "", None))
        if case.startswith("b:") and ceiling:
            out.append(("throttle", f"{case}: uploads/s vs the gateway's uncapped rate on this machine",
                        med(f["achieved"] for f in mine) / med(ceiling), "", None))
        lost = sum(f["other"] + abs(f["stored"] - f["succeeded"]) + f["incomplete"] for f in mine)
        out.append(("throttle", f"{case}: lost or half-written uploads (all runs)", lost, "0", lambda v: v == 0))
    return out


def main():
    directory = sys.argv[1]
    readers = [("put.txt", put_rows), ("gateway.txt", gateway_rows), ("tus.txt", tus_rows),
               ("throttle.txt", throttle_rows)]
    lines = [f"# Benchmark summary: {os.path.basename(os.path.normpath(directory))}", "",
             "Ratios of medians, sluice over the peer (for the gateway: the median of the ratios within each run), "
             "from the reports in this directory "
             "(each report has its setup and raw runs).", "",
             "| benchmark | measure | ratio | target | met |", "| --- | --- | --- | --- | --- |"]
    missing = []
    for name, reader in readers:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            missing.append(name)
            continue
        for bench, measure, value, target, check in reader(raw_runs(path)):
            if value is None:
                shown = "n/a"
            elif isinstance(value, int):
                shown = str(value)
            elif "share" in measure:
                shown = f"{100 * value:.1f}%"
            else:
                shown = f"{value:.2f}x"
            met = "" if check is None or value is None else ("yes" if check(value) else "**no**")
            lines.append(f"| {bench} | {measure} | {shown} | {target} | {met} |")
    if missing:
        lines += ["", "Not run: " + ", ".join(missing)]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(directory, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
