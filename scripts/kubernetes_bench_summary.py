#!/usr/bin/env python3
"""Summarises scripts/bench-kubernetes.sh: each store's rows side by side and revkv against the
better etcd per row (and against kine, when it ran).

usage: kubernetes_bench_summary.py STORE... -- ROUND_DIR...

Each ROUND_DIR holds STORE.jsonl per store (cluster/go/kubernetes-bench's rows). With one round
the table shows that round; with several, every number is the median over the rounds, and each
ratio is the median of the rounds' ratios (the stores of one round ran minutes apart, so a ratio is
taken within a round before the median is).

Ratios, revkv over the better etcd of the row: throughput (more is better; the better etcd is the
one with the most), p50 and p99 (less is better; the better etcd has the least), and the store's CPU
per request (less is better). The watch row has no throughput of its own (its events come from the
writes), so only its latencies are compared. When kine ran, a last column gives revkv over kine in
the same way.
"""
import json
import statistics
import sys
from pathlib import Path


def read_round(directory, stores):
    rows = {}
    for store in stores:
        path = Path(directory) / f"{store}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows[(store, row["operation"], row["clients"])] = row
    return rows


def ratios_of(rows, baselines, operation, clients):
    """revkv's row over the better row of the baseline stores, or None when either is missing."""
    revkv = rows.get(("revkv", operation, clients))
    etcds = [rows[key] for key in ((s, operation, clients) for s in baselines) if key in rows]
    if revkv is None or not etcds:
        return None
    def lowest(field):
        values = [row[field] for row in etcds if row.get(field)]
        return min(values) if values else None
    ratios = {}
    best_throughput = max(row["per_second"] for row in etcds)
    if operation != "watch" and best_throughput > 0:
        ratios["throughput"] = revkv["per_second"] / best_throughput
    for field, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("store_cpu_us_per_request", "store CPU")):
        best = lowest(field)
        if best and revkv.get(field) is not None:
            ratios[name] = revkv[field] / best
    return ratios


def median_row(rows_of_rounds):
    fields = ("per_second", "p50_ms", "p99_ms", "store_cpu_us_per_request",
              "apiserver_cpu_us_per_request", "store_rss_mib")
    median = {}
    for field in fields:
        values = [row[field] for row in rows_of_rounds if row.get(field) is not None]
        if values:
            median[field] = statistics.median(values)
    return median


def cell(row):
    if row is None:
        return "—"
    text = f"{row.get('per_second', 0):,.0f}/s, p50 {row.get('p50_ms', 0):.2f}, p99 {row.get('p99_ms', 0):.2f}"
    if row.get("store_cpu_us_per_request") is not None:
        text += f", store {row['store_cpu_us_per_request']:,.0f} µs"
    return text


def ratio_summary(rounds, baselines, operation, clients):
    """The medians over the rounds of revkv's ratios to the better baseline, as one cell."""
    per_round = [r for r in (ratios_of(rows, baselines, operation, clients) for rows in rounds) if r]
    names = sorted({name for ratios in per_round for name in ratios},
                   key=["throughput", "p50", "p99", "store CPU"].index)
    summary = ", ".join(
        f"{name} {statistics.median(r[name] for r in per_round if name in r):.2f}x" for name in names)
    return summary or "—"


def main(arguments):
    if "--" not in arguments:
        sys.exit(__doc__)
    split = arguments.index("--")
    stores, directories = arguments[:split], arguments[split + 1:]
    rounds = [read_round(directory, stores) for directory in directories]
    keys = []
    for rows in rounds:
        for (_, operation, clients) in rows:
            if (operation, clients) not in keys:
                keys.append((operation, clients))
    order = ["create", "update", "list-whole", "list-paged", "watch", "delete"]
    keys.sort(key=lambda key: (key[1], order.index(key[0]) if key[0] in order else len(order)))
    title = "one round" if len(rounds) == 1 else f"medians of {len(rounds)} rounds"
    print(f"### Kubernetes on each store ({title}; latencies in ms, the store's CPU per request)\n")
    etcds = [store for store in stores if store.startswith("etcd")]
    comparisons = [("revkv / better etcd", etcds)]
    if "kine" in stores:
        comparisons.append(("revkv / kine", ["kine"]))
    print("| row | " + " | ".join(stores) + " | " + " | ".join(name for name, _ in comparisons) + " |")
    print("|---|" + "---|" * (len(stores) + len(comparisons)))
    for operation, clients in keys:
        cells = []
        for store in stores:
            present = [rows[(store, operation, clients)] for rows in rounds if (store, operation, clients) in rows]
            cells.append(cell(median_row(present)) if present else "—")
        summaries = [ratio_summary(rounds, baselines, operation, clients) for _, baselines in comparisons]
        print(f"| {operation} {clients} | " + " | ".join(cells + summaries) + " |")
    print()
    for store in stores:
        rss = [row["store_rss_mib"] for rows in rounds for (s, _, _), row in rows.items() if s == store]
        cpu = [row["apiserver_cpu_us_per_request"] for rows in rounds for (s, o, _), row in rows.items()
               if s == store and o in ("create", "update") and row.get("apiserver_cpu_us_per_request")]
        if rss:
            print(f"- {store}: largest member's RSS {max(rss):.0f} MiB at most; the apiserver's CPU per "
                  f"create or update {statistics.median(cpu):,.0f} µs (median)")


if __name__ == "__main__":
    main(sys.argv[1:])
