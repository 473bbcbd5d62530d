//! Raft health metrics: term, leadership, leader changes, commit and applied indexes, failed
//! proposals, the durations of log appends (queue to durable) and state-machine applies, and each
//! peer's append timeout with the appends to it that timed out.
//!
//! The crate knows nothing of openraft: the node turns each change of openraft's metrics into a
//! plain [`RaftObservation`] and hands it to [`RaftMetrics::observe`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus::{GaugeVec, Histogram, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::registration::{
    counter, counter_vec, float_gauge_vec, gauge, histogram, storage_latency_buckets,
};

/// What the member's raft state is at one moment, in plain numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaftObservation {
    pub term: u64,
    pub is_leader: bool,
    /// The leader this member knows of in `term`, if any.
    pub leader_id: Option<u64>,
    pub commit_index: u64,
    pub applied_index: u64,
}

/// The raft metrics of one member.
#[derive(Clone, Debug)]
pub struct RaftMetrics {
    term: IntGauge,
    is_leader: IntGauge,
    leader_changes_total: IntCounter,
    commit_index: IntGauge,
    applied_index: IntGauge,
    proposals_failed_total: IntCounter,
    append_duration_seconds: Histogram,
    apply_duration_seconds: Histogram,
    append_timeout_seconds: GaugeVec,
    append_timeouts_total: IntCounterVec,
    learner_auto_promotions_total: IntCounter,
    learner_lag_entries: GaugeVec,
    /// The highest term in which a leader was seen; a leader seen in a higher term is a change.
    last_term_with_leader: Arc<AtomicU64>,
}

impl RaftMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(RaftMetrics {
            term: gauge(
                registry,
                "revkv_raft_term",
                "The member's current raft term.",
            )?,
            is_leader: gauge(
                registry,
                "revkv_raft_is_leader",
                "1 while this member is the raft leader, otherwise 0.",
            )?,
            leader_changes_total: counter(
                registry,
                "revkv_raft_leader_changes_total",
                "Leaders this member has seen come to power (one per term that had a leader).",
            )?,
            commit_index: gauge(
                registry,
                "revkv_raft_commit_index",
                "The highest raft log index this member knows to be committed.",
            )?,
            applied_index: gauge(
                registry,
                "revkv_raft_applied_index",
                "The highest raft log index this member's state machine has applied.",
            )?,
            proposals_failed_total: counter(
                registry,
                "revkv_raft_proposals_failed_total",
                "Writes this member proposed that failed without an answer from the state \
                 machine (no leader, stopping, timeout).",
            )?,
            append_duration_seconds: histogram(
                registry,
                "revkv_raft_append_duration_seconds",
                "Time from queueing a batch of entries for the raft log writer until it is durable (queue wait, write and fsync).",
                storage_latency_buckets(),
            )?,
            apply_duration_seconds: histogram(
                registry,
                "revkv_raft_apply_duration_seconds",
                "Time to apply one chunk of committed entries to the state machine.",
                storage_latency_buckets(),
            )?,
            append_timeout_seconds: float_gauge_vec(
                registry,
                "revkv_raft_append_timeout_seconds",
                "How long this member waits for an append to each peer: four times the peer's \
                 slowest recent round trip (its fsync), between the election timeout and \
                 --max-append-timeout-ms.",
                &["peer"],
            )?,
            append_timeouts_total: counter_vec(
                registry,
                "revkv_raft_append_timeouts_total",
                "Appends to each peer that got no answer within their timeout.",
                &["peer"],
            )?,
            learner_auto_promotions_total: counter(
                registry,
                "revkv_learner_auto_promotions_total",
                "Learners added with --auto-promote that this member, leading, promoted once \
                 they had caught up.",
            )?,
            learner_lag_entries: float_gauge_vec(
                registry,
                "revkv_learner_lag_entries",
                "On the leader: how many log entries each learner waiting to be promoted \
                 automatically is behind (infinite while the leader knows of no entry it holds).",
                &["member"],
            )?,
            last_term_with_leader: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Updates the gauges from one observation, and counts a leader change when a leader is seen
    /// in a term later than the last term that had one.
    pub fn observe(&self, observation: &RaftObservation) {
        self.term.set(saturating_i64(observation.term));
        self.is_leader.set(i64::from(observation.is_leader));
        self.commit_index
            .set(saturating_i64(observation.commit_index));
        self.applied_index
            .set(saturating_i64(observation.applied_index));
        if observation.leader_id.is_some() {
            let previous = self
                .last_term_with_leader
                .fetch_max(observation.term, Ordering::Relaxed);
            if previous < observation.term {
                self.leader_changes_total.inc();
            }
        }
    }

    /// Counts a learner this leader promoted automatically.
    pub fn record_learner_promoted(&self) {
        self.learner_auto_promotions_total.inc();
    }

    /// Shows each learner waiting to be promoted with its lag (`None`: unknown), and no other:
    /// a learner promoted, removed, or led by another member leaves the gauge.
    pub fn record_learner_lags(&self, lags: &[(u64, Option<u64>)]) {
        self.learner_lag_entries.reset();
        for (member, lag) in lags {
            let entries = lag.map_or(f64::INFINITY, |lag| lag as f64);
            self.learner_lag_entries
                .with_label_values(&[&member.to_string()])
                .set(entries);
        }
    }

    /// Counts a proposal that failed without an answer from the state machine.
    pub fn record_proposal_failed(&self) {
        self.proposals_failed_total.inc();
    }

    /// Records one raft log append (the batch's write and fsync).
    pub fn record_append(&self, duration: Duration) {
        self.append_duration_seconds.observe(duration.as_secs_f64());
    }

    /// Records that appends to `peer` now wait at most `timeout`.
    pub fn record_append_timeout(&self, peer: u64, timeout: Duration) {
        self.append_timeout_seconds
            .with_label_values(&[&peer.to_string()])
            .set(timeout.as_secs_f64());
    }

    /// Counts an append to `peer` that timed out.
    pub fn record_append_timed_out(&self, peer: u64) {
        self.append_timeouts_total
            .with_label_values(&[&peer.to_string()])
            .inc();
    }

    /// Records one state-machine apply (one chunk of committed entries).
    pub fn record_apply(&self, duration: Duration) {
        self.apply_duration_seconds.observe(duration.as_secs_f64());
    }
}

/// Gauges are `i64`; indexes and terms beyond `i64::MAX` cannot happen in practice, but clamp anyway.
pub(crate) fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
