//! The cluster under test: three (or more) `revkv serve` processes on this machine, each behind
//! a link proxy, that the nemesis can kill, restart, pause and resume.
//!
//! Every member gets free loopback ports, a data directory and a log file under the run's
//! directory, fast raft timing, and `--peer-source-address 127.0.0.<10 + id>` so the proxies can
//! tell whose traffic they carry. A restarted member reuses its ports, data and flags. Dropping
//! [`Members`] kills every process it started, so none outlives the run.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::proxy::{source_address_of, LinkProxy, LinkRules};

/// Raft timing for the run: short, so that faults cause elections within a second.
const HEARTBEAT_MS: u64 = 50;
const ELECTION_TIMEOUT_MS: u64 = 300;
/// How long a member may take to answer a write or a linearizable read before answering 504.
pub const MEMBER_REQUEST_TIMEOUT_MS: u64 = 2_000;
/// How long a cluster (or a restarted member) may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// One member process and what it takes to start it again as the same member.
struct MemberProcess {
    client_address: SocketAddr,
    proxy: LinkProxy,
    log_path: PathBuf,
    arguments: Vec<String>,
    child: Option<Child>,
    paused: bool,
}

/// The members' client URLs by id, shared with the workload and the watchers, which re-read it
/// so that traffic follows a membership change.
pub type SharedEndpoints = Arc<RwLock<Vec<(u64, String)>>>;

/// The running cluster.
pub struct Members {
    binary: PathBuf,
    directory: PathBuf,
    members: BTreeMap<u64, MemberProcess>,
    endpoints: SharedEndpoints,
    rules: LinkRules,
    seed: u64,
    /// The highest member id ever used: ids are never reused, not even after a removal.
    highest_id: u64,
    http: reqwest::Client,
}

impl Drop for Members {
    fn drop(&mut self) {
        for member in self.members.values_mut() {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Members {
    /// Starts `size` founding members under `directory`, each behind its link proxy, and waits
    /// until all are ready.
    pub async fn start(
        binary: &Path,
        directory: &Path,
        size: u64,
        seed: u64,
    ) -> Result<Members, String> {
        let rules = LinkRules::default();
        let mut peers = BTreeMap::new();
        for id in 1..=size {
            let peer_address = free_address()?;
            let proxy = LinkProxy::start(id, peer_address, rules.clone(), seed)
                .await
                .map_err(|error| format!("start the link proxy of member {id}: {error}"))?;
            peers.insert(id, (peer_address, proxy));
        }
        let initial_cluster = peers
            .iter()
            .map(|(id, (_, proxy))| format!("{id}=http://{}", proxy.address))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = BTreeMap::new();
        for (id, (peer_address, proxy)) in peers {
            let client_address = free_address()?;
            let data_dir = directory.join(format!("member-{id}"));
            let arguments = serve_arguments(id, &data_dir, client_address, peer_address, &proxy)
                .into_iter()
                .chain(["--initial-cluster".to_string(), initial_cluster.clone()])
                .collect();
            let member = MemberProcess {
                client_address,
                proxy,
                log_path: directory.join(format!("member-{id}.log")),
                arguments,
                child: None,
                paused: false,
            };
            members.insert(id, member);
        }
        let mut cluster = Members {
            binary: binary.to_path_buf(),
            directory: directory.to_path_buf(),
            members,
            endpoints: SharedEndpoints::default(),
            rules,
            seed,
            highest_id: size,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .map_err(|error| error.to_string())?,
        };
        for id in cluster.ids() {
            cluster.spawn(id)?;
        }
        for id in cluster.ids() {
            cluster.wait_until_ready(id).await?;
        }
        cluster.publish_endpoints();
        Ok(cluster)
    }

    /// Starts a new, empty member `id` with `--join` (it waits to be added) and waits until it
    /// answers HTTP.
    pub async fn start_joining(&mut self, id: u64) -> Result<(), String> {
        assert!(id > self.highest_id, "member ids are never reused");
        self.highest_id = id;
        let peer_address = free_address()?;
        let proxy = LinkProxy::start(id, peer_address, self.rules.clone(), self.seed)
            .await
            .map_err(|error| format!("start the link proxy of member {id}: {error}"))?;
        let client_address = free_address()?;
        let data_dir = self.directory.join(format!("member-{id}"));
        let mut arguments = serve_arguments(id, &data_dir, client_address, peer_address, &proxy);
        arguments.push("--join".into());
        let member = MemberProcess {
            client_address,
            proxy,
            log_path: self.directory.join(format!("member-{id}.log")),
            arguments,
            child: None,
            paused: false,
        };
        self.members.insert(id, member);
        self.spawn(id)?;
        // Not ready until it is added and caught up: only alive.
        self.wait_until_answering(id, "/healthz").await
    }

    /// Kills member `id` and forgets it (after it was removed from the cluster); its data stays
    /// on disk for whoever looks into a failed run.
    pub fn forget(&mut self, id: u64) {
        self.kill(id);
        self.members.remove(&id);
        self.publish_endpoints();
    }

    /// Makes the current members' client URLs the ones the workload and watchers use.
    pub fn publish_endpoints(&self) {
        let endpoints = self.client_urls().into_iter().collect();
        *self.endpoints.write().expect("endpoints lock") = endpoints;
    }

    /// The client URLs the workload and watchers follow.
    pub fn shared_endpoints(&self) -> SharedEndpoints {
        self.endpoints.clone()
    }

    /// The next member id never used in this cluster.
    pub fn next_id(&self) -> u64 {
        self.highest_id + 1
    }

    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    pub fn client_url(&self, id: u64) -> String {
        format!("http://{}", self.members[&id].client_address)
    }

    pub fn client_urls(&self) -> BTreeMap<u64, String> {
        self.ids()
            .into_iter()
            .map(|id| (id, self.client_url(id)))
            .collect()
    }

    /// The rules of the links between the members.
    pub fn link_rules(&self) -> &LinkRules {
        &self.rules
    }

    /// The address other members reach member `id` at (its proxy).
    pub fn proxy_address(&self, id: u64) -> SocketAddr {
        self.members[&id].proxy.address
    }

    /// Whether member `id` runs and is not paused.
    pub fn is_serving(&self, id: u64) -> bool {
        let member = &self.members[&id];
        member.child.is_some() && !member.paused
    }

    fn spawn(&mut self, id: u64) -> Result<(), String> {
        let binary = self.binary.clone();
        let member = self.members.get_mut(&id).expect("a known member");
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&member.log_path)
            .map_err(|error| format!("open {}: {error}", member.log_path.display()))?;
        let _ = writeln!(log, "==== chaos harness: starting member {id} ====");
        let stderr = log.try_clone().map_err(|error| error.to_string())?;
        let child = Command::new(&binary)
            .arg("serve")
            .args(&member.arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .env("NO_COLOR", "1")
            .spawn()
            .map_err(|error| format!("spawn {}: {error}", binary.display()))?;
        member.child = Some(child);
        member.paused = false;
        Ok(())
    }

    /// SIGKILL: the member dies mid-whatever, with no chance to flush.
    pub fn kill(&mut self, id: u64) {
        let member = self.members.get_mut(&id).expect("a known member");
        if let Some(mut child) = member.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        member.paused = false;
    }

    /// Starts a killed member again on its data, and waits until it is ready.
    pub async fn restart(&mut self, id: u64) -> Result<(), String> {
        if self.members[&id].child.is_none() {
            self.spawn(id)?;
        }
        self.wait_until_ready(id).await
    }

    /// SIGSTOP: the member freezes with its connections open.
    pub fn pause(&mut self, id: u64) {
        self.signal(id, "STOP");
        if let Some(member) = self.members.get_mut(&id) {
            member.paused = member.child.is_some();
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, "CONT");
        if let Some(member) = self.members.get_mut(&id) {
            member.paused = false;
        }
    }

    fn signal(&self, id: u64, signal: &str) {
        if let Some(child) = &self.members[&id].child {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Waits until member `id` answers `/readyz` (it has a leader and has caught up).
    pub async fn wait_until_ready(&mut self, id: u64) -> Result<(), String> {
        self.wait_until_answering(id, "/readyz").await
    }

    /// Polls `path` on member `id` until it answers 200; `Err` if the process exits or
    /// `READY_TIMEOUT` passes first.
    async fn wait_until_answering(&mut self, id: u64, path: &str) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = format!("{}{path}", self.client_url(id));
        loop {
            let member = self.members.get_mut(&id).expect("a known member");
            if let Some(Ok(Some(status))) = member.child.as_mut().map(Child::try_wait) {
                member.child = None;
                return Err(format!(
                    "member {id} exited with {status}; see {}",
                    member.log_path.display()
                ));
            }
            let answer = self.http.get(&url).send().await;
            if matches!(&answer, Ok(answer) if answer.status().is_success()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "member {id} did not answer {path} within {READY_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The leader as the first serving member that knows one says.
    pub async fn leader(&self) -> Option<u64> {
        for id in self.ids() {
            if !self.is_serving(id) {
                continue;
            }
            let url = format!("{}/v1/status", self.client_url(id));
            let Ok(answer) = self.http.get(&url).send().await else {
                continue;
            };
            let Ok(status) = answer.json::<serde_json::Value>().await else {
                continue;
            };
            // A member that lags may still name a member the harness has removed.
            match status["leader_id"].as_u64() {
                Some(leader) if self.members.contains_key(&leader) => return Some(leader),
                _ => {}
            }
        }
        None
    }

    /// The tail of every member's log, for a report about a failed run.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut text = String::new();
        for (id, member) in &self.members {
            let log = std::fs::read_to_string(&member.log_path).unwrap_or_default();
            let all: Vec<&str> = log.lines().collect();
            text.push_str(&format!(
                "---- member {id} ({}) ----\n",
                member.log_path.display()
            ));
            text.push_str(&all[all.len().saturating_sub(lines)..].join("\n"));
            text.push('\n');
        }
        text
    }
}

/// The `revkv serve` flags of member `id`.
fn serve_arguments(
    id: u64,
    data_dir: &Path,
    client_address: SocketAddr,
    peer_address: SocketAddr,
    proxy: &LinkProxy,
) -> Vec<String> {
    [
        "--id".to_string(),
        id.to_string(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--listen-client".into(),
        client_address.to_string(),
        "--listen-peer".into(),
        peer_address.to_string(),
        "--advertise-peer".into(),
        format!("http://{}", proxy.address),
        "--peer-source-address".into(),
        source_address_of(id).to_string(),
        "--heartbeat-ms".into(),
        HEARTBEAT_MS.to_string(),
        "--election-timeout-ms".into(),
        ELECTION_TIMEOUT_MS.to_string(),
        "--request-timeout-ms".into(),
        MEMBER_REQUEST_TIMEOUT_MS.to_string(),
        // Snapshots every few hundred entries, so a member that was down catches up by snapshot
        // as well as by log.
        "--snapshot-entries".into(),
        "500".into(),
        "--snapshot-keep-entries".into(),
        "100".into(),
    ]
    .to_vec()
}

/// A free loopback address: bound at port 0, then released for the member to bind.
fn free_address() -> Result<SocketAddr, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|error| error.to_string())?;
    listener.local_addr().map_err(|error| error.to_string())
}
