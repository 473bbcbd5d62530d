//! End to end with a real Prometheus (Debian's `prometheus` package): a three-member cluster of
//! `revkv serve` processes, Prometheus scraping every member's `GET /metrics`, a workload of
//! concurrent PATCHes on one hot key and txns whose compares fail, and then Prometheus' own query
//! API must show exactly the conflicts and update attempts the test caused, with every member `up`;
//! likewise a lease workload (grants, keep-alives, a revoke, an expiry) and the lease metrics.
//! A second test checks that `GET /metrics` passes `promtool check metrics`.
//!
//! Without `prometheus` or `promtool` on the PATH these tests pass with a note, except under
//! `CI=true`, where a missing tool fails them (`.ci/run` installs the package).

use crate::process_cluster;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use process_cluster::{cluster_options, wait_until, MemberClient, ProcessCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// How often Prometheus scrapes the members in these tests.
const SCRAPE_INTERVAL: &str = "500ms";

/// How long Prometheus may take to start, to see every target up, and to catch up with a workload.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(60);

/// Concurrent PATCHes on the hot key, and txns on it whose compares fail.
const CONCURRENT_PATCHES: usize = 12;
const FAILING_TXNS: usize = 7;

/// The hot key, and its `prefix` label.
const HOT_KEY: &str = "hotspot/counter";
const HOT_PREFIX: &str = "hotspot";

/// DefaultRetry's attempts: what an exhausted PATCH (answered 409) took.
const DEFAULT_RETRY_ATTEMPTS: u64 = 5;

/// The path of a tool, or `None` (with a note) when it is missing outside CI; under `CI=true` a
/// missing tool fails the test.
fn required_tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|directory| directory.join(name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        let under_ci = std::env::var("CI").is_ok_and(|value| value == "true");
        assert!(
            !under_ci,
            "{name} is not installed; CI needs Debian's prometheus package"
        );
        eprintln!("note: {name} is not installed (apt-get install prometheus); test not run");
    }
    found
}

/// A Prometheus server scraping one cluster, killed on drop.
struct PrometheusServer {
    child: Child,
    url: String,
    http: reqwest::Client,
    log_path: PathBuf,
    _directory: tempfile::TempDir,
}

impl PrometheusServer {
    /// Starts `binary` scraping `targets` (host:port) and waits until it is ready.
    async fn start(binary: &Path, targets: &[String]) -> PrometheusServer {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let config_path = directory.path().join("prometheus.yml");
        std::fs::write(&config_path, scrape_config(targets)).expect("write the config");
        let port = free_port();
        let log_path = directory.path().join("prometheus.log");
        let log = std::fs::File::create(&log_path).expect("create the log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                directory.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let server = PrometheusServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            log_path,
            _directory: directory,
        };
        server.wait_until_ready().await;
        server
    }

    async fn wait_until_ready(&self) {
        let ready_url = format!("{}/-/ready", self.url);
        wait_until("prometheus to be ready", PROMETHEUS_TIMEOUT, async || {
            let response = self.http.get(&ready_url).send().await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
    }

    /// Runs an instant query; `Err` with Prometheus' error for a failed query.
    async fn try_query(&self, expression: &str) -> Result<Vec<(Value, f64)>, String> {
        let url = format!(
            "{}/api/v1/query?query={}",
            self.url,
            utf8_percent_encode(expression, NON_ALPHANUMERIC)
        );
        let response = self.http.get(url).send().await.map_err(|e| e.to_string())?;
        let answer: Value = response.json().await.map_err(|e| e.to_string())?;
        if answer["status"] != "success" {
            return Err(format!("{expression}: {answer}"));
        }
        let samples = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(samples.into_iter().map(sample_of).collect())
    }

    /// The single value of a query that aggregates to one series, or `None` while it has none.
    async fn scalar(&self, expression: &str) -> Option<f64> {
        let samples = self.try_query(expression).await.expect("a valid query");
        samples.first().map(|(_, value)| *value)
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!(
                "--- prometheus log (last lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
    }
}

/// A vector sample's labels and value.
fn sample_of(sample: Value) -> (Value, f64) {
    let value = sample["value"][1]
        .as_str()
        .expect("a sample value")
        .parse()
        .expect("a number");
    (sample["metric"].clone(), value)
}

fn scrape_config(targets: &[String]) -> String {
    let targets = targets
        .iter()
        .map(|target| format!("\"{target}\""))
        .collect::<Vec<_>>();
    format!(
        "global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  scrape_timeout: {SCRAPE_INTERVAL}\n\
         scrape_configs:\n  - job_name: revkv\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    listener.local_addr().expect("a bound address").port()
}

fn scrape_targets(cluster: &ProcessCluster) -> Vec<String> {
    let ids = cluster.ids();
    ids.iter()
        .map(|id| cluster.member(*id).client_address.to_string())
        .collect()
}

/// What the workload did, as the clients saw it.
#[derive(Debug, Default)]
struct Caused {
    patches: u64,
    patch_attempts: u64,
    exhausted_patches: u64,
    failed_txns: u64,
    lease_grants: u64,
    lease_keepalives: u64,
    lease_revokes: u64,
    lease_expiries: u64,
}

impl Caused {
    /// Conflicts the clients were told about on the hot prefix: every failed txn and every
    /// PATCH that gave up with 409.
    fn conflicts(&self) -> u64 {
        self.failed_txns + self.exhausted_patches
    }
}

/// PATCHes the hot key from every member at once, each adding its own field.
async fn run_concurrent_patches(clients: &[MemberClient], caused: &mut Caused) {
    let patches = (0..CONCURRENT_PATCHES).map(|index| {
        let client = clients[index % clients.len()].clone();
        tokio::spawn(async move {
            let patch = json!({ "writers": { format!("w{index}"): true } });
            let body = serde_json::to_vec(&patch).unwrap();
            let path = format!("/v1/kv/{HOT_KEY}");
            client.try_send(Method::PATCH, &path, Some(body), &[]).await
        })
    });
    for patch in futures_join_all(patches.collect()).await {
        let answer = patch
            .expect("the patch task ran")
            .expect("the member answered");
        caused.patches += 1;
        match answer.status {
            StatusCode::OK => caused.patch_attempts += answer.json["attempts"].as_u64().unwrap(),
            StatusCode::CONFLICT => {
                caused.exhausted_patches += 1;
                caused.patch_attempts += DEFAULT_RETRY_ATTEMPTS;
            }
            other => panic!("a PATCH answered {other}: {}", answer.json),
        }
    }
}

/// Joins spawned tasks in order (the harness has no futures crate).
async fn futures_join_all<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<Result<T, String>> {
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await.map_err(|error| error.to_string()));
    }
    results
}

/// Grants spread over the members, one lease renewed twice and then revoked, one lease left to
/// expire (a TTL of 1 s, the harness's minimum) and one left alive; waits until the expired one is
/// gone, so the expiry is counted by the time Prometheus is asked.
async fn run_lease_workload(clients: &[MemberClient], caused: &mut Caused) {
    let mut grant = async |client: &MemberClient, ttl: i64| {
        let granted = client
            .post("/v1/leases", json!({ "ttl": ttl }))
            .await
            .expect_ok("grant a lease");
        caused.lease_grants += 1;
        granted.json["id"].as_i64().expect("a lease id")
    };
    let renewed = grant(&clients[0], 60).await;
    let expiring = grant(&clients[1], 1).await;
    grant(&clients[2], 600).await;
    for client in &clients[1..] {
        client
            .post(&format!("/v1/leases/{renewed}/keepalive"), json!({}))
            .await
            .expect_ok("keep a lease alive");
        caused.lease_keepalives += 1;
    }
    clients[2]
        .delete(&format!("/v1/leases/{renewed}"))
        .await
        .expect_ok("revoke a lease");
    caused.lease_revokes += 1;
    let expiring_path = format!("/v1/leases/{expiring}");
    wait_until("the 1 s lease to expire", PROMETHEUS_TIMEOUT, async || {
        let answer = clients[0]
            .try_send(Method::GET, &expiring_path, None, &[])
            .await
            .ok()?;
        (answer.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    caused.lease_expiries += 1;
}

/// Txns on the hot key whose compare fails, spread over the members, each marked as a client's
/// second retry.
async fn run_failing_txns(clients: &[MemberClient], caused: &mut Caused) {
    for index in 0..FAILING_TXNS {
        let txn = json!({
            "compare": [{ "key": HOT_KEY, "target": "value", "op": "=", "value": "never" }],
            "success": [{ "put": { "key": HOT_KEY, "value": "{}" } }],
            "failure": []
        });
        let client = &clients[index % clients.len()];
        let answer = client
            .send(
                Method::POST,
                "/v1/txn",
                Some(txn),
                &[("x-retry-attempt", "2")],
            )
            .await
            .expect_ok("a txn with a failing compare");
        assert_eq!(answer.json["succeeded"], false);
        caused.failed_txns += 1;
    }
}

/// Waits until every query answers its expected value, failing with the last answers if not.
async fn wait_for_values(prometheus: &PrometheusServer, expected: &[(String, f64)]) {
    let what = format!("prometheus to report {expected:?}");
    wait_until(what, PROMETHEUS_TIMEOUT, async || {
        for (expression, value) in expected {
            if prometheus.scalar(expression).await != Some(*value) {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// Waits until Prometheus has scraped every member successfully.
async fn wait_for_every_member_up(prometheus: &PrometheusServer, targets: &[String]) {
    let what = format!("every member {targets:?} to be up in prometheus");
    wait_until(what, PROMETHEUS_TIMEOUT, async || {
        let samples = prometheus.try_query("up{job=\"revkv\"}").await.ok()?;
        let all_up = targets.iter().all(|target| {
            samples
                .iter()
                .any(|(labels, value)| labels["instance"] == *target && *value == 1.0)
        });
        all_up.then_some(())
    })
    .await;
}

/// Every PromQL expression of the Grafana dashboard, with Grafana's variables filled in.
fn dashboard_expressions() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../metrics/dashboards/revkv.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard")).unwrap();
    let panels = dashboard["panels"].as_array().expect("panels");
    panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().expect("an expr").to_string())
        .map(|expr| {
            expr.replace("$__rate_interval", "1m")
                .replace("$__range", "5m")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_sees_exactly_the_conflicts_and_attempts_the_test_caused() {
    let Some(binary) = required_tool("prometheus") else {
        return;
    };
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let targets = scrape_targets(&cluster);
    let prometheus = PrometheusServer::start(&binary, &targets).await;
    wait_for_every_member_up(&prometheus, &targets).await;

    let clients: Vec<MemberClient> = cluster.ids().iter().map(|id| cluster.client(*id)).collect();
    clients[0].put_ok(HOT_KEY, "{\"n\":0}").await;
    let mut caused = Caused::default();
    run_concurrent_patches(&clients, &mut caused).await;
    run_failing_txns(&clients, &mut caused).await;
    run_lease_workload(&clients, &mut caused).await;
    eprintln!("the workload caused {caused:?}");

    let conflicts =
        format!("sum(revkv_conflicts_total{{prefix=\"{HOT_PREFIX}\",resolution=\"rejected\"}})");
    let retried =
        format!("sum(revkv_conflicts_total{{prefix=\"{HOT_PREFIX}\",resolution=\"retried\"}})");
    let txn_conflicts = format!("sum(revkv_conflicts_total{{op=\"txn\",prefix=\"{HOT_PREFIX}\"}})");
    let retries = format!("sum(revkv_client_retries_total{{op=\"txn\",prefix=\"{HOT_PREFIX}\"}})");
    let expected = [
        (conflicts, caused.conflicts() as f64),
        // Every PATCH attempt but each request's last lost its compare-and-swap and was retried.
        (retried, (caused.patch_attempts - caused.patches) as f64),
        (txn_conflicts, caused.failed_txns as f64),
        (
            "sum(revkv_update_attempts_count{op=\"patch\"})".to_string(),
            caused.patches as f64,
        ),
        (
            "sum(revkv_update_attempts_sum{op=\"patch\"})".to_string(),
            caused.patch_attempts as f64,
        ),
        (retries, caused.failed_txns as f64),
        (
            "sum(revkv_client_retry_attempt_sum{op=\"txn\"})".to_string(),
            2.0 * caused.failed_txns as f64,
        ),
        (
            "sum(revkv_lease_granted_total)".to_string(),
            caused.lease_grants as f64,
        ),
        (
            "sum(revkv_lease_keepalives_total)".to_string(),
            caused.lease_keepalives as f64,
        ),
        (
            "sum(revkv_lease_revoked_total)".to_string(),
            caused.lease_revokes as f64,
        ),
        (
            "sum(revkv_lease_expired_total)".to_string(),
            caused.lease_expiries as f64,
        ),
        (
            "sum(revkv_lease_expiry_lag_seconds_count)".to_string(),
            caused.lease_expiries as f64,
        ),
        // One lease is left alive, and every member's store holds it.
        ("sum(revkv_leases_active)".to_string(), 3.0),
    ];
    wait_for_values(&prometheus, &expected).await;
    wait_for_every_member_up(&prometheus, &targets).await;
    let leaders = prometheus.scalar("sum(revkv_raft_is_leader)").await;
    assert_eq!(
        leaders,
        Some(1.0),
        "exactly one member reports itself leader"
    );

    for expression in dashboard_expressions() {
        let answer = prometheus.try_query(&expression).await;
        assert!(answer.is_ok(), "the dashboard's query fails: {answer:?}");
    }
}

#[tokio::test]
async fn get_metrics_passes_promtool_check_metrics() {
    let Some(promtool) = required_tool("promtool") else {
        return;
    };
    let cluster = ProcessCluster::start(1, cluster_options()).await;
    let client = cluster.client(1);
    // Touch every labelled family, so the check sees them with samples.
    let revision = client.put_ok("doc/a", "{\"a\":1}").await;
    let stale = format!("\"{}\"", revision - 1);
    let body = serde_json::to_vec(&json!({ "value": "x" })).unwrap();
    client
        .try_send(
            Method::PUT,
            "/v1/kv/doc/a",
            Some(body),
            &[("if-match", &stale)],
        )
        .await
        .unwrap();
    let patch = serde_json::to_vec(&json!({ "b": 2 })).unwrap();
    let retry = [("x-retry-attempt", "1")];
    client
        .try_send(Method::PATCH, "/v1/kv/doc/a", Some(patch), &retry)
        .await
        .unwrap();

    let url = format!("{}/metrics", cluster.member(1).client_url());
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    assert!(text.contains("revkv_update_attempts_count{op=\"patch\",outcome=\"success\"} 1"));
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = check.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}\n--- metrics ---\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
