//! A harness for integration tests that run real revkv clusters: every member is a separate
//! `revkv serve` process (the binary cargo builds for this package), driven over HTTP with reqwest.
//!
//! - Every member gets free loopback ports (bound at port 0, then released), its own data directory
//!   under one temporary directory per cluster, fast raft timing, and a log file that receives its
//!   stdout and stderr. Restarting a member reuses its ports, data directory and flags.
//! - `ProcessCluster` kills every child on drop, so no process outlives its test; when the test is
//!   failing (the drop happens while panicking) it prints the tail of every member's log first.
//! - Nothing waits by sleeping: `wait_until` polls a condition until a deadline and fails the test
//!   with a description of what never happened.
#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The binary under test.
pub const REVKV_BINARY: &str = env!("CARGO_BIN_EXE_revkv");

/// How often `wait_until` re-checks its condition.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// How long a cluster may take to elect a leader and get every member ready.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A generous bound for anything the cluster should do "soon" (an election, catching up).
pub const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest any single HTTP call may take before the test gives up on it (well above every
/// member-side timeout the tests configure, so a member's own 503/504 always arrives first).
const HTTP_CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// How many lines of each member's log a failing test prints.
const LOG_TAIL_LINES: usize = 60;

/// How many times a cluster start is retried when a member could not bind its port (another test
/// may take a released port before the member binds it).
const START_ATTEMPTS: u32 = 3;

/// Polls `probe` every `POLL_INTERVAL` until it answers `Some`, and returns that; fails the test
/// with `what` if `timeout` passes first.
pub async fn wait_until<T>(
    what: impl Display,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("gave up after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Flags every member of a cluster starts with.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// `--request-timeout-ms`: the longest a member waits for a write, a read barrier or
    /// `min_revision` before answering 504 (also its peer call timeout).
    pub request_timeout_ms: u64,
    /// Further `revkv serve` flags for every member.
    pub extra_flags: Vec<String>,
    /// Environment variables for every member (for example a more verbose `RUST_LOG`).
    pub environment: Vec<(String, String)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            request_timeout_ms: 5000,
            extra_flags: Vec::new(),
            environment: Vec::new(),
        }
    }
}

impl ClusterOptions {
    /// Adds `revkv serve` flags for every member.
    pub fn with_flags(mut self, flags: &[&str]) -> Self {
        self.extra_flags
            .extend(flags.iter().map(|flag| flag.to_string()));
        self
    }

    /// Sets an environment variable for every member.
    pub fn with_environment(mut self, name: &str, value: &str) -> Self {
        self.environment.push((name.to_string(), value.to_string()));
        self
    }

    pub fn with_request_timeout_ms(mut self, milliseconds: u64) -> Self {
        self.request_timeout_ms = milliseconds;
        self
    }
}

/// One decoded HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON (`Value::Null` when it is empty or not JSON).
    pub json: Value,
}

impl Answer {
    /// `error.code` of an error body, or "" when there is none.
    pub fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    /// `header.revision`; fails the test if the answer has none.
    pub fn revision(&self) -> u64 {
        self.json["header"]["revision"]
            .as_u64()
            .unwrap_or_else(|| panic!("no header.revision in {self:?}"))
    }

    /// A response header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// Fails the test unless the status is 200 OK; returns the answer for chaining.
    pub fn expect_ok(self, context: impl Display) -> Self {
        assert_eq!(
            self.status,
            StatusCode::OK,
            "{context}: expected 200, got {} {}",
            self.status,
            self.json
        );
        self
    }

    /// Fails the test unless this is a contract error body (section 3) with this status and code:
    /// `{"error": {"code", "message"}}`, a non-empty message, and every named extra field present.
    pub fn expect_error(&self, status: StatusCode, code: &str, extra_fields: &[&str]) {
        assert_eq!(
            self.status, status,
            "expected {status} {code}, got {} {}",
            self.status, self.json
        );
        assert_eq!(self.error_code(), code, "error code of {}", self.json);
        let message = self.json["error"]["message"].as_str().unwrap_or("");
        assert!(
            !message.is_empty(),
            "an error carries a message: {}",
            self.json
        );
        for field in extra_fields {
            assert!(
                self.json.get(*field).is_some(),
                "the {code} body carries {field}: {}",
                self.json
            );
        }
    }
}

/// An HTTP client bound to one member's client URL. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemberClient {
    pub id: u64,
    pub base_url: String,
    http: reqwest::Client,
}

impl MemberClient {
    fn new(id: u64, base_url: String) -> Self {
        // No connection pooling: members are killed and restarted under the tests, and a pooled
        // connection to a dead process would turn into a spurious error on the next request.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(HTTP_CALL_TIMEOUT)
            .build()
            .expect("a plain HTTP client builds");
        MemberClient { id, base_url, http }
    }

    /// Sends one request; `Err` only when there is no HTTP answer at all (refused, reset, timeout).
    pub async fn try_send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, reqwest::Error> {
        let url = format!("{}{}", self.base_url, path_and_query);
        let mut request = self.http.request(method, url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            headers,
            json,
        })
    }

    /// Sends one request and fails the test if the member does not answer at all.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let body = body.map(|json| serde_json::to_vec(&json).expect("JSON encodes"));
        let described = format!("{method} {path_and_query} on member {}", self.id);
        self.try_send(method, path_and_query, body, headers)
            .await
            .unwrap_or_else(|error| panic!("{described}: no answer: {error}"))
    }

    pub async fn get(&self, path_and_query: &str) -> Answer {
        self.send(Method::GET, path_and_query, None, &[]).await
    }

    pub async fn post(&self, path_and_query: &str, body: Value) -> Answer {
        self.send(Method::POST, path_and_query, Some(body), &[])
            .await
    }

    pub async fn delete(&self, path_and_query: &str) -> Answer {
        self.send(Method::DELETE, path_and_query, None, &[]).await
    }

    /// `PUT /v1/kv/{key}` with `{"value": value}` (keys here are plain URL-safe text).
    pub async fn put(&self, key: &str, value: &str) -> Answer {
        let body = json!({ "value": value });
        self.send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &[])
            .await
    }

    /// Puts and returns the revision of the write; fails the test on anything but 200.
    pub async fn put_ok(&self, key: &str, value: &str) -> u64 {
        self.put(key, value)
            .await
            .expect_ok(format_args!("put {key} through member {}", self.id))
            .revision()
    }

    /// Puts, retrying while the cluster is between leaders (no answer, 503, or 504; a 504's
    /// write may or may not have happened, and repeating a put of the same value is harmless),
    /// until `timeout`. Returns the revision of the write that was acknowledged.
    pub async fn put_retrying(&self, key: &str, value: &str, timeout: Duration) -> u64 {
        let body = serde_json::to_vec(&json!({ "value": value })).expect("JSON encodes");
        let path = format!("/v1/kv/{key}");
        let what = format!("put {key} through member {} to be acknowledged", self.id);
        wait_until(what, timeout, async || {
            match self
                .try_send(Method::PUT, &path, Some(body.clone()), &[])
                .await
            {
                Ok(answer) if answer.status == StatusCode::OK => Some(answer.revision()),
                Ok(answer)
                    if answer.status == StatusCode::SERVICE_UNAVAILABLE
                        || answer.status == StatusCode::GATEWAY_TIMEOUT =>
                {
                    None
                }
                Ok(answer) => panic!(
                    "put {key} through member {}: {} {}",
                    self.id, answer.status, answer.json
                ),
                Err(_) => None,
            }
        })
        .await
    }

    /// `GET /v1/kv/{key}` with an optional query (without the `?`).
    pub async fn get_key(&self, key: &str, query: &str) -> Answer {
        let separator = if query.is_empty() { "" } else { "?" };
        self.get(&format!("/v1/kv/{key}{separator}{query}")).await
    }

    /// The key's value (a serializable read, local to this member), or `None` if absent.
    pub async fn local_value(&self, key: &str) -> Option<String> {
        let answer = self.get_key(key, "consistency=serializable").await;
        match answer.status {
            StatusCode::OK => Some(answer.json["kv"]["value"].as_str()?.to_string()),
            StatusCode::NOT_FOUND => None,
            _ => panic!("reading {key} on member {}: {answer:?}", self.id),
        }
    }

    /// `GET /v1/status`, or `None` when the member does not answer 200.
    /// The member's `GET /metrics` text (empty when it does not answer).
    pub async fn metrics_text(&self) -> String {
        let url = format!("{}/metrics", self.base_url);
        match self.http.get(url).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    pub async fn status(&self) -> Option<Value> {
        let answer = self
            .try_send(Method::GET, "/v1/status", None, &[])
            .await
            .ok()?;
        (answer.status == StatusCode::OK).then_some(answer.json)
    }

    /// True when `GET /readyz` answers 200.
    pub async fn is_ready(&self) -> bool {
        matches!(
            self.try_send(Method::GET, "/readyz", None, &[]).await,
            Ok(answer) if answer.status == StatusCode::OK
        )
    }

    /// True when the process answers HTTP at all (`GET /healthz`).
    pub async fn is_up(&self) -> bool {
        matches!(
            self.try_send(Method::GET, "/healthz", None, &[]).await,
            Ok(answer) if answer.status == StatusCode::OK
        )
    }

    /// `GET /v1/hash?revision=R`: `(hash, revision, compact_revision)`.
    pub async fn hash_at(&self, revision: u64) -> (u64, u64, u64) {
        let answer = self
            .get(&format!("/v1/hash?revision={revision}"))
            .await
            .expect_ok(format_args!("hash at {revision} on member {}", self.id));
        let field = |name: &str| answer.json[name].as_u64().expect("a hash field");
        (field("hash"), field("revision"), field("compact_revision"))
    }
}

/// One `revkv serve` process and what it needs to be restarted as the same member.
pub struct MemberProcess {
    pub id: u64,
    pub client_address: SocketAddr,
    pub peer_address: SocketAddr,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    /// The `serve` arguments and environment, reused on restart.
    arguments: Vec<String>,
    environment: Vec<(String, String)>,
    child: Option<Child>,
}

impl MemberProcess {
    pub fn client_url(&self) -> String {
        format!("http://{}", self.client_address)
    }

    pub fn peer_url(&self) -> String {
        format!("http://{}", self.peer_address)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the process with its log file opened for appending, after a line that marks the
    /// start (so a restarted member's log shows both lives).
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "member {} already runs", self.id);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open the member's log file");
        writeln!(log, "==== test harness: starting member {} ====", self.id)
            .expect("write the log");
        let stderr = log.try_clone().expect("clone the log file handle");
        let mut command = Command::new(REVKV_BINARY);
        command
            .arg("serve")
            .args(&self.arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .env("RUST_BACKTRACE", "1")
            // Plain log files: tracing colours its output unless told not to.
            .env("NO_COLOR", "1");
        for (name, value) in &self.environment {
            command.env(name, value);
        }
        self.child = Some(command.spawn().expect("spawn revkv serve"));
    }

    /// SIGKILL, then reap the process.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM (a graceful stop), then waits for the process to exit.
    fn terminate(&mut self) {
        self.signal("TERM");
        if let Some(mut child) = self.child.take() {
            let status = child.wait().expect("wait for the member to exit");
            assert!(status.success(), "member {} stopped with {status}", self.id);
        }
    }

    /// The exit status if the process has ended by itself.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Sends a signal by name (`STOP`, `CONT`) to the running process.
    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the member runs");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} member {}", self.id);
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

/// A cluster of `revkv serve` processes. Dropping it kills every process.
pub struct ProcessCluster {
    members: BTreeMap<u64, MemberProcess>,
    options: ClusterOptions,
    // Dropped after `members` (fields drop in order), so logs are read before the files go.
    directory: tempfile::TempDir,
}

/// Two free loopback addresses per member, all distinct: every listener is held until all are
/// bound, then released for the members to bind.
fn free_addresses(count: usize) -> Vec<SocketAddr> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().expect("a bound address"))
        .collect()
}

impl ProcessCluster {
    /// Starts members `1..=size` as one new cluster and waits until a leader is elected and every
    /// member is ready.
    pub async fn start(size: u64, options: ClusterOptions) -> ProcessCluster {
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = ProcessCluster::spawn_founders(size, options.clone());
            match cluster.wait_until_all_ready().await {
                Ok(()) => return cluster,
                Err(problem) if attempt < START_ATTEMPTS && problem.contains("cannot listen") => {
                    eprintln!("cluster start attempt {attempt} lost a port race; retrying");
                }
                // Dropping the cluster while panicking prints the members' logs.
                Err(problem) => panic!("the cluster did not start: {problem}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// A cluster with no members yet, for tests that start only `--join` members.
    pub fn without_members(options: ClusterOptions) -> ProcessCluster {
        ProcessCluster {
            members: BTreeMap::new(),
            options,
            directory: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn spawn_founders(size: u64, options: ClusterOptions) -> ProcessCluster {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let addresses = free_addresses(2 * size as usize);
        let initial_cluster = (1..=size)
            .map(|id| format!("{id}=http://{}", addresses[2 * (id as usize - 1) + 1]))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = ProcessCluster {
            members: BTreeMap::new(),
            options,
            directory,
        };
        for id in 1..=size {
            let index = 2 * (id as usize - 1);
            let founding = ["--initial-cluster".to_string(), initial_cluster.clone()];
            cluster.add_member_process(id, addresses[index], addresses[index + 1], &founding);
        }
        for member in cluster.members.values_mut() {
            member.spawn();
        }
        cluster
    }

    /// Registers (without starting) a member process with the common flags plus `own_flags`.
    fn add_member_process(
        &mut self,
        id: u64,
        client_address: SocketAddr,
        peer_address: SocketAddr,
        own_flags: &[String],
    ) {
        let data_dir = self.directory.path().join(format!("member-{id}"));
        let log_path = self.directory.path().join(format!("member-{id}.log"));
        let mut arguments: Vec<String> = [
            "--id",
            &id.to_string(),
            "--data-dir",
            &data_dir.display().to_string(),
            "--listen-client",
            &client_address.to_string(),
            "--listen-peer",
            &peer_address.to_string(),
            "--heartbeat-ms",
            "50",
            "--election-timeout-ms",
            "300",
            "--request-timeout-ms",
            &self.options.request_timeout_ms.to_string(),
        ]
        .iter()
        .map(|text| text.to_string())
        .collect();
        arguments.extend(self.options.extra_flags.iter().cloned());
        arguments.extend(own_flags.iter().cloned());
        let member = MemberProcess {
            id,
            client_address,
            peer_address,
            data_dir,
            log_path,
            arguments,
            environment: self.options.environment.clone(),
            child: None,
        };
        assert!(
            self.members.insert(id, member).is_none(),
            "member {id} twice"
        );
    }

    /// Waits until every running member answers `/readyz` 200; `Err` with the reason if a member
    /// exits or the deadline passes.
    async fn wait_until_all_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let ids = self.running_ids();
        loop {
            for id in &ids {
                let member = self.members.get_mut(id).expect("a member");
                if let Some(status) = member.exited() {
                    member.child = None;
                    return Err(format!(
                        "member {id} exited with {status}: {}",
                        member.log_tail()
                    ));
                }
            }
            let mut all_ready = true;
            for id in &ids {
                all_ready &= self.client(*id).is_ready().await;
            }
            if all_ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "not every member was ready within {STARTUP_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Founding members bootstrap with a membership that holds only peer URLs, and then each
    /// publishes its client URL with a membership change of its own. Waits until every member lists
    /// every member's client URL: the membership has settled (a test's own membership change
    /// meanwhile could be refused as in progress).
    pub async fn wait_for_published_client_urls(&self) {
        let clients: Vec<MemberClient> = self.ids().iter().map(|id| self.client(*id)).collect();
        let expected: BTreeMap<u64, String> = self
            .members
            .values()
            .map(|member| (member.id, member.client_url()))
            .collect();
        let what = format!("every member to list the client URLs {expected:?}");
        wait_until(what, STARTUP_TIMEOUT, async || {
            for client in &clients {
                let answer = client
                    .try_send(Method::GET, "/v1/members", None, &[])
                    .await
                    .ok()?;
                let listed: BTreeMap<u64, String> = answer.json["members"]
                    .as_array()?
                    .iter()
                    .filter_map(|member| {
                        let url = member["client_url"].as_str()?.to_string();
                        Some((member["id"].as_u64()?, url))
                    })
                    .collect();
                if listed != expected {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    pub fn member(&self, id: u64) -> &MemberProcess {
        self.members
            .get(&id)
            .unwrap_or_else(|| panic!("no member {id}"))
    }

    /// An HTTP client for member `id`.
    pub fn client(&self, id: u64) -> MemberClient {
        MemberClient::new(id, self.member(id).client_url())
    }

    /// Every member id, running or not.
    /// Every member's client URL, in id order (the endpoints a client is given).
    pub fn client_urls(&self) -> Vec<String> {
        self.ids()
            .iter()
            .map(|id| self.member(*id).client_url())
            .collect()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    pub fn running_ids(&self) -> Vec<u64> {
        self.members
            .values()
            .filter(|member| member.is_running())
            .map(|member| member.id)
            .collect()
    }

    /// SIGKILL member `id` (no chance to flush or say goodbye).
    pub fn kill(&mut self, id: u64) {
        self.members
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no member {id}"))
            .kill();
    }

    /// Stops member `id` gracefully (SIGTERM) and waits until it has exited.
    pub fn stop(&mut self, id: u64) {
        self.members
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no member {id}"))
            .terminate();
    }

    /// Freezes member `id` (SIGSTOP): its sockets stay open but it answers nothing.
    pub fn pause(&self, id: u64) {
        self.member(id).signal("STOP");
    }

    /// Lets a paused member run again (SIGCONT).
    pub fn resume(&self, id: u64) {
        self.member(id).signal("CONT");
    }

    /// Starts a killed member again on its data directory, ports, flags and environment, and waits
    /// until it answers HTTP.
    pub async fn restart(&mut self, id: u64) {
        self.members
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no member {id}"))
            .spawn();
        self.wait_until_up(id).await;
    }

    /// Starts a new, empty member with `--join` (it waits to be added as a learner) and waits until
    /// it answers HTTP.
    pub async fn start_joining_member(&mut self, id: u64) -> &MemberProcess {
        let addresses = free_addresses(2);
        self.add_member_process(id, addresses[0], addresses[1], &["--join".to_string()]);
        self.members.get_mut(&id).expect("just added").spawn();
        self.wait_until_up(id).await;
        self.member(id)
    }

    async fn wait_until_up(&mut self, id: u64) {
        let client = self.client(id);
        let what = format!("member {id} to answer /healthz");
        let members = &mut self.members;
        wait_until(what, STARTUP_TIMEOUT, async || {
            let member = members.get_mut(&id).expect("a member");
            if let Some(status) = member.exited() {
                panic!("member {id} exited with {status}: {}", member.log_tail());
            }
            client.is_up().await.then_some(())
        })
        .await;
    }

    /// Waits until every member in `among` reports the same leader, which is one of `among`, and
    /// returns its id.
    pub async fn wait_for_leader(&self, among: &[u64]) -> u64 {
        let clients: Vec<MemberClient> = among.iter().map(|id| self.client(*id)).collect();
        let what = format!("members {among:?} to agree on a leader among themselves");
        wait_until(what, CONVERGENCE_TIMEOUT, async || {
            let mut leaders = Vec::new();
            for client in &clients {
                leaders.push(client.status().await?["leader_id"].as_u64()?);
            }
            let leader = leaders[0];
            let agreed = leaders.iter().all(|other| *other == leader) && among.contains(&leader);
            agreed.then_some(leader)
        })
        .await
    }

    /// The current leader as the running members agree on it.
    pub async fn leader(&self) -> u64 {
        self.wait_for_leader(&self.running_ids()).await
    }

    /// Waits until every member in `among` has applied the same log index and store revision, at
    /// least `minimum_revision`, and returns that revision. Call it when no writes are in flight.
    pub async fn wait_for_same_revision(&self, among: &[u64], minimum_revision: u64) -> u64 {
        let clients: Vec<MemberClient> = among.iter().map(|id| self.client(*id)).collect();
        let what = format!(
            "members {among:?} to apply the same log index and revision (>= {minimum_revision})"
        );
        wait_until(what, CONVERGENCE_TIMEOUT, async || {
            let mut positions = Vec::new();
            for client in &clients {
                let status = client.status().await?;
                positions.push((
                    status["applied_index"].as_u64()?,
                    status["revision"].as_u64()?,
                ));
            }
            let (index, revision) = positions[0];
            let same = positions
                .iter()
                .all(|position| *position == (index, revision));
            (same && revision >= minimum_revision).then_some(revision)
        })
        .await
    }

    /// Asserts that every member in `among` answers the same `/v1/hash?revision=R`, and returns it.
    pub async fn assert_same_hash(&self, among: &[u64], revision: u64) -> u64 {
        let mut hashes = BTreeMap::new();
        for id in among {
            hashes.insert(*id, self.client(*id).hash_at(revision).await);
        }
        let first = *hashes.values().next().expect("at least one member");
        assert!(
            hashes.values().all(|hash| *hash == first),
            "(hash, revision, compact_revision) at revision {revision} differ: {hashes:?}"
        );
        first.0
    }

    /// The full log text of member `id`.
    pub fn log_text(&self, id: u64) -> String {
        self.member(id).log_text()
    }

    fn print_log_tails(&self) {
        for member in self.members.values() {
            eprintln!(
                "----- last {LOG_TAIL_LINES} log lines of member {} ({}) -----\n{}",
                member.id,
                member.log_path.display(),
                member.log_tail()
            );
        }
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for member in self.members.values_mut() {
            member.kill();
        }
        if std::thread::panicking() {
            self.print_log_tails();
        }
    }
}
