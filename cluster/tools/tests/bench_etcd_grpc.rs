//! `revkv bench --target etcd-grpc` against a real etcd 3.4 (Debian's `etcd-server` package): a
//! single-member etcd on free loopback ports, then the put, get (linearizable and serializable) and
//! cas workloads through the bench's library API with a small `--total`, each of which must
//! succeed on every operation; for cas, the counters read back through etcd must add up to the
//! increments that succeeded, so no increment was lost or counted twice.
//!
//! Without `/usr/bin/etcd` the test passes with a note, except under `CI=true`, where it fails
//! (`scripts/test.sh` installs the package).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Parser;
use etcd_client::{Client, GetOptions};
use revkv_tools::bench::driver::{run_measured_part, write_keys_the_workload_reads};
use revkv_tools::bench::report::RunTotals;
use revkv_tools::bench::BenchArgs;
use tokio::time::Instant;

/// Where Debian's `etcd-server` package puts etcd 3.4.
const ETCD_BINARY: &str = "/usr/bin/etcd";

/// How long etcd may take to start and elect itself.
const ETCD_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The pause between two readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Operations of each measured run: enough to exercise every path, few enough to be quick.
const OPERATIONS_PER_RUN: &str = "200";

/// The cas run's hot counters (fewer than its clients, so increments do conflict).
const CAS_HOT_KEYS: u64 = 2;

/// The path of etcd, or `None` (with a note) when it is missing outside CI; under `CI=true` a
/// missing etcd fails the test.
fn required_etcd() -> Option<PathBuf> {
    let binary = PathBuf::from(ETCD_BINARY);
    if binary.is_file() {
        return Some(binary);
    }
    let under_ci = std::env::var("CI").is_ok_and(|value| value == "true");
    assert!(
        !under_ci,
        "{ETCD_BINARY} is not installed; CI needs Debian's etcd-server package"
    );
    eprintln!("note: {ETCD_BINARY} is not installed (apt-get install etcd-server); test not run");
    None
}

/// A single-member etcd on loopback ports of its own, killed on drop (also when a test panics).
struct EtcdServer {
    child: Child,
    client_url: String,
    log_path: PathBuf,
    _directory: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts `binary` with its data in a fresh temporary directory and waits until it answers.
    async fn start(binary: &Path) -> EtcdServer {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let client_url = format!("http://127.0.0.1:{}", free_port());
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let log_path = directory.path().join("etcd.log");
        let log = std::fs::File::create(&log_path).expect("create the log");
        let child = Command::new(binary)
            .arg("--data-dir")
            .arg(directory.path().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let server = EtcdServer {
            child,
            client_url,
            log_path,
            _directory: directory,
        };
        server.wait_until_it_answers().await;
        server
    }

    /// Polls with a linearizable read (which needs a leader) until one succeeds, or panics at
    /// the deadline.
    async fn wait_until_it_answers(&self) {
        let deadline = Instant::now() + ETCD_START_TIMEOUT;
        let mut last_error = String::from("no probe yet");
        while Instant::now() < deadline {
            match self.read("probe").await {
                Ok(_) => return,
                Err(error) => last_error = error,
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        panic!("etcd did not answer within {ETCD_START_TIMEOUT:?}: {last_error}");
    }

    /// The value at `key`, read linearizably through a client of its own.
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let options = etcd_client::ConnectOptions::new()
            .with_timeout(Duration::from_secs(2))
            .with_connect_timeout(Duration::from_secs(2));
        let mut client = Client::connect([&self.client_url], Some(options))
            .await
            .map_err(|error| error.to_string())?;
        let answer = client
            .get(key, None::<GetOptions>)
            .await
            .map_err(|error| error.to_string())?;
        Ok(answer.kvs().first().map(|kv| kv.value().to_vec()))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!(
                "--- etcd log (last lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    listener.local_addr().expect("a bound address").port()
}

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
    assert_all_succeeded("cas", &cas);
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
