#!/usr/bin/env python3
"""The numbers of scripts/bench-slow-watchers.sh.

usage: bench_slow_watchers_summary.py one ROUND_DIR SYSTEM PHASE
       bench_slow_watchers_summary.py all RESULTS_DIR SYSTEM...

`one` prints one phase's line from ROUND_DIR/SYSTEM-PHASE.json (etcd's benchmark report, as
etcd_benchmark_report.py writes it), .measures (the members' CPU ticks over the phase, ticks per
second, and each member's RSS in KiB) and, for the phases with watches, .holder.json (revkv bench
hold-watches' report). `all` prints, per system and phase, the median over the rounds, then per
system the ratios the issue asks about: p50 and p99 with slow watchers against no watchers and
against watchers that all read. Standard library only.
"""

import json
import pathlib
import statistics
import sys

PHASES = ("none", "reading", "stalled")


def phase_numbers(round_dir, system, phase):
    """The phase's numbers, or None when it left no report."""
    # Not Path.with_suffix: a system's name holds a dot ("etcd3.6").
    stem = f"{pathlib.Path(round_dir) / system}-{phase}"
    try:
        report = json.loads(pathlib.Path(f"{stem}.json").read_text())
        ticks, hertz, *rss = pathlib.Path(f"{stem}.measures").read_text().split()
    except (OSError, ValueError):
        return None
    succeeded = max(report["succeeded"], 1)
    numbers = {
        "puts_per_second": report["throughput_ops_per_second"],
        "p50_ms": report["latency"]["p50_us"] / 1000,
        "p99_ms": report["latency"]["p99_us"] / 1000,
        "failed": report["failed"],
        "cpu_us_per_put": int(ticks) / int(hertz) * 1e6 / succeeded,
        "rss_mib": sum(int(kib) for kib in rss) / 1024,
    }
    holder = pathlib.Path(f"{stem}.holder.json")
    if holder.exists():
        held = json.loads(holder.read_text())
        numbers["events_read"] = held["events_read"]
        numbers["stalled_events_at_end"] = held["stalled_events_read_at_the_end"]
        numbers["stalled_ended"] = held["stalled_watches_ended"]
        numbers["reading_ended"] = held["reading_watches_ended"]
    return numbers


def line(system, phase, numbers):
    text = (
        f"{system:11} {phase:8} {numbers['puts_per_second']:8.0f} puts/s  "
        f"p50 {numbers['p50_ms']:7.2f} ms  p99 {numbers['p99_ms']:8.2f} ms  "
        f"CPU {numbers['cpu_us_per_put']:6.0f} us/put  RSS {numbers['rss_mib']:6.0f} MiB"
    )
    if numbers["failed"]:
        text += f"  {numbers['failed']} failed"
    if "events_read" in numbers:
        text += f"  events read {numbers['events_read']}"
        if numbers["stalled_ended"] or numbers["stalled_events_at_end"]:
            text += (
                f"; stalled: {numbers['stalled_events_at_end']} events kept,"
                f" ended {numbers['stalled_ended'] or 'none'}"
            )
        if numbers["reading_ended"]:
            text += f"; reading ended {numbers['reading_ended']}"
    return text


def one(round_dir, system, phase):
    numbers = phase_numbers(round_dir, system, phase)
    if numbers is None:
        print(f"   {system} {phase}: no report")
        return
    print("   " + line(system, phase, numbers))


def median_of(rounds, key):
    values = [numbers[key] for numbers in rounds]
    return statistics.median(values) if values else None


def all_rounds(results_dir, systems):
    round_dirs = sorted(pathlib.Path(results_dir).glob("round-*"))
    print(f"## Median of {len(round_dirs)} rounds")
    print()
    print("| system | phase | puts/s | p50 ms | p99 ms | members' CPU us/put | members' RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    medians = {}
    for system in systems:
        for phase in PHASES:
            rounds = [n for n in (phase_numbers(d, system, phase) for d in round_dirs) if n]
            if not rounds:
                continue
            median = {key: median_of(rounds, key) for key in
                      ("puts_per_second", "p50_ms", "p99_ms", "cpu_us_per_put", "rss_mib")}
            medians[(system, phase)] = median
            print(f"| {system} | {phase} | {median['puts_per_second']:.0f} | {median['p50_ms']:.2f} "
                  f"| {median['p99_ms']:.2f} | {median['cpu_us_per_put']:.0f} | {median['rss_mib']:.0f} |")
    print()
    print("| system | p50 stalled / none | p99 stalled / none | p50 stalled / reading | p99 stalled / reading |")
    print("|---|---|---|---|---|")
    for system in systems:
        phases = [medians.get((system, phase)) for phase in PHASES]
        if None in phases:
            continue
        none, reading, stalled = phases
        print(f"| {system} | {stalled['p50_ms'] / none['p50_ms']:.2f}x | {stalled['p99_ms'] / none['p99_ms']:.2f}x "
              f"| {stalled['p50_ms'] / reading['p50_ms']:.2f}x | {stalled['p99_ms'] / reading['p99_ms']:.2f}x |")
    print()
    print("Every round, phase by phase:")
    for round_dir in round_dirs:
        print(f"- {round_dir.name}")
        for system in systems:
            for phase in PHASES:
                numbers = phase_numbers(round_dir, system, phase)
                if numbers:
                    print("  - " + line(system, phase, numbers))


def main(arguments):
    if len(arguments) == 4 and arguments[0] == "one":
        one(*arguments[1:])
    elif len(arguments) >= 3 and arguments[0] == "all":
        all_rounds(arguments[1], arguments[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
