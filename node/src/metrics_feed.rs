//! Feeds a member's [`Metrics`] from its raft member and stores, without polling:
//!
//! - Term, role and leader changes follow the member's raft status feed: a task wakes on each
//!   change, turns the new `RaftStatus` into a plain [`RaftObservation`], and stops when raft
//!   shuts down and closes the feed. The commit and applied indexes move with every write, so they
//!   are read just before each scrape instead, which keeps the write path free of this task.
//! - Store gauges (revisions, live keys, leases granted now, file sizes) are read just before each
//!   scrape: one read transaction and two file-size lookups per scrape, nothing between scrapes.
//! - Append (fsync) and apply durations are handed over by the raft layer as they happen, through
//!   [`AppendApplyTimings`], the observer `Node` puts in the member's configuration.
//! - Lease events (grants, client revokes, expiries with their lag, keep-alives) are handed over
//!   by the raft layer where they happen, through [`LeaseEventCounts`], likewise.
//! - Each peer's append timeout and the appends that timed out, through [`PeerAppendTimeouts`],
//!   likewise; the learners the leader promoted automatically and their lag, through
//!   [`LearnerPromotionCounts`].
//! - The bytes queued in watchers' buffers are read from the watch hub just before each scrape,
//!   so the hub moves one counter per message and no gauge.

use std::sync::Arc;

use revkv_metrics::{
    LeaseMetrics, MemoryObservation, Metrics, RaftMetrics, RaftObservation, StoreObservation,
};
use revkv_raft::{LogTailSize, MemberRole, RaftMember, RaftStatus};
use revkv_storage::{MvccStore, RaftLogStore, StoreStats};
use tokio::task::JoinHandle;

use crate::watch::WatchHub;

/// Starts both feeds for `member`. The returned task ends by itself when raft stops.
pub fn start_metrics_feeds(member: &RaftMember, metrics: &Arc<Metrics>) -> JoinHandle<()> {
    install_scrape_refresh(metrics, member);
    follow_raft_metrics(member, metrics.raft.clone())
}

/// Records the raft layer's append and apply durations in the member's histograms.
pub struct AppendApplyTimings(pub RaftMetrics);

impl revkv_raft::StorageTimingObserver for AppendApplyTimings {
    fn log_appended(&self, elapsed: std::time::Duration, _entries: usize) {
        self.0.record_append(elapsed);
    }

    fn entries_applied(&self, elapsed: std::time::Duration, _entries: usize) {
        self.0.record_apply(elapsed);
    }
}

/// Records each peer's append timeout and the appends that timed out in the raft metrics.
pub struct PeerAppendTimeouts(pub RaftMetrics);

impl revkv_raft::PeerAppendObserver for PeerAppendTimeouts {
    fn append_timeout_changed(&self, peer: u64, timeout: std::time::Duration) {
        self.0.record_append_timeout(peer, timeout);
    }

    fn append_timed_out(&self, peer: u64) {
        self.0.record_append_timed_out(peer);
    }
}

/// Records the leader's automatic promotions of learners and their lag.
pub struct LearnerPromotionCounts(pub RaftMetrics);

impl revkv_raft::LearnerPromotionObserver for LearnerPromotionCounts {
    fn learner_promoted(&self, _member_id: u64, _lag: u64) {
        self.0.record_learner_promoted();
    }

    fn learner_lags(&self, lags: &[(u64, Option<u64>)]) {
        self.0.record_learner_lags(lags);
    }
}

/// Counts the raft layer's lease events in the member's lease metrics.
pub struct LeaseEventCounts(pub LeaseMetrics);

impl revkv_raft::LeaseObserver for LeaseEventCounts {
    fn lease_granted(&self) {
        self.0.record_granted();
    }

    fn lease_revoked(&self) {
        self.0.record_revoked();
    }

    fn lease_expired(&self, lag: std::time::Duration) {
        self.0.record_expired(lag);
    }

    fn lease_kept_alive(&self) {
        self.0.record_keepalive();
    }
}

/// Spawns the task that mirrors every change of the member's raft status into `raft_metrics`.
fn follow_raft_metrics(member: &RaftMember, raft_metrics: RaftMetrics) -> JoinHandle<()> {
    let mut feed = member.status_feed();
    tokio::spawn(async move {
        let mut status = feed.current();
        loop {
            raft_metrics.observe(&raft_observation(&status));
            match feed.next_change().await {
                Some(next) => status = next,
                None => return,
            }
        }
    })
}

/// The plain numbers the metrics crate needs from one raft status reading.
fn raft_observation(status: &RaftStatus) -> RaftObservation {
    RaftObservation {
        term: status.term,
        // A leader whose lease lapsed reports no leader (`RaftStatus::of`) and is none here.
        is_leader: status.role == MemberRole::Leader && status.leader.is_some(),
        leader_id: status.leader,
        commit_index: status.commit_index,
        applied_index: status.applied_index,
    }
}

/// Makes every scrape read the raft indexes, the store's revisions, key and lease counts and file
/// sizes first. A failed store read leaves the previous values in place (and is logged), so a
/// scrape never fails because of it.
fn install_scrape_refresh(metrics: &Metrics, member: &RaftMember) {
    let raft_metrics = metrics.raft.clone();
    let store_metrics = metrics.store.clone();
    let lease_metrics = metrics.lease.clone();
    let raft_status = member.status_feed();
    let store = member.store().clone();
    let log = member.log_store().clone();
    let memory_metrics = metrics.memory.clone();
    let log_tail = member.log_tail_size();
    let installed = metrics.add_before_scrape(move || {
        raft_metrics.observe(&raft_observation(&raft_status.current()));
        let observed = store.stats().and_then(|stats| {
            store_metrics.observe(&store_observation(&store, &log, &stats)?);
            lease_metrics.observe_active(stats.leases);
            memory_metrics.observe(&memory_observation(&stats, &log_tail));
            Ok(())
        });
        if let Err(error) = observed {
            tracing::warn!(%error, "could not read store statistics for metrics");
        }
    });
    if let Err(error) = installed {
        tracing::error!(%error, "the store and raft gauges will not be refreshed");
    }
}

/// Makes every scrape read the bytes the watch hub's buffers hold. The hook holds the hub weakly,
/// so the metrics (which live as long as the HTTP router) do not keep a stopped hub alive.
pub fn refresh_watch_buffer_gauge_before_scrape(metrics: &Metrics, hub: &Arc<WatchHub>) {
    let watch_metrics = metrics.watch.clone();
    let hub = Arc::downgrade(hub);
    let installed = metrics.add_before_scrape(move || {
        if let Some(hub) = hub.upgrade() {
            watch_metrics.observe_buffered_bytes(hub.buffered_bytes());
        }
    });
    if let Err(error) = installed {
        tracing::error!(%error, "the watch buffer gauge will not be refreshed");
    }
}

/// The sizes of the parts of the member that hold memory.
fn memory_observation(stats: &StoreStats, log_tail: &LogTailSize) -> MemoryObservation {
    MemoryObservation {
        key_index_bytes: stats.key_index_bytes,
        state_cache_bytes: stats.state_cache_bytes,
        state_cache_limit_bytes: stats.state_cache_limit_bytes,
        raft_log_tail_bytes: log_tail.bytes(),
        raft_log_tail_limit_bytes: log_tail.limit_bytes(),
    }
}

/// The store gauges, from the store's statistics and its alarms.
fn store_observation(
    store: &MvccStore,
    log: &RaftLogStore,
    stats: &StoreStats,
) -> Result<StoreObservation, revkv_storage::StorageFailure> {
    let log_file_bytes = log.size_bytes();
    let alarms = store.alarms()?;
    let raised = |kind: revkv_storage::AlarmKind| {
        alarms.iter().filter(|alarm| alarm.kind == kind).count() as u64
    };
    let no_space_alarms = raised(revkv_storage::AlarmKind::NoSpace);
    let corrupt_alarms = raised(revkv_storage::AlarmKind::Corrupt);
    let observation = StoreObservation {
        revision: stats.current_revision,
        compact_revision: stats.compact_revision,
        keys: stats.live_keys,
        state_file_bytes: stats.file_bytes,
        state_bytes_in_use: stats.bytes_in_use,
        log_file_bytes,
        no_space_alarms,
        corrupt_alarms,
    };
    Ok(observation)
}
