//! etcd's own benchmark tool (`go.etcd.io/etcd/v3/tools/benchmark` v3.7.1, built by
//! `scripts/go-tools.sh etcd-benchmark`) against a three-member revkv, with every command
//! `scripts/bench-vs-etcd.sh` measures: put, range (linearizable and serializable), txn-put,
//! txn-mixed, watch-latency and lease-keepalive, at small totals.
//!
//! This is not a benchmark (nothing is timed): it shows that etcd's tool runs against revkv as it
//! runs against etcd, without a single error, and that every request it made took effect exactly
//! once. Each command's report must count every request it sent as answered (the tool's latency
//! histogram holds one entry per success, and an "Error distribution" is printed for any
//! failure), the watchers must have received every event, and at the end the store must hold the
//! keys those writes made, at the revision they add up to.
//!
//! Without the tool set (or etcd 3.7's etcdctl, which writes the key the range reads), the test
//! passes with a note, except under `CI=true`.

use crate::process_cluster;

use std::path::Path;
use std::process::Command;

use process_cluster::{cluster_options, ProcessCluster};
use revkv_tools::harness::private_tools;
use serde_json::Value;

const PUTS: u64 = 300;
const RANGES: u64 = 200;
const TXN_PUTS: u64 = 200;
const MIXED_TXNS: u64 = 200;
const WATCH_PUTS: u64 = 50;
const WATCH_STREAMS: u64 = 2;
const WATCHERS_PER_STREAM: u64 = 2;
const KEEPALIVES: u64 = 200;
const RANGE_KEY: &str = "bench-range-key";

/// What one run of the tool printed: per report (in the order printed), the successes its
/// latency histogram counts; every line of every error distribution; and, for txn-mixed, how
/// many of its transactions were writes.
#[derive(Debug)]
struct Report {
    successes: Vec<u64>,
    errors: Vec<String>,
    write_ops: Option<u64>,
}

fn parse(output: &str) -> Report {
    let mut report = Report {
        successes: Vec::new(),
        errors: Vec::new(),
        write_ops: None,
    };
    let mut section = "";
    for line in output.lines() {
        let trimmed = line.trim();
        if let Some(count) = trimmed.strip_prefix("Total Write Ops:") {
            report.write_ops = Some(count.trim().parse().expect("a count of write ops"));
        }
        match trimmed {
            "Response time histogram:" => {
                report.successes.push(0);
                section = "histogram";
                continue;
            }
            "Error distribution:" => {
                section = "errors";
                continue;
            }
            "" | "Latency distribution:" | "Summary:" => {
                section = "";
                continue;
            }
            _ => {}
        }
        match section {
            // "  0.000706516 [1]\t|∎∎∎": the bucket's count is in brackets.
            "histogram" => {
                let count = trimmed
                    .split_once('[')
                    .and_then(|(_, rest)| rest.split_once(']'))
                    .and_then(|(count, _)| count.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("a histogram line: {line:?}"));
                *report.successes.last_mut().expect("a histogram") += count;
            }
            "errors" => report.errors.push(trimmed.to_string()),
            _ => {}
        }
    }
    report
}

/// Runs the tool with `arguments` against `endpoint` and returns its report, failing the test
/// when it exits unsuccessfully or reports any error.
fn run_benchmark(benchmark: &Path, endpoint: &str, arguments: &[&str]) -> Report {
    let output = Command::new(benchmark)
        .args([
            "--endpoints",
            endpoint,
            "--conns",
            "4",
            "--clients",
            "16",
            "--precise",
        ])
        .args(arguments)
        .output()
        .expect("run etcd's benchmark tool");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "benchmark {arguments:?}: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report = parse(&stdout);
    assert!(
        report.errors.is_empty(),
        "benchmark {arguments:?} reported errors: {:?}\n{stdout}",
        report.errors
    );
    report
}

fn etcdctl_json(etcdctl: &Path, endpoint: &str, arguments: &[&str]) -> Value {
    let output = Command::new(etcdctl)
        .args(["--endpoints", endpoint, "-w", "json"])
        .args(arguments)
        .output()
        .expect("run etcdctl");
    assert!(
        output.status.success(),
        "etcdctl {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("etcdctl's JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_benchmark_tool_runs_against_revkv_and_every_request_takes_effect_once() {
    let Some(tools) = private_tools::required_go_tool_set_directory("etcd-benchmark") else {
        return;
    };
    let Some(etcd_3_7) = private_tools::required_go_tool_set_directory("etcd-3.7") else {
        return;
    };
    let benchmark = tools.join("benchmark");
    let etcdctl = etcd_3_7.join("etcdctl");
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let endpoint = revkv.grpc_endpoints()[0].clone();

    tokio::task::block_in_place(|| {
        let puts = PUTS.to_string();
        let report = run_benchmark(
            &benchmark,
            &endpoint,
            &[
                "put",
                "--key-size",
                "8",
                "--sequential-keys",
                "--val-size",
                "256",
                "--key-space-size",
                &puts,
                "--total",
                &puts,
            ],
        );
        assert_eq!(report.successes, [PUTS]);

        etcdctl_json(
            &etcdctl,
            &endpoint,
            &["put", RANGE_KEY, "the value the range reads"],
        );
        let ranges = RANGES.to_string();
        for consistency in ["l", "s"] {
            let report = run_benchmark(
                &benchmark,
                &endpoint,
                &[
                    "range",
                    RANGE_KEY,
                    "--consistency",
                    consistency,
                    "--total",
                    &ranges,
                ],
            );
            assert_eq!(
                report.successes,
                [RANGES],
                "range --consistency {consistency}"
            );
        }

        // Both transaction commands write keys 0..n modulo the key space, as put did: they
        // overwrite put's keys and add none.
        let txn_puts = TXN_PUTS.to_string();
        let report = run_benchmark(
            &benchmark,
            &endpoint,
            &[
                "txn-put",
                "--key-size",
                "8",
                "--val-size",
                "256",
                "--key-space-size",
                &puts,
                "--total",
                &txn_puts,
            ],
        );
        assert_eq!(report.successes, [TXN_PUTS]);
        let mixed = MIXED_TXNS.to_string();
        let report = run_benchmark(
            &benchmark,
            &endpoint,
            &[
                "txn-mixed",
                "--key-size",
                "8",
                "--val-size",
                "256",
                "--key-space-size",
                &puts,
                "--total",
                &mixed,
            ],
        );
        // Its reads first, then its writes.
        assert_eq!(
            report.successes.iter().sum::<u64>(),
            MIXED_TXNS,
            "{report:?}"
        );
        let mixed_writes = report.write_ops.expect("txn-mixed prints its write count");
        assert_eq!(report.successes.get(1), Some(&mixed_writes), "{report:?}");

        // One new key, put WATCH_PUTS times; every watcher must see each put.
        let report = run_benchmark(
            &benchmark,
            &endpoint,
            &[
                "watch-latency",
                "--streams",
                &WATCH_STREAMS.to_string(),
                "--watchers-per-stream",
                &WATCHERS_PER_STREAM.to_string(),
                "--put-total",
                &WATCH_PUTS.to_string(),
                "--put-rate",
                "1000",
            ],
        );
        let events = WATCH_PUTS * WATCH_STREAMS * WATCHERS_PER_STREAM;
        assert_eq!(report.successes, [WATCH_PUTS, events]);

        let report = run_benchmark(
            &benchmark,
            &endpoint,
            &["lease-keepalive", "--total", &KEEPALIVES.to_string()],
        );
        assert_eq!(report.successes, [KEEPALIVES]);

        // Every write above made exactly one revision (a fresh store is at revision 1; grants
        // and keep-alives make none), and the keys are put's, the range key and the watched one.
        let count = etcdctl_json(&etcdctl, &endpoint, &["get", "", "--prefix", "--keys-only"]);
        let writes = PUTS + 1 + TXN_PUTS + mixed_writes + WATCH_PUTS;
        assert_eq!(count["header"]["revision"], 1 + writes, "{count}");
        assert_eq!(count["count"], PUTS + 2, "{count}");
    });
}
