//! A cluster of `revkv serve` processes for end-to-end tests: founding members or `--join`
//! members under one temporary directory, killed on drop. Every method fails the test (panics)
//! when the cluster does not do what it should, with the members' log tails printed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::Method;

use super::member::{fast_serve_flags, MemberLaunch, MemberProcess};
use super::member_client::MemberClient;
use super::ports::free_addresses;
use super::waiting::{wait_until, POLL_INTERVAL};
use revkv_client::ClientTls;

/// How long a cluster may take to elect a leader and get every member ready.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A generous bound for anything the cluster should do "soon" (an election, catching up).
pub const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many lines of each member's log a failing test prints.
const LOG_TAIL_LINES: usize = 60;

/// How many times a cluster start is retried when a member could not bind its port (another test
/// may take a released port before the member binds it).
const START_ATTEMPTS: u32 = 3;

/// The binary and the flags every member of a cluster starts with.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The `revkv` binary (a test passes `env!("CARGO_BIN_EXE_revkv")`).
    pub binary: PathBuf,
    /// `--request-timeout-ms`: the longest a member waits for a write, a read barrier or
    /// `min_revision` before answering 504 (also its peer call timeout).
    pub request_timeout_ms: u64,
    /// Further `revkv serve` flags for every member.
    pub extra_flags: Vec<String>,
    /// Environment variables for every member (for example a more verbose `RUST_LOG`).
    pub environment: Vec<(String, String)>,
    /// TLS on every member's client and peer listeners (`None`: plain HTTP).
    pub tls: Option<ClusterTls>,
    /// Data directories of members that do not keep theirs in the cluster's temporary directory
    /// (a test that puts one member on a small filesystem of its own).
    pub data_dirs: BTreeMap<u64, PathBuf>,
    /// Give every founding member etcd's gRPC API on a free port of its own (`--listen-grpc`).
    pub grpc: bool,
}

/// TLS for a cluster's members: each serves clients and peers with the same certificate (it names
/// 127.0.0.1, where every member listens) and checks peers against the same CA, with mutual TLS.
#[derive(Clone, Debug)]
pub struct ClusterTls {
    /// The CA (PEM) that signed the certificate.
    pub ca_file: PathBuf,
    /// The members' certificate and key (PEM), valid for server and client authentication. The
    /// harness's own clients present it too.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Start members with `--client-cert-auth` (clients must present a certificate of the CA).
    pub client_cert_auth: bool,
}

impl ClusterTls {
    /// The `revkv serve` flags for these files: client TLS, and mutual TLS between peers.
    pub fn serve_flags(&self) -> Vec<String> {
        let path = |path: &PathBuf| path.display().to_string();
        let mut flags = vec![
            "--cert-file".to_string(),
            path(&self.cert_file),
            "--key-file".into(),
            path(&self.key_file),
            "--peer-cert-file".into(),
            path(&self.cert_file),
            "--peer-key-file".into(),
            path(&self.key_file),
            "--peer-trusted-ca-file".into(),
            path(&self.ca_file),
            "--peer-client-cert-auth".into(),
        ];
        if self.client_cert_auth {
            flags.extend([
                "--trusted-ca-file".into(),
                path(&self.ca_file),
                "--client-cert-auth".into(),
            ]);
        }
        flags
    }

    /// What the harness's clients use: the CA, and the certificate as a client certificate.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca_file: Some(self.ca_file.clone()),
            cert_file: Some(self.cert_file.clone()),
            key_file: Some(self.key_file.clone()),
        }
    }
}

impl ClusterOptions {
    /// Members of `binary` with a 5-second request timeout and no further flags.
    pub fn for_binary(binary: impl Into<PathBuf>) -> Self {
        ClusterOptions {
            binary: binary.into(),
            request_timeout_ms: 5000,
            extra_flags: Vec::new(),
            environment: Vec::new(),
            tls: None,
            data_dirs: BTreeMap::new(),
            grpc: false,
        }
    }

    /// Member `id` keeps its data in `data_dir` instead of the cluster's temporary directory.
    pub fn with_data_dir(mut self, id: u64, data_dir: impl Into<PathBuf>) -> Self {
        self.data_dirs.insert(id, data_dir.into());
        self
    }

    /// Founding members also serve etcd's gRPC API (`ProcessCluster::grpc_endpoints`).
    pub fn with_grpc(mut self) -> Self {
        self.grpc = true;
        self
    }

    /// Members with TLS on both listeners.
    pub fn with_tls(mut self, tls: ClusterTls) -> Self {
        self.tls = Some(tls);
        self
    }

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

/// A cluster of `revkv serve` processes. Dropping it kills every process.
pub struct ProcessCluster {
    members: BTreeMap<u64, MemberProcess>,
    /// The TLS of members started with other files than the cluster's (see
    /// [`ProcessCluster::start_joining_member_with_tls`]).
    member_tls: BTreeMap<u64, ClusterTls>,
    /// The gRPC listener of each member that has one.
    grpc_addresses: BTreeMap<u64, SocketAddr>,
    options: ClusterOptions,
    // Dropped after `members` (fields drop in order), so logs are read before the files go.
    directory: tempfile::TempDir,
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

    /// Starts members `1..=size` as one cluster on data directories that `prepare` fills first
    /// (called once per member with its id, its data directory, which does not exist yet, and the
    /// cluster's `--initial-cluster`): for members restored from a backup. Waits as `start` does.
    pub async fn start_prepared(
        size: u64,
        options: ClusterOptions,
        mut prepare: impl FnMut(u64, &std::path::Path, &str),
    ) -> ProcessCluster {
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = ProcessCluster::register_founders(size, options.clone());
            let initial_cluster = cluster.initial_cluster_flag();
            for (id, member) in &cluster.members {
                prepare(*id, &member.data_dir, &initial_cluster);
            }
            for member in cluster.members.values_mut() {
                member.spawn().expect("start a member process");
            }
            match cluster.wait_until_all_ready().await {
                Ok(()) => return cluster,
                Err(problem) if attempt < START_ATTEMPTS && problem.contains("cannot listen") => {
                    eprintln!("cluster start attempt {attempt} lost a port race; retrying");
                }
                Err(problem) => panic!("the cluster did not start: {problem}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Registers members `1..=size` of one new cluster but starts only `started_now`; the others
    /// start later with [`restart`](Self::restart). For tests of founding members started late.
    /// Nothing is waited for: a founder without a quorum answers HTTP only once it has one (it
    /// first waits to recover what its cluster committed), so such a test follows its log.
    pub fn spawn_some_founders(
        size: u64,
        options: ClusterOptions,
        started_now: &[u64],
    ) -> ProcessCluster {
        let mut cluster = ProcessCluster::register_founders(size, options);
        for id in started_now {
            cluster
                .member_mut(*id)
                .spawn()
                .expect("start a member process");
        }
        cluster
    }

    /// The `--initial-cluster` value every founder was given.
    fn initial_cluster_flag(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        self.members
            .values()
            .map(|member| format!("{}={scheme}://{}", member.id, member.peer_address))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A cluster with no members yet, for tests that start only `--join` members.
    pub fn without_members(options: ClusterOptions) -> ProcessCluster {
        ProcessCluster {
            members: BTreeMap::new(),
            member_tls: BTreeMap::new(),
            grpc_addresses: BTreeMap::new(),
            options,
            directory: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn spawn_founders(size: u64, options: ClusterOptions) -> ProcessCluster {
        let mut cluster = ProcessCluster::register_founders(size, options);
        for member in cluster.members.values_mut() {
            member.spawn().expect("start a member process");
        }
        cluster
    }

    /// Registers (without starting) members `1..=size` of one new cluster.
    fn register_founders(size: u64, options: ClusterOptions) -> ProcessCluster {
        let directory = tempfile::tempdir().expect("a temporary directory");
        // Client and peer ports, and a gRPC port when asked for, per member.
        let per_member = if options.grpc { 3 } else { 2 };
        let addresses = free_addresses(per_member * size as usize).expect("free loopback ports");
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let initial_cluster = (1..=size)
            .map(|id| {
                format!(
                    "{id}={scheme}://{}",
                    addresses[per_member * (id as usize - 1) + 1]
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = ProcessCluster {
            members: BTreeMap::new(),
            member_tls: BTreeMap::new(),
            grpc_addresses: BTreeMap::new(),
            options,
            directory,
        };
        for id in 1..=size {
            let index = per_member * (id as usize - 1);
            let mut founding = vec!["--initial-cluster".to_string(), initial_cluster.clone()];
            if cluster.options.grpc {
                let grpc = addresses[index + 2];
                founding.extend(["--listen-grpc".to_string(), grpc.to_string()]);
                cluster.grpc_addresses.insert(id, grpc);
            }
            let addresses = (addresses[index], addresses[index + 1]);
            cluster.add_member_process(id, addresses, &founding, None);
        }
        cluster
    }

    /// Registers (without starting) a member process with the common flags plus `own_flags`, and
    /// the cluster's TLS unless `own_tls` replaces it.
    fn add_member_process(
        &mut self,
        id: u64,
        (client_address, peer_address): (SocketAddr, SocketAddr),
        own_flags: &[String],
        own_tls: Option<ClusterTls>,
    ) {
        let data_dir = match self.options.data_dirs.get(&id) {
            Some(data_dir) => data_dir.clone(),
            None => self.directory.path().join(format!("member-{id}")),
        };
        let log_path = self.directory.path().join(format!("member-{id}.log"));
        let mut arguments = fast_serve_flags(
            id,
            &data_dir,
            client_address,
            peer_address,
            self.options.request_timeout_ms,
        );
        arguments.extend(self.options.extra_flags.iter().cloned());
        arguments.extend(own_flags.iter().cloned());
        if let Some(tls) = &own_tls {
            self.member_tls.insert(id, tls.clone());
        }
        let tls = own_tls.as_ref().or(self.options.tls.as_ref());
        if let Some(tls) = tls {
            arguments.extend(tls.serve_flags());
        }
        let https = tls.is_some();
        let member = MemberProcess::new(MemberLaunch {
            id,
            binary: self.options.binary.clone(),
            client_address,
            peer_address,
            data_dir,
            log_path,
            arguments,
            environment: self.options.environment.clone(),
            https,
        });
        assert!(
            self.members.insert(id, member).is_none(),
            "member {id} twice"
        );
    }

    /// Waits until every running member answers `/readyz` 200; `Err` with the reason if a member
    /// exits or the deadline passes.
    async fn wait_until_all_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        // Every founder, not only the running ones: a member that lost a port race may already
        // have exited, and it must be seen (and the start retried) rather than waited for.
        let ids = self.ids();
        loop {
            for id in &ids {
                let member = self.members.get_mut(id).expect("a member");
                if let Some(status) = member.exited() {
                    return Err(format!(
                        "member {id} exited with {status}: {}",
                        member.log_tail(LOG_TAIL_LINES)
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
    /// publishes its client URLs (HTTP, and gRPC if it serves it) with a membership change of its
    /// own. Waits until every member lists every member's client URLs: the membership has settled
    /// (a test's own membership change meanwhile could be refused as in progress).
    pub async fn wait_for_published_client_urls(&self) {
        let clients: Vec<MemberClient> = self.ids().iter().map(|id| self.client(*id)).collect();
        let expected: BTreeMap<u64, (String, Option<String>)> = self
            .members
            .values()
            .map(|member| {
                // The gRPC listener uses the client listener's TLS, so its scheme too.
                let client_url = member.client_url();
                let scheme = client_url.split("://").next().unwrap_or("http").to_string();
                let grpc_url = self
                    .grpc_addresses
                    .get(&member.id)
                    .map(|address| format!("{scheme}://{address}"));
                (member.id, (client_url, grpc_url))
            })
            .collect();
        let what = format!("every member to list the client URLs {expected:?}");
        wait_until(what, STARTUP_TIMEOUT, async || {
            for client in &clients {
                let answer = client
                    .try_send(Method::GET, "/v1/members", None, &[])
                    .await
                    .ok()?;
                let listed: BTreeMap<u64, (String, Option<String>)> = answer.json["members"]
                    .as_array()?
                    .iter()
                    .filter_map(|member| {
                        let url = member["client_url"].as_str()?.to_string();
                        let grpc_url = member["grpc_url"].as_str().map(str::to_string);
                        Some((member["id"].as_u64()?, (url, grpc_url)))
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

    /// An HTTP client for member `id` (trusting its CA and presenting its certificate when it has
    /// TLS).
    pub fn client(&self, id: u64) -> MemberClient {
        let tls = self
            .member_tls
            .get(&id)
            .or(self.options.tls.as_ref())
            .map(ClusterTls::client_tls)
            .unwrap_or_default();
        MemberClient::with_tls(id, self.member(id).client_url(), &tls)
    }

    /// Every gRPC endpoint (`127.0.0.1:port`, as etcdctl's `--endpoints` takes it), in id order;
    /// empty unless the cluster was started `with_grpc`.
    pub fn grpc_endpoints(&self) -> Vec<String> {
        self.grpc_addresses
            .values()
            .map(|address| address.to_string())
            .collect()
    }

    /// Every member's client URL, in id order (the endpoints a client is given).
    pub fn client_urls(&self) -> Vec<String> {
        self.ids()
            .iter()
            .map(|id| self.member(*id).client_url())
            .collect()
    }

    /// Every member id, running or not.
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
        let status = self.member_mut(id).terminate().expect("stop a member");
        assert!(status.success(), "member {id} stopped with {status}");
    }

    /// Makes stopped member `id` listen for peers at a new free loopback port when it is next
    /// restarted, and answers its new peer URL.
    pub fn move_peer_listener(&mut self, id: u64) -> String {
        let address = free_addresses(1).expect("a free loopback port")[0];
        let member = self.member_mut(id);
        member
            .move_peer_listener(address)
            .expect("move a stopped member");
        member.peer_url()
    }

    /// Freezes member `id` (SIGSTOP): its sockets stay open but it answers nothing.
    pub fn pause(&mut self, id: u64) {
        self.member_mut(id).pause().expect("pause a member");
    }

    /// Lets a paused member run again (SIGCONT).
    pub fn resume(&mut self, id: u64) {
        self.member_mut(id).resume().expect("resume a member");
    }

    /// The exit status of member `id` if it has ended by itself (it then counts as not running).
    pub fn exited(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        self.member_mut(id).exited()
    }

    fn member_mut(&mut self, id: u64) -> &mut MemberProcess {
        self.members
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no member {id}"))
    }

    /// Starts a killed member again (or a founder not started yet, see
    /// [`spawn_some_founders`](Self::spawn_some_founders)) on its data directory, ports, flags
    /// and environment, and waits until it answers HTTP.
    pub async fn restart(&mut self, id: u64) {
        self.members
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no member {id}"))
            .spawn()
            .expect("restart a member process");
        self.wait_until_up(id).await;
    }

    /// Starts a new, empty member with `--join` (it waits to be added as a learner) and waits until
    /// it answers HTTP.
    pub async fn start_joining_member(&mut self, id: u64) -> &MemberProcess {
        self.start_joining(id, None).await
    }

    /// [`start_joining_member`](Self::start_joining_member) with its own TLS files instead of
    /// the cluster's (for example a certificate from another CA).
    pub async fn start_joining_member_with_tls(
        &mut self,
        id: u64,
        tls: ClusterTls,
    ) -> &MemberProcess {
        self.start_joining(id, Some(tls)).await
    }

    async fn start_joining(&mut self, id: u64, tls: Option<ClusterTls>) -> &MemberProcess {
        let addresses = free_addresses(2).expect("free loopback ports");
        let addresses = (addresses[0], addresses[1]);
        self.add_member_process(id, addresses, &["--join".to_string()], tls);
        self.members
            .get_mut(&id)
            .expect("just added")
            .spawn()
            .expect("start a member process");
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
                panic!(
                    "member {id} exited with {status}: {}",
                    member.log_tail(LOG_TAIL_LINES)
                );
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
                member.log_tail(LOG_TAIL_LINES)
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
