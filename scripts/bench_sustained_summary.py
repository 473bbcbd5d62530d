#!/usr/bin/env python3
"""Summarises scripts/bench-sustained.sh: one system's run, or every round of a whole run.

usage: bench_sustained_summary.py one ROUND_DIR SYSTEM
       bench_sustained_summary.py all RESULTS_DIR SYSTEM...

Each run leaves, in its round's directory, SYSTEM.json (`revkv bench put -o json`),
SYSTEM.progress (the bench's progress lines, one throughput per second) and SYSTEM.measures
(five lines: each member's RSS in KiB, the members' data on disk in KiB, the members' CPU time
in clock ticks during the run, the clock ticks per second, the gRPC connection count or 0).

`one` prints that run's lines. `all` prints a table per round and one of the medians over the
rounds, then the ratios revkv / better etcd, where "better etcd" is, in each round, the etcd
system with the most writes per second; the ratio table gives the median of the rounds' ratios
with the lowest and highest beside it, so that one lucky round cannot make the figure.
"""

import json
import os
import re
import statistics
import sys


def load(round_dir, system):
    """One run's figures, or None when the run has not finished (its measures come last)."""
    report_path = os.path.join(round_dir, f"{system}.json")
    if not os.path.exists(os.path.join(round_dir, f"{system}.measures")):
        return None
    report = json.load(open(report_path))
    rss_line, disk_line, ticks_line, hertz_line, conns_line = (
        open(os.path.join(round_dir, f"{system}.measures")).read().splitlines()
    )
    keys = max(report["succeeded"], 1)
    rss_kib = [int(value) for value in rss_line.split()]
    progress = open(os.path.join(round_dir, f"{system}.progress")).read()
    rates = [int(match.group(1).replace(",", ""))
             for match in re.finditer(r"([\d,]+) ops/s in the last interval", progress)]
    windows = [sum(rates[i:i + 10]) / len(rates[i:i + 10]) for i in range(0, len(rates), 10)]
    return {
        "keys": report["succeeded"],
        "failed": report["failed"],
        "writes_per_second": report["throughput_ops_per_second"],
        "p99_ms": report["latency"]["p99_us"] / 1000,
        "cpu_us_per_write": int(ticks_line) / int(hertz_line) * 1e6 / keys,
        "rss_mib": [value // 1024 for value in rss_kib],
        "rss_bytes_per_key": max(rss_kib) * 1024 / keys,
        "disk_mib": int(disk_line) // 1024,
        "disk_bytes_per_key": int(disk_line) * 1024 / 3 / keys,
        "windows": windows,
        "conns": conns_line.strip(),
    }


def print_one(round_dir, system):
    run = load(round_dir, system)
    print(f"   {system}: {run['keys']:,} keys, {run['writes_per_second']:,.0f} writes/s overall, "
          f"p99 {run['p99_ms']:.1f} ms, {run['failed']} failed, "
          f"CPU {run['cpu_us_per_write']:.0f} us per write (three members)")
    print("   writes/s per 10 s window: " + ", ".join(f"{w:,.0f}" for w in run["windows"]))
    print(f"   RSS per member: {', '.join(f'{v} MB' for v in run['rss_mib'])}; "
          f"{run['rss_bytes_per_key']:.0f} bytes per key written (largest member)")
    print(f"   data on disk, three members: {run['disk_mib']} MB; "
          f"{run['disk_bytes_per_key']:.0f} bytes per key per member")


COLUMNS = [("writes/s", "writes_per_second", "{:,.0f}"), ("p99 ms", "p99_ms", "{:.1f}"),
           ("CPU us/write", "cpu_us_per_write", "{:.0f}"),
           ("RSS B/key", "rss_bytes_per_key", "{:.0f}"),
           ("disk B/key", "disk_bytes_per_key", "{:.0f}")]


def print_table(title, rows):
    print(f"\n### {title}\n")
    print("| system | conns | keys | " + " | ".join(name for name, _, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 3) + "|")
    for system, run in rows:
        cells = [fmt.format(run[key]) for _, key, fmt in COLUMNS]
        print(f"| {system} | {run['conns']} | {run['keys']:,} | " + " | ".join(cells) + " |")


def print_all(results_dir, systems):
    round_dirs = sorted((os.path.join(results_dir, name) for name in os.listdir(results_dir)
                         if name.startswith("round-")),
                        key=lambda path: int(path.rsplit("-", 1)[1]))
    rounds = [{system: load(round_dir, system) for system in systems} for round_dir in round_dirs]
    for number, runs in enumerate(rounds, start=1):
        print_table(f"Round {number}", [(s, runs[s]) for s in systems if runs[s]])
    medians = []
    for system in systems:
        runs = [runs[system] for runs in rounds if runs[system]]
        if not runs:
            continue
        median = {key: statistics.median(run[key] for run in runs) for _, key, _ in COLUMNS}
        median["keys"] = min(run["keys"] for run in runs)
        median["conns"] = runs[0]["conns"]
        medians.append((system, median))
    print_table(f"Median of {len(rounds)} rounds", medians)
    print_ratios(rounds, systems)


def print_ratios(rounds, systems):
    etcds = [system for system in systems if system.startswith("etcd")]
    revkvs = [system for system in systems if system.startswith("revkv")]
    if not etcds or not revkvs:
        return
    print("\n### revkv / better etcd (median of the rounds' ratios, lowest-highest)\n")
    print("| revkv system | " + " | ".join(name for name, _, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for revkv in revkvs:
        cells = []
        for _, key, _ in COLUMNS:
            ratios = []
            for runs in rounds:
                present = [runs[etcd] for etcd in etcds if runs[etcd]]
                if not runs[revkv] or not present:
                    continue
                better = max(present, key=lambda run: run["writes_per_second"])
                ratios.append(runs[revkv][key] / better[key])
            cells.append(f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                         if ratios else "-")
        print(f"| {revkv} | " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "one":
        print_one(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "all":
        print_all(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
