#!/usr/bin/env python3
"""Turns the text report of etcd's `benchmark` tool into the JSON report `revkv bench -o json`
writes, so that scripts/bench_summary.py reads both alike.

usage: etcd_benchmark_report.py SECTION < benchmark-output.txt > report.json

etcd's benchmark (go.etcd.io/etcd/v3/tools/benchmark, run with --precise) prints, per report:

    Summary:
      Total:        <seconds> secs.
      ...
      Requests/sec: <rate>
    Response time histogram: ...
    Latency distribution:
      10% in <seconds> secs.
      ...
      99.9% in <seconds> secs.
    Error distribution:
      [<count>]     <message>

Most commands print one report. Two print more: `watch-latency` prints "Put summary:" and then
"Watch events summary:" (SECTION "watch" takes the second: the time from a put's answer to each
watcher's event, what the workload measures), and `txn-mixed` prints "Total Read Ops" and then
"Total Write Ops" (SECTION "txn-mixed" counts both kinds in the throughput and takes the write
transactions' latencies, the slower kind; the reads' go into "read_latency"). SECTION "single"
takes the only report.

The JSON has the fields bench_summary.py reads: throughput_ops_per_second, latency (p50_us,
p90_us, p99_us, p999_us, max_us), succeeded, failed, failures (message -> count). A report
without a Summary and without errors is refused (exit status 1): the run printed nothing to
measure, and a table of zeros would hide that.
"""

import json
import re
import sys

PERCENTILE_LINE = re.compile(r"^\s*([0-9.]+)% in ([0-9.eE+-]+) secs\.$")
ERROR_LINE = re.compile(r"^\s*\[(\d+)\]\s+(.*)$")
FIELD_LINE = re.compile(r"^\s*(Total|Slowest|Requests/sec):\s+([0-9.eE+-]+)")


def parse_one(lines):
    """One report (the lines from its "Summary:" up to the next report): its numbers."""
    report = {"total_seconds": 0.0, "slowest_seconds": 0.0, "rate": 0.0,
              "percentiles": {}, "failures": {}}
    section = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Summary:", "Response time histogram:", "Latency distribution:",
                        "Error distribution:"):
            section = stripped
            continue
        if section == "Summary:":
            match = FIELD_LINE.match(line)
            if match:
                key = {"Total": "total_seconds", "Slowest": "slowest_seconds",
                       "Requests/sec": "rate"}[match.group(1)]
                report[key] = float(match.group(2))
        elif section == "Latency distribution:":
            match = PERCENTILE_LINE.match(line)
            if match:
                report["percentiles"][match.group(1)] = float(match.group(2))
        elif section == "Error distribution:":
            match = ERROR_LINE.match(line)
            if match:
                message = match.group(2).strip()
                report["failures"][message] = report["failures"].get(message, 0) + int(match.group(1))
    report["succeeded"] = round(report["rate"] * report["total_seconds"])
    return report


def split_reports(text, markers):
    """The text after each marker up to the next one, as lines (markers in printed order)."""
    spans, start = [], 0
    for marker in markers:
        position = text.find(marker, start)
        if position < 0:
            raise SystemExit(f"etcd_benchmark_report: the output has no '{marker}'")
        spans.append((position, position + len(marker)))
        start = position + len(marker)
    pieces = []
    for index, (_, begin) in enumerate(spans):
        end = spans[index + 1][0] if index + 1 < len(spans) else len(text)
        pieces.append(text[begin:end].splitlines())
    return pieces


def latency_of(report):
    """The percentiles in microseconds. The tool leaves out a percentile whose value is 0 (a run
    too short to have one), which becomes 0 here too."""
    def micros(name):
        return report["percentiles"].get(name, 0.0) * 1e6
    return {"p50_us": micros("50"), "p90_us": micros("90"), "p99_us": micros("99"),
            "p999_us": micros("99.9"), "max_us": report["slowest_seconds"] * 1e6}


def as_json(report, succeeded, seconds, extra=None):
    failed = sum(report["failures"].values())
    if succeeded == 0 and failed == 0:
        raise SystemExit("etcd_benchmark_report: the report has no Summary and no errors")
    result = {
        "throughput_ops_per_second": succeeded / seconds if seconds > 0 else 0.0,
        "latency": latency_of(report),
        "succeeded": succeeded,
        "failed": failed,
        "failures": report["failures"],
        "client": "etcd benchmark",
    }
    result.update(extra or {})
    return result


def main():
    section = sys.argv[1] if len(sys.argv) > 1 else "single"
    text = sys.stdin.read()
    if section == "single":
        report = parse_one(text.splitlines())
        result = as_json(report, report["succeeded"], report["total_seconds"])
    elif section == "watch":
        _, events = split_reports(text, ["Put summary:", "Watch events summary:"])
        report = parse_one(events)
        result = as_json(report, report["succeeded"], report["total_seconds"])
    elif section == "txn-mixed":
        reads, writes = split_reports(text, ["Total Read Ops:", "Total Write Ops:"])
        read_report, write_report = parse_one(reads), parse_one(writes)
        seconds = max(read_report["total_seconds"], write_report["total_seconds"])
        for message, count in read_report["failures"].items():
            write_report["failures"][message] = write_report["failures"].get(message, 0) + count
        result = as_json(write_report, read_report["succeeded"] + write_report["succeeded"], seconds,
                         {"read_latency": latency_of(read_report),
                          "reads": read_report["succeeded"], "writes": write_report["succeeded"]})
    else:
        raise SystemExit(f"etcd_benchmark_report: unknown section '{section}'")
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
