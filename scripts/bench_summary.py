#!/usr/bin/env python3
"""Summarises one run of scripts/bench-vs-etcd.sh as Markdown tables.

usage: bench_summary.py RESULTS_DIR SYSTEM...
       bench_summary.py --median-of ROUND_DIR... -- SYSTEM...

Reads RESULTS_DIR/<system>-<workload>.json (revkv bench -o json, or etcd's benchmark tool's
report in that shape: scripts/etcd_benchmark_report.py), <system>-<workload>.cpu_ticks
(the members' CPU time during the workload), <system>-<workload>.conns (the gRPC connection count
of that run, the system's best of the sweep; absent for HTTP) and <system>.rss_kib (each
member's RSS after the run), <system>.disk_kib (each member's data on disk) and <system>.keys
(the keys the run wrote). Prints one table per workload group with every system, then the ratios revkv / better etcd,
(and revkv-grpc / better etcd when revkv's gRPC port was measured too), where "better etcd" is, per workload, the etcd row with the highest throughput; every ratio of that
workload (throughput, latencies, CPU) is against that row.

With --median-of, each ROUND_DIR is one round of the same systems (REVKV_BENCH_ROUNDS): every
ratio is computed within each round, against that round's better etcd, and the table gives the
median over the rounds with the lowest and highest beside it.
"""

import json
import os
import statistics
import sys

# Both clients' workloads (scripts/bench-vs-etcd.sh): etcd's benchmark tool's, then revkv bench's.
WORKLOADS = ["put-1", "put-64", "put-256", "range-lin-64", "range-ser-64", "txn-put-64",
             "txn-mixed-64", "watch-latency-100", "lease-keepalive-64",
             "get-lin-64", "get-ser-64", "cas-16-2"]
HERTZ = os.sysconf("SC_CLK_TCK")


def load(results_dir, system, workload):
    path = os.path.join(results_dir, f"{system}-{workload}.json")
    if not os.path.exists(path):
        return None
    report = json.load(open(path))
    ticks_path = os.path.join(results_dir, f"{system}-{workload}.cpu_ticks")
    ticks = int(open(ticks_path).read()) if os.path.exists(ticks_path) else None
    succeeded = max(report["succeeded"], 1)
    report["cpu_us_per_op"] = None if ticks is None else ticks / HERTZ * 1e6 / succeeded
    return report


def conns(results_dir, system, workload):
    path = os.path.join(results_dir, f"{system}-{workload}.conns")
    return open(path).read().strip() if os.path.exists(path) else "-"


def per_member_kib(results_dir, system, kind):
    """Each member's RSS (kind "rss") or data on disk (kind "disk") after the run, in KiB."""
    path = os.path.join(results_dir, f"{system}.{kind}_kib")
    if not os.path.exists(path):
        return []
    return [int(value) for value in open(path).read().split()]


def keys_written(results_dir, system):
    path = os.path.join(results_dir, f"{system}.keys")
    return int(open(path).read()) if os.path.exists(path) else None


def memory_cells(results_dir, system):
    """Keys written, then RSS and disk: the members' range in MB and the largest member's bytes
    per key written."""
    keys = keys_written(results_dir, system)
    cells = ["-" if keys is None else f"{keys:,}"]
    for kind in ("rss", "disk"):
        values = per_member_kib(results_dir, system, kind)
        if not values:
            cells += ["-", "-"]
            continue
        cells.append(f"{min(values) // 1024}–{max(values) // 1024} MB")
        cells.append("-" if not keys else f"{max(values) * 1024 / keys:,.0f} B")
    return cells


def cell(report, field):
    if report is None:
        return "-"
    if field == "ops":
        return f"{report['throughput_ops_per_second']:,.0f}"
    if field == "cpu":
        value = report["cpu_us_per_op"]
        return "-" if value is None else f"{value:,.0f}"
    if field == "failed":
        return str(report["failed"])
    return f"{report['latency'][field] / 1000:.3f}"


def main():
    results_dir, systems = sys.argv[1], sys.argv[2:]
    header = ["workload", "system", "gRPC conns", "ops/s", "p50 ms", "p99 ms",
              "CPU µs/op (3 members)", "failed"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for workload in WORKLOADS:
        for system in systems:
            report = load(results_dir, system, workload)
            if report is None:
                continue
            print("| " + " | ".join([workload, system, conns(results_dir, system, workload),
                                     cell(report, "ops"), cell(report, "p50_us"),
                                     cell(report, "p99_us"), cell(report, "cpu"),
                                     cell(report, "failed")]) + " |")
    print()
    print("| system | keys written | RSS per member after its run | RSS per key | "
          "disk per member | disk per key |")
    print("|---|---|---|---|---|---|")
    for system in systems:
        print(f"| {system} | " + " | ".join(memory_cells(results_dir, system)) + " |")
    print()
    for ours_name in [system for system in systems if system.startswith("revkv")]:
        print_ratios(results_dir, systems, ours_name)


def round_ratios(results_dir, systems, ours_name, workload):
    """The ratios ours / better etcd of one round and workload, or None when a side is missing.
    A ratio is None when a value is missing."""
    ours = load(results_dir, ours_name, workload)
    theirs = [(system, load(results_dir, system, workload))
              for system in systems if system.startswith("etcd")]
    theirs = [(system, report) for system, report in theirs if report is not None]
    if ours is None or not theirs:
        return None
    best_name, best = max(theirs, key=lambda pair: pair[1]["throughput_ops_per_second"])
    def ratio(a, b):
        return a / b if a is not None and b else None
    return {
        "better": best_name,
        "throughput": ratio(ours["throughput_ops_per_second"],
                            best["throughput_ops_per_second"]),
        "p50": ratio(ours["latency"]["p50_us"], best["latency"]["p50_us"]),
        "p99": ratio(ours["latency"]["p99_us"], best["latency"]["p99_us"]),
        "cpu": ratio(ours["cpu_us_per_op"], best["cpu_us_per_op"]),
    }


def print_ratios(results_dir, systems, ours_name):
    """One table of ratios: `ours_name` (revkv through HTTP, or revkv-grpc) / the better etcd."""
    print()
    print(f"Ratios, {ours_name} / better etcd (throughput: above 1 is better; p50, p99 and CPU: "
          "below 1 is better):")
    print()
    print("| workload | better etcd | throughput | p50 | p99 | CPU per op |")
    print("|---|---|---|---|---|---|")
    for workload in WORKLOADS:
        ratios = round_ratios(results_dir, systems, ours_name, workload)
        if ratios is None:
            continue
        cells = ["-" if ratios[field] is None else f"{ratios[field]:.2f}"
                 for field in ("throughput", "p50", "p99", "cpu")]
        print(f"| {workload} | {ratios['better']} | " + " | ".join(cells) + " |")


def print_median_ratios(round_dirs, systems, ours_name):
    """The median over rounds of each per-round ratio, with its range."""
    print()
    print(f"Median over {len(round_dirs)} rounds of the per-round ratios, {ours_name} / better "
          "etcd of that round (lowest–highest in brackets):")
    print()
    print("| workload | throughput | p50 | p99 | CPU per op |")
    print("|---|---|---|---|---|")
    for workload in WORKLOADS:
        rounds = [round_ratios(directory, systems, ours_name, workload)
                  for directory in round_dirs]
        rounds = [ratios for ratios in rounds if ratios is not None]
        if not rounds:
            continue
        cells = []
        for field in ("throughput", "p50", "p99", "cpu"):
            values = [ratios[field] for ratios in rounds if ratios[field] is not None]
            cells.append("-" if not values else
                         f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})")
        print(f"| {workload} | " + " | ".join(cells) + " |")


def print_median_memory(round_dirs, systems):
    """Per system, the median over rounds of its smallest and largest member's RSS after its run,
    and each revkv system's largest member against the smallest etcd member of the same round."""
    print()
    print(f"Memory after each run, median over {len(round_dirs)} rounds (MB; lowest–highest round "
          "in brackets):")
    print()
    print("| system | keys | smallest member's RSS | largest member's RSS | "
          "largest revkv member / smallest etcd member |")
    print("|---|---|---|---|---|")
    for system in systems:
        smallest, largest, keys, against = [], [], [], []
        for directory in round_dirs:
            values = per_member_kib(directory, system, "rss")
            if not values:
                continue
            smallest.append(min(values) / 1024)
            largest.append(max(values) / 1024)
            keys.append(keys_written(directory, system) or 0)
            etcd_smallest = [min(per_member_kib(directory, other, "rss")) / 1024
                             for other in systems
                             if other.startswith("etcd") and per_member_kib(directory, other, "rss")]
            if system.startswith("revkv") and etcd_smallest:
                against.append(max(values) / 1024 / min(etcd_smallest))
        if not smallest:
            continue
        def summary(values, form):
            return (f"{statistics.median(values):{form}} "
                    f"({min(values):{form}}–{max(values):{form}})") if values else "-"
        print(f"| {system} | {statistics.median(keys):,.0f} | {summary(smallest, '.0f')} | "
              f"{summary(largest, '.0f')} | {summary(against, '.2f')} |")


def median_main(arguments):
    separator = arguments.index("--")
    round_dirs, systems = arguments[:separator], arguments[separator + 1:]
    for ours_name in [system for system in systems if system.startswith("revkv")]:
        print_median_ratios(round_dirs, systems, ours_name)
    print_median_memory(round_dirs, systems)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--median-of"]:
        median_main(sys.argv[2:])
    else:
        main()
