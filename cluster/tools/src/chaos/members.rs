//! The cluster under test: three (or more) `revkv serve` processes on this machine, each behind
//! a link proxy, that the nemesis can kill, restart, pause and resume.
//!
//! Every member gets free loopback ports, a data directory and a log file under the run's
//! directory, fast raft timing, and `--peer-source-address 127.0.0.<10 + id>` so the proxies can
//! tell whose traffic they carry. A restarted member reuses its ports, data and flags. Dropping
//! [`Members`] kills every process it started, so none outlives the run.
//!
//! The processes themselves are the shared harness's [`MemberProcess`]es (the end-to-end tests
//! run the same ones); this file adds the link proxies, the shared endpoints and readiness checks
//! that report errors instead of failing a test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::proxy::{source_address_of, LinkProxy, LinkRules};
use crate::harness::{fast_serve_flags, free_addresses, poll_until, MemberLaunch, MemberProcess};

/// How long a member may take to answer a write or a linearizable read before answering 504.
pub const MEMBER_REQUEST_TIMEOUT_MS: u64 = 2_000;
/// How long a cluster (or a restarted member) may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One member process and the link proxy other members reach it through.
struct ProxiedMember {
    process: MemberProcess,
    proxy: LinkProxy,
}

/// The members' client URLs by id, shared with the workload and the watchers, which re-read it
/// so that traffic follows a membership change.
pub type SharedEndpoints = Arc<RwLock<Vec<(u64, String)>>>;

/// The running cluster.
pub struct Members {
    binary: PathBuf,
    directory: PathBuf,
    members: BTreeMap<u64, ProxiedMember>,
    endpoints: SharedEndpoints,
    rules: LinkRules,
    seed: u64,
    /// The highest member id ever used: ids are never reused, not even after a removal.
    highest_id: u64,
    http: reqwest::Client,
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
        let mut cluster = Members {
            binary: binary.to_path_buf(),
            directory: directory.to_path_buf(),
            members: BTreeMap::new(),
            endpoints: SharedEndpoints::default(),
            rules,
            seed,
            highest_id: size,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .map_err(|error| error.to_string())?,
        };
        let mut proxied = BTreeMap::new();
        for id in 1..=size {
            proxied.insert(id, cluster.start_proxy(id).await?);
        }
        let initial_cluster = proxied
            .iter()
            .map(|(id, (_, proxy))| format!("{id}=http://{}", proxy.address))
            .collect::<Vec<_>>()
            .join(",");
        for (id, (peer_address, proxy)) in proxied {
            let founding = ["--initial-cluster".to_string(), initial_cluster.clone()];
            cluster.add_member(id, peer_address, proxy, &founding)?;
        }
        for id in cluster.ids() {
            cluster.member_mut(id).spawn()?;
        }
        for id in cluster.ids() {
            cluster.wait_until_ready(id).await?;
        }
        cluster.publish_endpoints();
        Ok(cluster)
    }

    /// A free peer address for member `id` and the link proxy in front of it.
    async fn start_proxy(&self, id: u64) -> Result<(SocketAddr, LinkProxy), String> {
        let peer_address = free_addresses(1)?[0];
        let proxy = LinkProxy::start(id, peer_address, self.rules.clone(), self.seed)
            .await
            .map_err(|error| format!("start the link proxy of member {id}: {error}"))?;
        Ok((peer_address, proxy))
    }

    /// Registers (without starting) member `id` behind `proxy`, with the harness's fast flags,
    /// the chaos run's own, and `own_flags`.
    fn add_member(
        &mut self,
        id: u64,
        peer_address: SocketAddr,
        proxy: LinkProxy,
        own_flags: &[String],
    ) -> Result<(), String> {
        let client_address = free_addresses(1)?[0];
        let data_dir = self.directory.join(format!("member-{id}"));
        let mut arguments = fast_serve_flags(
            id,
            &data_dir,
            client_address,
            peer_address,
            MEMBER_REQUEST_TIMEOUT_MS,
        );
        arguments.extend(chaos_serve_flags(id, &proxy));
        arguments.extend(own_flags.iter().cloned());
        let process = MemberProcess::new(MemberLaunch {
            id,
            binary: self.binary.clone(),
            client_address,
            peer_address,
            data_dir,
            log_path: self.directory.join(format!("member-{id}.log")),
            arguments,
            environment: Vec::new(),
            https: false,
        });
        self.members.insert(id, ProxiedMember { process, proxy });
        Ok(())
    }

    /// Starts a new, empty member `id` with `--join` (it waits to be added) and waits until it
    /// answers HTTP.
    pub async fn start_joining(&mut self, id: u64) -> Result<(), String> {
        assert!(id > self.highest_id, "member ids are never reused");
        self.highest_id = id;
        let (peer_address, proxy) = self.start_proxy(id).await?;
        self.add_member(id, peer_address, proxy, &["--join".to_string()])?;
        self.member_mut(id).spawn()?;
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
        self.members[&id].process.client_url()
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
        self.members[&id].process.is_serving()
    }

    fn member_mut(&mut self, id: u64) -> &mut MemberProcess {
        &mut self.members.get_mut(&id).expect("a known member").process
    }

    /// SIGKILL: the member dies mid-whatever, with no chance to flush.
    pub fn kill(&mut self, id: u64) {
        self.member_mut(id).kill();
    }

    /// Starts a killed member again on its data, and waits until it is ready.
    pub async fn restart(&mut self, id: u64) -> Result<(), String> {
        if !self.member_mut(id).is_running() {
            self.member_mut(id).spawn()?;
        }
        self.wait_until_ready(id).await
    }

    /// SIGSTOP: the member freezes with its connections open. A member that does not run (the
    /// nemesis may pick one it killed) stays as it is.
    pub fn pause(&mut self, id: u64) {
        let _ = self.member_mut(id).pause();
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        let _ = self.member_mut(id).resume();
    }

    /// Waits until member `id` answers `/readyz` (it has a leader and has caught up).
    pub async fn wait_until_ready(&mut self, id: u64) -> Result<(), String> {
        self.wait_until_answering(id, "/readyz").await
    }

    /// Polls `path` on member `id` until it answers 200; `Err` if the process exits or
    /// `READY_TIMEOUT` passes first.
    async fn wait_until_answering(&mut self, id: u64, path: &str) -> Result<(), String> {
        let url = format!("{}{path}", self.client_url(id));
        let http = self.http.clone();
        let member = &mut self.members.get_mut(&id).expect("a known member").process;
        let mut exit = None;
        let what = format!("member {id} to answer {path}");
        let answered = poll_until(what, READY_TIMEOUT, async || {
            if let Some(status) = member.exited() {
                exit = Some(status);
                return Some(false);
            }
            let answer = http.get(&url).send().await;
            matches!(&answer, Ok(answer) if answer.status().is_success()).then_some(true)
        })
        .await?;
        match (answered, exit) {
            (false, Some(status)) => Err(format!(
                "member {id} exited with {status}; see {}",
                member.log_path.display()
            )),
            _ => Ok(()),
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
            let process = &member.process;
            text.push_str(&format!(
                "---- member {id} ({}) ----\n",
                process.log_path.display()
            ));
            text.push_str(&process.log_tail(lines));
            text.push('\n');
        }
        text
    }
}

/// The `revkv serve` flags a chaos member adds to the harness's fast ones: it advertises its
/// proxy, and its outgoing peer connections come from its own loopback address so the proxies can
/// tell whose traffic they carry.
fn chaos_serve_flags(id: u64, proxy: &LinkProxy) -> Vec<String> {
    [
        "--advertise-peer".to_string(),
        format!("http://{}", proxy.address),
        "--peer-source-address".into(),
        source_address_of(id).to_string(),
        // Snapshots every few hundred entries, so a member that was down catches up by snapshot
        // as well as by log.
        "--snapshot-entries".into(),
        "500".into(),
        "--snapshot-keep-entries".into(),
        "100".into(),
    ]
    .to_vec()
}
