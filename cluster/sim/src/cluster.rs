//! The members of one run: real `Node`s (raft, store, watch hub, background tasks, exactly what
//! `revkv serve` runs) on the simulated network, their files in the run's own directory. A
//! member can be stopped and started again on the same files, as an operator restarts one. New
//! members start empty and wait to be added (`revkv serve --join`), and a member removed from
//! the cluster is retired: stopped, and never counted again.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::RngExt;
use revkv_node::{KvBackend, MemberBackend, Node, NodeConfig, NodeError};
use revkv_raft::clock::{on_member_clock, MemberClock, OnMemberClock};
use revkv_raft::peer::simulated::PeerNetwork;
use revkv_raft::{MemberDisks, MemberNode};
use revkv_storage::{CrashLoss, DiskOperation};

use crate::history::ClockJump;
use crate::network::Network;
use crate::trace::Trace;

/// The members of a run, running or stopped.
pub struct Cluster {
    /// The members the run counts: the founders and every member that joined, less the retired.
    configs: Mutex<BTreeMap<u64, NodeConfig>>,
    /// The id the next joining member takes.
    next_id: Mutex<u64>,
    directory: PathBuf,
    network: Arc<Network>,
    running: Mutex<BTreeMap<u64, Arc<Node>>>,
    /// The operations of each stopped member's last run, until whoever still held them (a
    /// client's request, a watcher) lets go.
    stopped: Mutex<BTreeMap<u64, Weak<MemberBackend>>>,
    /// Every jump ahead a member's clock took, for the lease check.
    clock_jumps: Mutex<Vec<ClockJump>>,
    /// The members added as learners that promote themselves once caught up, for the check that
    /// each one still in the cluster at the end is a voter.
    added_to_promote: Mutex<BTreeSet<u64>>,
    trace: Trace,
}

/// How long a restart waits for the stopped run's last holders to let go of its files.
const RELEASE_DEADLINE: Duration = Duration::from_secs(30);

/// Member `id`'s address for `port` on the simulated network; nothing binds it.
fn address(id: u64, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, id as u8], port))
}

/// The client port the members' configs name; there is no client listener.
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;

impl Cluster {
    /// Configures `size` founding members with their files under `directory`.
    pub fn new(size: u64, directory: &Path, network: &Arc<Network>, trace: Trace) -> Self {
        assert!(
            (1..=7).contains(&size),
            "a simulated cluster has 1 to 7 members"
        );
        let initial_cluster: BTreeMap<u64, MemberNode> =
            (1..=size).map(|id| (id, advertised(id))).collect();
        let configs = (1..=size)
            .map(|id| {
                let mut config = member_config(id, directory, network);
                config.member.initial_cluster = initial_cluster.clone();
                (id, config)
            })
            .collect();
        Cluster {
            configs: Mutex::new(configs),
            next_id: Mutex::new(size + 1),
            directory: directory.to_path_buf(),
            network: network.clone(),
            running: Mutex::default(),
            stopped: Mutex::default(),
            clock_jumps: Mutex::default(),
            added_to_promote: Mutex::default(),
            trace,
        }
    }

    /// Changes every configured member's config before it starts (a measurement's settings).
    pub fn configure(&self, change: impl Fn(&mut NodeConfig)) {
        lock(&self.configs).values_mut().for_each(change);
    }

    /// Every member's id, running or stopped, retired ones left out.
    pub fn ids(&self) -> Vec<u64> {
        lock(&self.configs).keys().copied().collect()
    }

    /// Member `id`'s peer URL, by which it is added.
    pub fn peer_url(id: u64) -> String {
        format!("http://{}", address(id, PEER_PORT))
    }

    /// Starts a new, empty member that waits to be added (`revkv serve --join`); answers its id.
    /// It counts as a member from here on, until it is retired.
    pub async fn join(&self) -> Result<u64, NodeError> {
        // A long run may add many members; past the address space it adds no more, and the
        // membership fault records the refusal, rather than stopping the run.
        let id = {
            let mut next_id = lock(&self.next_id);
            if *next_id > MAX_MEMBER_ID {
                return Err(NodeError::Invalid(format!(
                    "a run adds members up to id {MAX_MEMBER_ID} only"
                )));
            }
            *next_id += 1;
            *next_id - 1
        };
        let mut config = member_config(id, &self.directory, &self.network);
        config.member.join = true;
        lock(&self.configs).insert(id, config);
        if let Err(error) = self.start(id).await {
            lock(&self.configs).remove(&id);
            return Err(error);
        }
        Ok(id)
    }

    /// Stops member `id` for good, as an operator does after removing it from the cluster.
    pub async fn retire(&self, id: u64) {
        let stopped = self.stop(id).await;
        lock(&self.configs).remove(&id);
        self.trace
            .record(Some(id), None, format!("member retired ({stopped:?})"));
    }

    /// Records that member `id` is being added to promote itself once caught up.
    pub fn expect_promotion(&self, id: u64) {
        lock(&self.added_to_promote).insert(id);
    }

    /// The members added to promote themselves, in id order.
    pub fn expected_promotions(&self) -> Vec<u64> {
        lock(&self.added_to_promote).iter().copied().collect()
    }

    /// The ids of the members running now.
    pub fn running_ids(&self) -> Vec<u64> {
        lock(&self.running).keys().copied().collect()
    }

    /// Member `id`'s operations, while it runs.
    pub fn backend(&self, id: u64) -> Option<Arc<MemberBackend>> {
        lock(&self.running)
            .get(&id)
            .map(|node| node.backend().clone())
    }

    /// `future`, run as member `id`'s code: on its clock, and so is every task it spawns. The
    /// simulator's clients call a member's operations in their own tasks; this is how those
    /// operations read the member's clock, as they would inside the member's process.
    pub fn on_member<F: Future>(&self, id: u64, future: F) -> OnMemberClock<F> {
        on_member_clock(self.network.clock_of(id), future)
    }

    /// The leader some running member knows of.
    pub async fn leader(&self) -> Option<u64> {
        for id in self.running_ids() {
            let Some(backend) = self.backend(id) else {
                continue;
            };
            if let Ok(status) = self.on_member(id, backend.status()).await {
                if let Some(leader) = status.leader_id {
                    return Some(leader);
                }
            }
        }
        None
    }

    /// Member `id`'s clock.
    pub fn clock(&self, id: u64) -> MemberClock {
        self.network.clock_of(id)
    }

    /// Moves member `id`'s clock `by` ahead now, `at` in the run's time, and keeps the record.
    pub fn jump_clock(&self, id: u64, by: Duration, at: Duration) {
        self.clock(id).jump(by);
        lock(&self.clock_jumps).push(ClockJump { member: id, at, by });
    }

    /// Every jump ahead of a member's clock so far.
    pub fn clock_jumps(&self) -> Vec<ClockJump> {
        lock(&self.clock_jumps).clone()
    }

    /// Starts member `id` on its files (a new member's are created).
    pub async fn start(&self, id: u64) -> Result<(), NodeError> {
        let config = lock(&self.configs).get(&id).cloned().ok_or_else(|| {
            NodeError::Internal(format!("member {id} is not one of the run's members"))
        })?;
        self.wait_for_release(id).await;
        self.trace.record(Some(id), None, "member starting".into());
        let starting = Node::start_simulated(config, address(id, PEER_PORT));
        let node = self.on_member(id, starting).await?;
        self.trace.record(Some(id), None, "member started".into());
        lock(&self.running).insert(id, Arc::new(node));
        Ok(())
    }

    /// Stops member `id` as `revkv serve` stops on a signal: its watches end, raft stops, its
    /// store is made durable.
    pub async fn stop(&self, id: u64) -> Result<(), NodeError> {
        let Some(node) = lock(&self.running).remove(&id) else {
            return Ok(());
        };
        lock(&self.stopped).insert(id, Arc::downgrade(node.backend()));
        self.trace.record(Some(id), None, "member stopping".into());
        let stopped = self.on_member(id, node.shutdown()).await;
        self.trace
            .record(Some(id), None, format!("member stopped: {stopped:?}"));
        stopped
    }

    /// Waits up to `deadline` for member `id` to stop itself because a write or fsync of its data
    /// failed; answers why, or `None` if it did not (or is not running).
    pub async fn stopped_by_fault_within(&self, id: u64, deadline: Duration) -> Option<String> {
        let node = lock(&self.running).get(&id).cloned()?;
        tokio::time::timeout(deadline, node.stopped_by_fault())
            .await
            .ok()
    }

    /// Member `id`'s disks (the fault switches of its state file and raft log).
    pub fn disks(&self, id: u64) -> Option<MemberDisks> {
        lock(&self.configs)
            .get(&id)
            .map(|config| config.member.disks.clone())
    }

    /// Cuts the power of members `ids` at one instant: from here on nothing they do reaches their
    /// disks or the network. Then each one's disks lose what a power cut loses (every change since
    /// a file's last fsync may be gone, the first lost write torn; drawn from `random`), and
    /// every fault armed on them is cleared, as new hardware would be. Start them again with
    /// [`Cluster::start`].
    pub async fn crash(&self, ids: &[u64], random: &mut StdRng) {
        let mut crashed = Vec::new();
        for id in ids {
            let (Some(node), Some(disks)) = (lock(&self.running).remove(id), self.disks(*id))
            else {
                continue;
            };
            for file in [&disks.state_file, &disks.raft_log] {
                file.fail(DiskOperation::Write, true);
                file.fail(DiskOperation::Sync, true);
            }
            self.network.set_power(*id, false);
            lock(&self.stopped).insert(*id, Arc::downgrade(node.backend()));
            self.trace.record(Some(*id), None, "member crashed".into());
            crashed.push((*id, node, disks));
        }
        for (id, node, disks) in crashed {
            // The dead member's tasks are stopped and its files closed; it can write nothing.
            let _ = self.on_member(id, node.shutdown()).await;
            drop(node);
            self.wait_for_release(id).await;
            for file in [&disks.state_file, &disks.raft_log] {
                let lost = file.crash(&mut |n| random.random_range(0..n));
                self.trace.record(Some(id), None, describe_loss(lost));
                file.fail(DiskOperation::Write, false);
                file.fail(DiskOperation::Sync, false);
                file.fill(false);
            }
            self.network.set_power(id, true);
        }
    }

    /// Waits until nothing holds member `id`'s last run any more. A process that stops lets go
    /// of its files as it exits; here a client's request to the stopped member may still hold
    /// its store until the request fails, and the store's files cannot be opened twice.
    async fn wait_for_release(&self, id: u64) {
        let Some(last_run) = lock(&self.stopped).remove(&id) else {
            return;
        };
        let deadline = tokio::time::Instant::now() + RELEASE_DEADLINE;
        while last_run.strong_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops every running member.
    pub async fn stop_all(&self) {
        for id in self.running_ids() {
            let _ = self.stop(id).await;
        }
    }
}

/// One line of the trace for what a crash did to one store's files.
fn describe_loss(lost: std::io::Result<Vec<CrashLoss>>) -> String {
    match lost {
        Err(error) => format!("crash: the lost writes could not be undone: {error}"),
        Ok(files) if files.is_empty() => "crash: nothing unsynced".into(),
        Ok(files) => files
            .iter()
            .map(|file| {
                let name = file.file.file_name().unwrap_or_default().to_string_lossy();
                let torn = file
                    .torn_sectors
                    .map(|(kept, of)| format!(", {kept} of {of} sectors of the next"))
                    .unwrap_or_default();
                format!(
                    "crash: {name} kept {} of {} unsynced changes{torn}",
                    file.kept, file.unsynced
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// A member's snapshot and log-purge policy in a run (see `member_config`).
const SNAPSHOT_AFTER_ENTRIES: u64 = 100;
const LOG_ENTRIES_KEPT_AFTER_SNAPSHOT: u64 = 20;

/// The highest id a member of a run may have: its address is 10.0.0.id.
const MAX_MEMBER_ID: u64 = 250;

/// How the others reach member `id`.
fn advertised(id: u64) -> MemberNode {
    MemberNode {
        peer_url: Cluster::peer_url(id),
        client_url: format!("http://{}", address(id, CLIENT_PORT)),
        grpc_url: None,
    }
}

/// Member `id`'s config, its files under `directory`, on `network`.
fn member_config(id: u64, directory: &Path, network: &Arc<Network>) -> NodeConfig {
    let mut config = NodeConfig::single_member(
        directory.join(format!("member-{id}")),
        address(id, CLIENT_PORT),
        address(id, PEER_PORT),
    );
    config.member.id = id;
    config.member.advertise = advertised(id);
    let link = network.link(id, address(id, PEER_PORT));
    config.member.peer_network = PeerNetwork::simulated(link);
    // A crash loses what was not synced (`Cluster::crash`), so the disks keep it until then; the
    // state file paces its durable commits by the simulation's clock, so the same seed makes the
    // same commits durable.
    config.member.disks.state_file.keep_unsynced_writes();
    config.member.disks.raft_log.keep_unsynced_writes();
    config.member.store.clock = simulated_now;
    // A run writes hundreds of entries, not the tens of thousands after which a member's defaults
    // snapshot and purge its log; with these, a member that joins, or comes back after a long
    // stop, is sent a snapshot, so the snapshot's build, transfer and install meet the faults too.
    config.member.timing.snapshot_after_entries = SNAPSHOT_AFTER_ENTRIES;
    config.member.timing.log_entries_kept_after_snapshot = LOG_ENTRIES_KEPT_AFTER_SNAPSHOT;
    config
}

/// The simulation's clock as a `std` instant, for the state file's durable-commit pacing.
fn simulated_now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Each holder makes one insert or removal, so the map stays whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
