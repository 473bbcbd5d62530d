//! `revkv bench --target etcd-grpc` against a real etcd 3.4 (Debian's `etcd-server` package): a
//! single-member etcd on free loopback ports, then the put, get (linearizable and serializable) and
//! cas workloads through the bench's library API with a small `--total`, each of which must
//! succeed on every operation; for cas, the counters read back through etcd must add up to the
//! increments that succeeded, so no increment was lost or counted twice.
//!
//! Without `/usr/bin/etcd` the test passes with a note, except under `CI=true`, where it fails
//! (`scripts/test.sh` installs the package).

use clap::Parser;
use revkv_tools::bench::driver::{run_measured_part, write_keys_the_workload_reads};
use revkv_tools::bench::report::RunTotals;
use revkv_tools::bench::target::FailureKind;
use revkv_tools::bench::BenchArgs;
use revkv_tools::harness::etcd::{required_etcd, EtcdServer};

/// Operations of each measured run: enough to exercise every path, few enough to be quick.
const OPERATIONS_PER_RUN: &str = "200";

/// The cas run's hot counters (fewer than its clients, so increments do conflict).
const CAS_HOT_KEYS: u64 = 2;

/// The command line `revkv bench` would parse, for the library API.
#[derive(Parser)]
struct BenchCommandLine {
    #[command(flatten)]
    bench: BenchArgs,
}

/// Runs `revkv bench WORDS --target etcd-grpc --endpoints URL --quiet` (setup writes included)
/// and answers what its measured part counted.
async fn run_bench(endpoint: &str, words: &[&str]) -> RunTotals {
    let mut argv = vec!["bench"];
    argv.extend_from_slice(words);
    argv.extend_from_slice(&["--target", "etcd-grpc", "--endpoints", endpoint, "--quiet"]);
    let parsed = BenchCommandLine::try_parse_from(&argv).expect("valid bench arguments");
    let plan = parsed.bench.into_plan().expect("a consistent plan");
    write_keys_the_workload_reads(&plan)
        .await
        .expect("the setup writes succeed");
    run_measured_part(&plan)
        .await
        .expect("the measured part runs")
}

/// Every one of the run's operations succeeded.
fn assert_all_succeeded(run: &str, totals: &RunTotals) {
    assert!(
        totals.failures.is_empty(),
        "{run}: failures {:?}",
        totals.failures
    );
    let expected: u64 = OPERATIONS_PER_RUN.parse().expect("a number");
    assert_eq!(totals.succeeded, expected, "{run}: successes");
    assert_eq!(totals.latencies_micros.len(), expected, "{run}: latencies");
}

/// The cas run's only failures are increments whose five attempts all conflicted (client-go's
/// DEFAULT_RETRY gives up then, and with three clients on two counters a loaded machine can make
/// five in a row lose); every other operation succeeded. The counters check below still proves
/// that no increment was lost or counted twice.
fn assert_only_exhausted_retries_failed(cas: &RunTotals) {
    let exhausted = FailureKind::Status {
        status: 409,
        reason: "conflict".into(),
    };
    let other_failures: Vec<_> = cas
        .failures
        .iter()
        .filter(|(kind, _)| **kind != exhausted)
        .collect();
    assert!(
        other_failures.is_empty(),
        "cas: failures {other_failures:?}"
    );
    let gave_up = cas.failures.get(&exhausted).copied().unwrap_or(0);
    let expected: u64 = OPERATIONS_PER_RUN.parse().expect("a number");
    assert_eq!(
        cas.succeeded + gave_up,
        expected,
        "cas: every increment ended"
    );
    assert!(
        gave_up * 10 <= expected,
        "cas: {gave_up} of {expected} increments ran out of attempts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_and_cas_workloads_succeed_against_a_real_etcd_over_grpc() {
    let Some(binary) = required_etcd() else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    let endpoint = etcd.client_url.clone();

    let put = run_bench(
        &endpoint,
        &["put", "--clients", "4", "--total", OPERATIONS_PER_RUN],
    )
    .await;
    assert_all_succeeded("put", &put);

    for consistency in ["linearizable", "serializable"] {
        let words = [
            "get",
            "--consistency",
            consistency,
            "--keys",
            "10",
            "--clients",
            "4",
            "--total",
            OPERATIONS_PER_RUN,
        ];
        let get = run_bench(&endpoint, &words).await;
        assert_all_succeeded(consistency, &get);
    }

    let keys = CAS_HOT_KEYS.to_string();
    let words = [
        "cas",
        "--keys",
        &keys,
        "--clients",
        "3",
        "--total",
        OPERATIONS_PER_RUN,
    ];
    let cas = run_bench(&endpoint, &words).await;
    assert_only_exhausted_retries_failed(&cas);
    assert!(
        cas.cas_attempts >= cas.succeeded,
        "every increment took an attempt"
    );
    assert_eq!(cas.cas_attempts - cas.cas_conflicts, cas.succeeded);
    assert_eq!(counters_total(&etcd).await, cas.succeeded);
}

/// The cas counters' values added up, read back through etcd.
async fn counters_total(etcd: &EtcdServer) -> u64 {
    let mut total = 0;
    for index in 0..CAS_HOT_KEYS {
        let key = revkv_tools::bench::workload::cas_key(index);
        let value = etcd
            .read(&key)
            .await
            .expect("etcd answers")
            .unwrap_or_else(|| panic!("{key} exists after the cas run"));
        let value: u64 = String::from_utf8(value)
            .expect("a text value")
            .parse()
            .expect("a decimal counter");
        total += value;
    }
    total
}

/// A loopback relay to `target` that counts the connections made through it.
async fn counting_relay(target: &str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let target = target.trim_start_matches("http://").to_owned();
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (format!("http://{address}"), accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_client_tasks_share_the_connections_conns_asks_for() {
    use std::sync::atomic::Ordering;
    let Some(binary) = required_etcd() else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    for (conns, expected) in [(None, 1), (Some("3"), 3)] {
        let (relay, accepted) = counting_relay(&etcd.client_url).await;
        let mut words = vec!["put", "--clients", "8", "--total", OPERATIONS_PER_RUN];
        if let Some(conns) = conns {
            words.extend_from_slice(&["--conns", conns]);
        }
        let put = run_bench(&relay, &words).await;
        assert_all_succeeded("put through the relay", &put);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            expected,
            "8 client tasks with --conns {conns:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_workload_over_grpc_delivers_every_write_to_every_watch() {
    let Some(binary) = required_etcd() else {
        return;
    };
    let etcd = EtcdServer::start(&binary).await;
    // Five watches, two to a stream: three streams over two connections.
    let argv = [
        "bench",
        "watch",
        "--target",
        "etcd-grpc",
        "--endpoints",
        &etcd.client_url,
        "--watchers",
        "5",
        "--watches-per-stream",
        "2",
        "--conns",
        "2",
        "--write-rate",
        "50",
        "--duration",
        "1s",
        "--quiet",
    ];
    let parsed = BenchCommandLine::try_parse_from(argv).expect("valid bench arguments");
    let plan = parsed.bench.into_watch_plan().expect("a consistent plan");
    let report = revkv_tools::bench::watch_latency::run(&plan)
        .await
        .expect("the watch run ends");
    assert!(report.writes_acknowledged > 0, "{report:?}");
    assert_eq!(report.write_failures, 0, "{report:?}");
    assert_eq!(report.events_expected, report.writes_acknowledged * 5);
    assert_eq!(report.events_received, report.events_expected, "{report:?}");
    assert_eq!(report.grpc_streams, Some(3));
    assert_eq!(report.grpc_connections, Some(2));
}
