//! A running member: the raft instance, its stores, the peer listener, and the operations the node
//! layer calls (writes, read barriers, membership changes), each bounded in time and attempts.
//! What runs on the leader itself is in `leader.rs`.
//!
//! Any member accepts any operation. Whatever must run on the leader (writes, read indexes,
//! membership changes) runs locally when this member leads, and otherwise is sent to the leader
//! over the peer protocol; when leadership moves underneath (or the leader cannot be reached), the
//! call is retried on the new leader until its deadline (`PeerLimits::call_timeout`, the request's
//! timeout), at most `MAX_LEADER_ATTEMPTS` times, with a growing pause between attempts.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;
use openraft::async_runtime::WatchReceiver;
use revkv_storage::{MvccStore, RaftLogStore, Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{oneshot, watch};

use crate::config::MemberConfig;
use crate::error::MemberError;
pub use crate::member_inner::Raft;
use crate::member_inner::{wait_for, MemberInner, Metrics};
use crate::member_start::{startup, OpenStores, StartedRaft};
use crate::peer::append_timeout::{AppendTimeouts, PeerAppendTimeout};
use crate::peer::client::{CallError, PeerAddresses};
use crate::peer::failure_log::PeerFailureLog;
use crate::peer::server::PeerServing;
use crate::peer::simulated::PeerListener;
use crate::peer::{
    paths, AdminRequest, ForwardedWrite, LeaseGrantCall, LeaseTimeToLive, LeaseTimeToLiveCall,
    PeerError, PeerIdentity,
};
use crate::state_machine::AppliedPosition;
use crate::status::{RaftStatus, RaftStatusFeed};
use crate::types::{ClientRequest, MemberNode, WriteResult};

/// The most attempts one forwarded call makes on a leader, whatever its deadline. The deadline
/// bounds a call in time; this bounds it in work when the answers come back at once (a leader that
/// refuses, a dead leader whose port refuses connections). With the pauses below, 64 attempts
/// outlast any deadline of a few seconds, so in practice the deadline decides.
const MAX_LEADER_ATTEMPTS: u32 = 64;

/// The first pause after an attempt that found no leader to take the call; it doubles after each
/// further attempt, up to the shortest election timeout, the soonest a dead leader is replaced.
/// The pause ends early when the metrics name another leader.
const FIRST_LEADER_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// One member of the cluster as seen by the membership API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub id: u64,
    pub node: MemberNode,
    pub is_learner: bool,
}

/// A started member. Dropping it does not stop it; call `shutdown`.
pub struct RaftMember {
    inner: Arc<MemberInner>,
    peer_address: SocketAddr,
    stop_peer_server: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    /// Turns true at shutdown, ending the lease expiry and address publishing tasks.
    stop_background_tasks: watch::Sender<bool>,
    /// openraft's calls to other members that failed, logged at a bounded rate.
    peer_failures: Arc<PeerFailureLog>,
    append_timeouts: Arc<AppendTimeouts>,
    /// True once this member has applied everything it knew to be committed (see `is_ready`).
    caught_up_once: std::sync::atomic::AtomicBool,
}

impl RaftMember {
    /// Opens the stores in `config.data_dir`, starts raft and the peer server on `peer_listener`
    /// (a bound socket, or an address of the simulated network `config.peer_network` names), and
    /// bootstraps the cluster when this is a new member of a new cluster.
    pub async fn start(
        config: MemberConfig,
        peer_listener: impl Into<PeerListener>,
    ) -> Result<Self, MemberError> {
        let peer_serving = PeerServing::new(peer_listener.into(), &config.peer_network)
            .map_err(|error| startup("peer listener", &error))?;
        let peer_address = peer_serving
            .address()
            .map_err(|error| startup("peer listener", &error))?;
        let stores = OpenStores::open(&config)?;
        let raft = StartedRaft::start(&config, &stores).await?;
        let read_index_rounds =
            crate::leader::read_index_rounds(raft.raft.clone(), config.peer_limits.call_timeout);
        let inner = Arc::new(MemberInner {
            id: config.id,
            raft: raft.raft,
            store: stores.store,
            log: stores.log,
            applied: raft.applied,
            peers: raft.peers,
            config,
            lessor: raft.lessor,
            lease_check_now: tokio::sync::Notify::new(),
            snapshot_files: stores.snapshot_files,
            append_streams: Default::default(),
            first_storage_fault: raft.first_storage_fault,
            log_tail_size: raft.log_tail_size,
            read_index_rounds,
            leader_contact: Default::default(),
            confirmed_features: Default::default(),
        });
        let stop_peer_server = crate::peer::server::spawn(inner.clone(), peer_serving);
        let stop_background_tasks = watch::Sender::new(false);
        crate::lease_expiry::spawn(inner.clone(), stop_background_tasks.subscribe());
        crate::learner_promotion::spawn(inner.clone(), stop_background_tasks.subscribe());
        let member = RaftMember {
            inner,
            peer_address,
            stop_peer_server: std::sync::Mutex::new(Some(stop_peer_server)),
            stop_background_tasks,
            peer_failures: raft.peer_failures,
            append_timeouts: raft.append_timeouts,
            caught_up_once: std::sync::atomic::AtomicBool::new(false),
        };
        member.spawn_follow_peer_addresses(raft.peer_addresses);
        member.bootstrap_if_new().await?;
        crate::publish_addresses::spawn(
            member.inner.clone(),
            member.stop_background_tasks.subscribe(),
        );
        Ok(member)
    }

    /// Keeps the peer connections' address book equal to the newest membership's peer URLs. It
    /// wakes only when the term, role, leader or membership change (openraft's server metrics),
    /// and ends when raft does.
    fn spawn_follow_peer_addresses(&self, addresses: Arc<PeerAddresses>) {
        let mut server = self.inner.raft.server_metrics();
        tokio::spawn(async move {
            loop {
                let urls: BTreeMap<u64, String> = {
                    let metrics = server.borrow_watched();
                    let membership = metrics.membership_config.membership();
                    let nodes = membership.nodes();
                    nodes
                        .map(|(id, node)| (*id, node.peer_url.clone()))
                        .collect()
                };
                addresses.replace_all(urls);
                if server.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Initialises a new cluster once: only when this member has never been initialised and was
    /// given an initial cluster. Every founding member may do this with the same membership.
    async fn bootstrap_if_new(&self) -> Result<(), MemberError> {
        let config = &self.inner.config;
        if config.join || config.initial_cluster.is_empty() {
            return Ok(());
        }
        let initialised = self.inner.raft.is_initialized().await.map_err(stopping)?;
        if initialised {
            return Ok(());
        }
        match self
            .inner
            .raft
            .initialize(config.initial_cluster.clone())
            .await
        {
            Ok(()) => Ok(()),
            // Another founding member's identical bootstrap reached us first.
            Err(error) if error.api_error().is_some() => {
                tracing::info!(%error, "cluster already initialised");
                Ok(())
            }
            Err(error) => Err(MemberError::Startup(format!("bootstrap: {error}"))),
        }
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// True when the membership holds this member's client URLs as it advertises them (HTTP,
    /// and gRPC if it serves it). A founding member publishes them once a leader is known
    /// (`publish_addresses.rs`); until then its entry has only its peer URL.
    pub fn client_urls_published(&self) -> bool {
        self.inner.client_urls_published()
    }

    /// How many append streams (other members' replication and heartbeat connections) this
    /// member serves now.
    pub fn open_append_streams(&self) -> usize {
        self.inner.append_streams.count()
    }

    /// How many of openraft's calls (appends, heartbeats, votes) to member `peer` have failed in
    /// a row, since it last answered; 0 while it answers.
    pub fn failed_calls_in_a_row(&self, peer: u64) -> u64 {
        self.peer_failures.failures_in_a_row(peer)
    }

    /// How long an append to each peer may take now, and how many appends to it timed out
    /// (`peer/append_timeout.rs`). Peers this member never sent an append to are left out.
    pub fn append_timeouts(&self) -> Vec<PeerAppendTimeout> {
        self.append_timeouts.all()
    }

    /// The address the peer listener is bound to.
    pub fn peer_address(&self) -> SocketAddr {
        self.peer_address
    }

    /// The member's MVCC store, for local (serializable) reads.
    pub fn store(&self) -> &Arc<MvccStore> {
        &self.inner.store
    }

    /// The raft log store, for status (file size).
    pub fn log_store(&self) -> &Arc<RaftLogStore> {
        &self.inner.log
    }

    /// The switchboard of this member's outgoing peer calls, for tests that lose some of them.
    pub fn peer_faults(&self) -> &crate::peer::faults::PeerFaults {
        &self.inner.peers.faults
    }

    /// The openraft instance, for this crate's own tests. Callers outside the crate use
    /// [`status`](Self::status) and [`status_feed`](Self::status_feed), which speak this crate's
    /// types, so that only this crate knows openraft.
    pub fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// The member's raft state now: term, leader, role, commit and applied indexes.
    pub fn status(&self) -> RaftStatus {
        self.inner.status()
    }

    /// The member's current term alone, for the header of every answer (and of every watch
    /// event): cheaper than [`status`](Self::status), which also weighs a leader's lease.
    pub fn term(&self) -> u64 {
        self.inner.raft.metrics().borrow_watched().current_term
    }

    /// A reader of how many bytes of raft log entries this member holds in memory now.
    pub fn log_tail_size(&self) -> crate::log_tail::LogTailSize {
        self.inner.log_tail_size.clone()
    }

    /// A feed of the changes of term, role and leader, for metrics that follow them. Commit and
    /// applied indexes move with every write and do not wake the feed: read them with
    /// [`status`](Self::status) when they are needed.
    pub fn status_feed(&self) -> RaftStatusFeed {
        RaftStatusFeed::new(
            self.inner.raft.server_metrics(),
            self.inner.raft.metrics(),
            self.inner.leader_lease(),
            self.inner.leader_contact.clone(),
        )
    }

    /// Waits until raft stops on its own, because a storage operation failed (a write or fsync of
    /// the log or the state file) or raft panicked, and says why: the first storage failure when
    /// raft's own reason is a consequence of it (`storage_fault.rs`). The member then acknowledges
    /// nothing more, and whoever runs it should stop it: after a failed fsync nobody knows what
    /// the file holds (fail-stop). It never resolves for a member stopped by `shutdown`.
    pub async fn stopped_by_fault(&self) -> String {
        // The server metrics change only with the vote, role, leader or membership, and close when
        // raft's core task ends, after it has recorded why in the full metrics. Waiting on the
        // full metrics instead would wake this task several times per write.
        let mut server = self.inner.raft.server_metrics();
        let fault = || {
            let reason = fault_of(&self.inner.raft.metrics().borrow_watched().running_state)?;
            Some(self.inner.first_storage_fault.explain(reason))
        };
        loop {
            if let Some(reason) = fault() {
                return reason;
            }
            if server.changed().await.is_err() {
                // Raft is gone; its last word was read above or is read now.
                if let Some(reason) = fault() {
                    return reason;
                }
                return std::future::pending().await;
            }
        }
    }

    /// True when this member leads the cluster, as far as it knows.
    pub fn is_leader(&self) -> bool {
        self.status().leader == Some(self.inner.id)
    }

    /// True once this member belongs to a cluster: it bootstrapped one, restarted with data, or
    /// was added. An empty `--join` member is not initialized until it is added.
    pub async fn is_initialized(&self) -> Result<bool, MemberError> {
        self.inner.raft.is_initialized().await.map_err(stopping)
    }

    /// Waits, at most `timeout`, until the state machine has re-applied everything that was
    /// committed before a restart.
    pub async fn wait_for_recovery(&self, timeout: Duration) -> Result<(), MemberError> {
        self.inner
            .raft
            .wait_for_recovery(Some(timeout))
            .await
            .map(|_| ())
            .map_err(|error| MemberError::Timeout(error.to_string()))
    }

    /// A receiver of the state machine's applied position.
    pub fn applied(&self) -> watch::Receiver<AppliedPosition> {
        self.inner.applied.clone()
    }

    /// Replicates a request and answers once it is applied on the leader and on this member.
    pub async fn write(&self, request: Request) -> Result<WriteResult, MemberError> {
        let inner = self.inner.clone();
        let request = ClientRequest(request);
        let forwarded: ForwardedWrite = self
            .run_on_leader(paths::FORWARD_WRITE, &request, move |request| {
                let inner = inner.clone();
                async move { inner.write_as_leader(request).await }
            })
            .await?;
        // Read-your-writes on this member: wait (bounded) until it has applied the entry too.
        let timeout = self.inner.config.peer_limits.call_timeout;
        self.wait_for_log_index(forwarded.log_index, timeout)
            .await?;
        if matches!(forwarded.result.outcome, Ok(Response::LeaseRevoke(_))) {
            self.inner.config.lease_events.revoked();
        }
        Ok(forwarded.result)
    }

    /// Grants a lease through the leader, which picks a free id when `id` is `None` and raises the
    /// TTL to the minimum; answers once this member has applied the grant too. A rejection (a
    /// duplicate id, too many leases) is in the result's outcome, as for any write.
    pub async fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> Result<WriteResult, MemberError> {
        let inner = self.inner.clone();
        let call = LeaseGrantCall { id, ttl_seconds };
        let forwarded: ForwardedWrite = self
            .run_on_leader(paths::LEASE_GRANT, &call, move |call| {
                let inner = inner.clone();
                async move { inner.grant_lease_as_leader(call).await }
            })
            .await?;
        let timeout = self.inner.config.peer_limits.call_timeout;
        self.wait_for_log_index(forwarded.log_index, timeout)
            .await?;
        if matches!(forwarded.result.outcome, Ok(Response::LeaseGrant(_))) {
            self.inner.config.lease_events.granted();
        }
        Ok(forwarded.result)
    }

    /// Renews lease `id` on the leader (from any member); answers its granted TTL in seconds.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<i64, MemberError> {
        let inner = self.inner.clone();
        self.run_on_leader(paths::LEASE_KEEP_ALIVE, &id, move |id| {
            let inner = inner.clone();
            async move { inner.keep_lease_alive_as_leader(id).await }
        })
        .await
    }

    /// Lease `id`'s granted and remaining TTL as the leader knows them, and its keys when asked.
    pub async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLive, MemberError> {
        let inner = self.inner.clone();
        let call = LeaseTimeToLiveCall { id, with_keys };
        self.run_on_leader(paths::LEASE_TIME_TO_LIVE, &call, move |call| {
            let inner = inner.clone();
            async move { inner.lease_time_to_live_as_leader(call).await }
        })
        .await
    }

    /// The shortest TTL a grant gets (from the election timeout, as in etcd).
    pub fn min_lease_ttl_seconds(&self) -> i64 {
        self.inner.config.timing.min_lease_ttl_seconds()
    }

    /// Returns once this member's state reflects every write acknowledged before the call: gets a
    /// read index from the leader (ReadIndex, shared by concurrent reads) and waits until this
    /// member has applied through it.
    pub async fn linearizable_read_barrier(&self) -> Result<(), MemberError> {
        let inner = self.inner.clone();
        let read_index: u64 = self
            .run_on_leader(paths::READ_INDEX, &(), move |()| {
                let inner = inner.clone();
                async move { inner.read_index_as_leader().await }
            })
            .await?;
        let timeout = self.inner.config.peer_limits.call_timeout;
        self.wait_for_log_index(read_index, timeout).await
    }

    /// Runs a membership or leadership change on the leader, and answers once this member has
    /// applied the change too (as writes do), so that its own membership list shows it. A member
    /// that the change removes is not waited for: it may never receive the rest of the log.
    pub async fn admin(&self, request: AdminRequest) -> Result<(), MemberError> {
        let removes_this_member = request == AdminRequest::Remove { id: self.inner.id };
        let inner = self.inner.clone();
        let change_index: Option<u64> = self
            .run_on_leader(paths::ADMIN, &request, move |request| {
                let inner = inner.clone();
                async move { inner.admin_as_leader(request).await }
            })
            .await?;
        match change_index {
            Some(index) if !removes_this_member => {
                // One deadline for both waits: the change's answer waits one call timeout at most.
                let timeout = self.inner.config.peer_limits.call_timeout;
                let deadline = Instant::now() + timeout;
                self.wait_for_log_index(index, timeout).await?;
                self.wait_for_committed_membership(index, deadline).await
            }
            _ => Ok(()),
        }
    }

    /// Waits until openraft's metrics name the membership entry at `index` (or a later one) as
    /// committed. `members` reads that committed membership, and openraft publishes its metrics
    /// after the state machine reports the entry applied, so waiting for the applied index alone
    /// let a change's answer list the membership before it (seen once in CI: an added learner
    /// missing from the answer to its own add).
    async fn wait_for_committed_membership(
        &self,
        index: u64,
        deadline: Instant,
    ) -> Result<(), MemberError> {
        let mut metrics = self.inner.raft.metrics();
        let committed_through_index = |now: &Metrics| {
            now.committed_membership_config
                .log_id()
                .as_ref()
                .is_some_and(|log_id| log_id.index >= index)
        };
        if wait_for(&mut metrics, deadline, committed_through_index).await {
            Ok(())
        } else {
            Err(MemberError::Timeout(format!(
                "the membership entry at log index {index} not seen committed in time"
            )))
        }
    }

    /// Asks the member listening at `peer_url` who it is, so that it can be added by its peer URL
    /// alone (etcd's `MemberAdd`; revkv members choose their own ids). Refused when nobody answers
    /// there, when it already belongs to a cluster, or when its id is taken.
    pub async fn identify_new_member(&self, peer_url: &str) -> Result<PeerIdentity, MemberError> {
        let timeout = self.inner.config.peer_limits.call_timeout;
        let identity: PeerIdentity = self
            .inner
            .peers
            .call(peer_url, paths::IDENTITY, &(), timeout)
            .await
            .map_err(|error| match error {
                CallError::Unreachable(detail)
                | CallError::BadAnswer(detail)
                | CallError::ClosedBeforeAnswer(detail) => MemberError::Refused(format!(
                    "no revkv member answers at {peer_url} ({detail}); start it first with \
                         `revkv serve --join`, listening for peers there"
                )),
                other => member_error(other),
            })?;
        if identity.initialized {
            return Err(MemberError::Refused(format!(
                "the member at {peer_url} (id {}) already belongs to a cluster",
                identity.id
            )));
        }
        let members = self.members_including_pending_change();
        if members.iter().any(|member| member.id == identity.id) {
            return Err(MemberError::Refused(format!(
                "the member at {peer_url} has id {}, which is a member already",
                identity.id
            )));
        }
        Ok(identity)
    }

    /// Every member's hash of its history at `revision` (this member's own included), each asked
    /// at once and bounded by `timeout`; the consistency check compares them.
    pub async fn key_space_hashes(
        &self,
        revision: u64,
        timeout: Duration,
    ) -> Vec<crate::MemberKeySpaceHash> {
        self.inner.collect_key_space_hashes(revision, timeout).await
    }

    /// This member's report of itself (`member_reports.rs`).
    pub fn member_report(&self) -> Result<crate::MemberReport, MemberError> {
        Ok(self.inner.member_report()?)
    }

    /// Every member's report, asked at once, each within `timeout`.
    pub async fn member_reports(&self, timeout: Duration) -> Vec<crate::MemberReportAnswer> {
        self.inner.collect_member_reports(timeout).await
    }

    /// Waits until this member has applied at least `revision`.
    pub async fn wait_for_revision(
        &self,
        revision: u64,
        timeout: Duration,
    ) -> Result<(), MemberError> {
        self.wait_for_applied(timeout, |position| position.revision >= revision)
            .await
            .map_err(|()| {
                MemberError::Timeout(format!("revision {revision} not applied in {timeout:?}"))
            })
    }

    /// Waits until this member has applied at least log index `index`.
    pub async fn wait_for_log_index(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<(), MemberError> {
        self.wait_for_applied(timeout, |position| position.log_index >= index)
            .await
            .map_err(|()| {
                MemberError::Timeout(format!("log index {index} not applied in {timeout:?}"))
            })
    }

    async fn wait_for_applied(
        &self,
        timeout: Duration,
        reached: impl Fn(&AppliedPosition) -> bool,
    ) -> Result<(), ()> {
        // Usually already reached (a leader has applied its read index): answer without
        // building a timer.
        if reached(&self.inner.applied.borrow()) {
            return Ok(());
        }
        let mut applied = self.inner.applied.clone();
        let waited = crate::clock::timeout(timeout, applied.wait_for(|position| reached(position)))
            .await
            .map(|result| result.is_ok());
        if waited == Ok(true) {
            Ok(())
        } else {
            Err(())
        }
    }

    /// The cluster's members as the last committed configuration names them, as etcd's `member
    /// list` shows only configuration that took effect: a change is listed once it is committed,
    /// never while it is only in the leader's log (an add that times out there never appears and
    /// vanishes). A member that knows no committed configuration yet (one just started to join)
    /// lists the configuration it has received.
    pub fn members(&self) -> Vec<Membership> {
        let metrics = self.inner.raft.metrics().borrow_watched().clone();
        let committed = metrics.committed_membership_config.membership();
        if committed.nodes().next().is_none() {
            return memberships_of(metrics.membership_config.membership());
        }
        memberships_of(committed)
    }

    /// The cluster's members as the latest configuration in this member's log names them,
    /// committed or not: what raft replicates to, and what a new change must not repeat.
    pub fn members_including_pending_change(&self) -> Vec<Membership> {
        let metrics = self.inner.raft.metrics().borrow_watched().clone();
        memberships_of(metrics.membership_config.membership())
    }

    /// True when the member runs, knows a leader, and has once applied everything it knew to be
    /// committed (after a start, its recovery and catch-up). Once caught up it stays ready while it
    /// knows a leader: under load the applied index trails the commit index by the entries being
    /// applied at any moment, and a readiness that flapped with each write would take a busy
    /// member out of service.
    pub fn is_ready(&self) -> bool {
        use std::sync::atomic::Ordering;
        let status = self.status();
        if !status.running || status.leader.is_none() {
            return false;
        }
        if self.caught_up_once.load(Ordering::Acquire) {
            return true;
        }
        let caught_up = status.applied_index >= status.commit_index;
        if caught_up {
            self.caught_up_once.store(true, Ordering::Release);
        }
        caught_up
    }

    /// Stops raft and the peer server, and makes the store durable.
    pub async fn shutdown(&self) -> Result<(), MemberError> {
        self.stop_background_tasks.send_replace(true);
        let stop = self
            .stop_peer_server
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|error| MemberError::Stopping(error.to_string()))?;
        let store = self.inner.store.clone();
        crate::runtime::offload(move || store.flush())
            .await
            .map_err(|error| MemberError::Stopping(error.to_string()))??;
        Ok(())
    }

    /// Runs `local` when this member leads, or calls `path` on the leader; when the leader moved
    /// or could not be reached (so the call took no effect), waits for a leader (another one, or a
    /// pause) and tries again, until the call's deadline (`PeerLimits::call_timeout`, the
    /// request's timeout) and at most `MAX_LEADER_ATTEMPTS` times. An election that ends before
    /// the deadline therefore ends in an answer, not in `NoLeader`.
    async fn run_on_leader<Req, Reply, Fut>(
        &self,
        path: &'static str,
        request: &Req,
        local: impl Fn(Req) -> Fut,
    ) -> Result<Reply, MemberError>
    where
        Req: Serialize + Clone,
        Reply: DeserializeOwned,
        Fut: Future<Output = Result<Reply, PeerError>>,
    {
        let deadline = Instant::now() + self.inner.config.peer_limits.call_timeout;
        let mut pause = FIRST_LEADER_RETRY_PAUSE;
        let mut last_problem = String::from("no leader known");
        for _attempt in 0..MAX_LEADER_ATTEMPTS {
            let Some((leader_id, leader)) = self.wait_for_leader(deadline).await else {
                break;
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let leader_known = (leader_id, &leader);
            let outcome = self
                .call_leader_once(leader_known, (path, request), &local, remaining)
                .await;
            match outcome {
                Ok(reply) => return Ok(reply),
                Err(CallError::Remote(PeerError::NotLeader { .. }))
                | Err(CallError::Unreachable(_)) => {
                    last_problem = format!("leader {leader_id} moved or unreachable");
                    // Usually leadership moved, and the metrics soon name the new leader. But a
                    // dead leader stays named until the followers' election timers run out, and
                    // a leader just elected (or whose lease lapsed) refuses for a moment while
                    // nobody else leads: wait for another leader, at most the pause, then ask again.
                    let retry_at = deadline.min(Instant::now() + pause);
                    self.wait_for_leader_change(leader_id, retry_at).await;
                    pause = (pause * 2).min(self.inner.config.timing.election_timeout_min);
                }
                // The request was sent but no valid answer came back: a write or a membership
                // change may have taken effect on the leader, so its outcome is unknown (504), and
                // "no leader, retry" (503) would invite the client to apply it twice.
                Err(CallError::BadAnswer(message))
                | Err(CallError::ClosedBeforeAnswer(message))
                    if path != paths::READ_INDEX =>
                {
                    return Err(MemberError::Timeout(format!(
                        "the leader's answer was lost, the outcome is unknown: {message}"
                    )));
                }
                Err(other) => return Err(member_error(other)),
            }
        }
        // Every attempt failed before the leader took the call (it moved, was unreachable, or
        // none was known), so nothing happened: "unavailable, retry" is the truth.
        Err(MemberError::NoLeader(format!("{path}: {last_problem}")))
    }

    /// One attempt of [`Self::run_on_leader`]: runs `local` when this member is `leader`, or calls
    /// `path` on it over the peer protocol, either way within `remaining`.
    async fn call_leader_once<Req, Reply, Fut>(
        &self,
        (leader_id, leader): (u64, &MemberNode),
        (path, request): (&'static str, &Req),
        local: &impl Fn(Req) -> Fut,
        remaining: Duration,
    ) -> Result<Reply, CallError>
    where
        Req: Serialize + Clone,
        Reply: DeserializeOwned,
        Fut: Future<Output = Result<Reply, PeerError>>,
    {
        if leader_id != self.inner.id {
            let peers = &self.inner.peers;
            return peers.call(&leader.peer_url, path, request, remaining).await;
        }
        match crate::clock::timeout(remaining, local(request.clone())).await {
            Ok(outcome) => outcome.map_err(CallError::Remote),
            Err(_) => Err(CallError::Timeout(remaining)),
        }
    }

    /// Every request to the leader asks this, so it reads the metrics in place: cloning them
    /// whole copies their replication and heartbeat maps, about 1 % of the leader's CPU under
    /// linearizable reads (profiled 2026-11-29).
    fn known_leader(&self) -> Option<(u64, MemberNode)> {
        let receiver = self.inner.raft.metrics();
        let metrics = receiver.borrow_watched();
        let leader = metrics.current_leader?;
        let node = metrics.membership_config.get_node(&leader)?.clone();
        Some((leader, node))
    }

    /// The current leader, waiting (until `deadline`) for one to be known.
    async fn wait_for_leader(&self, deadline: Instant) -> Option<(u64, MemberNode)> {
        let mut metrics = self.inner.raft.metrics();
        loop {
            if let Some(leader) = self.known_leader() {
                return Some(leader);
            }
            let changed = crate::clock::timeout_at(deadline, metrics.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return None;
            }
        }
    }

    /// Waits (until `deadline`) for the metrics to name a leader other than `previous`.
    async fn wait_for_leader_change(&self, previous: u64, deadline: Instant) {
        let mut metrics = self.inner.raft.metrics();
        let another_leader = |now: &Metrics| {
            now.current_leader.is_some_and(|leader| {
                leader != previous && now.membership_config.get_node(&leader).is_some()
            })
        };
        wait_for(&mut metrics, deadline, another_leader).await;
    }
}

fn stopping(error: impl std::fmt::Display) -> MemberError {
    MemberError::Stopping(error.to_string())
}

fn member_error(error: CallError) -> MemberError {
    match error {
        CallError::Timeout(after) => MemberError::Timeout(format!("no answer in {after:?}")),
        CallError::Unreachable(message) => MemberError::NoLeader(message),
        CallError::BadAnswer(message) | CallError::NotServed(message) => {
            MemberError::NoLeader(message)
        }
        CallError::ClosedBeforeAnswer(message) => MemberError::NoLeader(message),
        CallError::Remote(PeerError::UnknownMember(id)) => MemberError::UnknownMember(id),
        CallError::Remote(PeerError::Refused(message)) => MemberError::Refused(message),
        CallError::Remote(PeerError::OutcomeUnknown(message)) => MemberError::Timeout(message),
        CallError::Remote(PeerError::Unavailable(message)) => MemberError::NoLeader(message),
        CallError::Remote(PeerError::Fatal(message)) => MemberError::NoLeader(message),
        CallError::Remote(PeerError::LeaseNotFound(id)) => MemberError::LeaseNotFound(id),
        CallError::Remote(PeerError::LearnerNotReady(why)) => MemberError::LearnerNotReady(why),
        CallError::Remote(not_leader @ PeerError::NotLeader { .. }) => {
            MemberError::NoLeader(not_leader.to_string())
        }
    }
}

/// Why raft stopped, when it stopped on its own (not by `shutdown`).
fn fault_of(
    running_state: &Result<(), openraft::errors::Fatal<crate::TypeConfig>>,
) -> Option<String> {
    match running_state {
        Ok(()) | Err(openraft::errors::Fatal::Stopped) => None,
        Err(fault) => Some(fault.to_string()),
    }
}

/// Each member of `membership`, voters and learners, in id order.
fn memberships_of(membership: &openraft::Membership<u64, MemberNode>) -> Vec<Membership> {
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, node)| Membership {
            id: *id,
            node: node.clone(),
            is_learner: !voters.contains(id),
        })
        .collect()
}
