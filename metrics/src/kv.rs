//! Optimistic-concurrency metrics: conflicts, server-side guaranteed-update attempts, and the
//! retries clients report with `X-Retry-Attempt`. Keys are turned into bounded `prefix` labels by
//! the member's shared [`PrefixFolder`].

use std::sync::Arc;

use prometheus::{HistogramVec, IntCounterVec, Registry};

use crate::prefix::{PrefixFolder, NO_KEY_PREFIX};
use crate::registration::{attempt_buckets, counter_vec, histogram_vec};

/// The operation a conflict or a client retry belongs to (the `op` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOp {
    Put,
    Delete,
    Patch,
    Txn,
    Get,
    /// Any other request (status, membership, ...).
    Other,
}

impl KvOp {
    pub fn label(self) -> &'static str {
        match self {
            KvOp::Put => "put",
            KvOp::Delete => "delete",
            KvOp::Patch => "patch",
            KvOp::Txn => "txn",
            KvOp::Get => "get",
            KvOp::Other => "other",
        }
    }
}

/// How a conflict was resolved (the `resolution` label of `revkv_conflicts_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictResolution {
    /// The client was answered `409 conflict` (or a txn's compares failed): it must act itself.
    Rejected,
    /// A three-way merge carried the client's changes onto the newer value; the client got 200.
    Merged,
    /// The member lost a compare-and-swap of its own and tried again (PATCH's guaranteed update,
    /// the merge's final write): one count per lost attempt that was retried.
    Retried,
}

impl ConflictResolution {
    pub fn label(self) -> &'static str {
        match self {
            ConflictResolution::Rejected => "rejected",
            ConflictResolution::Merged => "merged",
            ConflictResolution::Retried => "retried",
        }
    }
}

/// How a server-side guaranteed update ended (the `outcome` label of `revkv_update_attempts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// The update was written (or needed no write).
    Success,
    /// Every attempt conflicted; the client was answered 409.
    Exhausted,
    /// A single attempt under the client's own `If-Match` conflicted; the client was answered 409.
    PreconditionFailed,
    /// The update failed for another reason (bad input, missing key, unavailable, timeout).
    Error,
}

impl UpdateOutcome {
    pub fn label(self) -> &'static str {
        match self {
            UpdateOutcome::Success => "success",
            UpdateOutcome::Exhausted => "exhausted",
            UpdateOutcome::PreconditionFailed => "precondition_failed",
            UpdateOutcome::Error => "error",
        }
    }
}

/// The conflict and retry metrics of one member.
#[derive(Clone, Debug)]
pub struct KvMetrics {
    prefixes: Arc<PrefixFolder>,
    conflicts_total: IntCounterVec,
    update_attempts: HistogramVec,
    client_retries_total: IntCounterVec,
    client_retry_attempt: HistogramVec,
}

impl KvMetrics {
    pub(crate) fn register(
        registry: &Registry,
        prefixes: Arc<PrefixFolder>,
    ) -> prometheus::Result<Self> {
        Ok(KvMetrics {
            prefixes,
            conflicts_total: counter_vec(
                registry,
                "revkv_conflicts_total",
                "Failed revision preconditions (If-Match, If-None-Match) and txns whose compares \
                 failed, counted on the member that answered the client, by operation, key prefix \
                 (a txn takes the prefix of its first compare's key) and resolution: rejected \
                 (the client was answered 409 or its txn failed), merged (a three-way merge \
                 resolved it) or retried (the member retried its own lost compare-and-swap).",
                &["op", "prefix", "resolution"],
            )?,
            update_attempts: histogram_vec(
                registry,
                "revkv_update_attempts",
                "Attempts (read, apply, compare-and-swap) one server-side guaranteed update took, \
                 by operation and outcome.",
                &["op", "outcome"],
                attempt_buckets(),
            )?,
            client_retries_total: counter_vec(
                registry,
                "revkv_client_retries_total",
                "Requests that clients marked as retries with X-Retry-Attempt >= 1, by operation \
                 and key prefix.",
                &["op", "prefix"],
            )?,
            client_retry_attempt: histogram_vec(
                registry,
                "revkv_client_retry_attempt",
                "The X-Retry-Attempt number of client retries (n >= 1), by operation.",
                &["op"],
                attempt_buckets(),
            )?,
        })
    }

    /// Counts one conflict on `key` (for a txn, its first compare's key), resolved as
    /// `resolution`.
    pub fn record_conflict(&self, op: KvOp, resolution: ConflictResolution, key: &[u8]) {
        self.record_conflicts(op, resolution, key, 1);
    }

    /// Counts `count` conflicts on `key` resolved alike (the retries of one guaranteed update).
    pub fn record_conflicts(
        &self,
        op: KvOp,
        resolution: ConflictResolution,
        key: &[u8],
        count: u64,
    ) {
        if count == 0 {
            return;
        }
        let prefix = self.prefixes.label_for_key(key);
        self.conflicts_total
            .with_label_values(&[op.label(), prefix.as_str(), resolution.label()])
            .inc_by(count);
    }

    /// Records how many attempts one guaranteed update took and how it ended.
    pub fn record_update_attempts(&self, op: KvOp, outcome: UpdateOutcome, attempts: u32) {
        self.update_attempts
            .with_label_values(&[op.label(), outcome.label()])
            .observe(f64::from(attempts));
    }

    /// Records a request's `X-Retry-Attempt: attempt`; a first attempt (0) is not a retry and is
    /// not counted. `key` is `None` for requests that name no key.
    pub fn record_client_retry(&self, op: KvOp, key: Option<&[u8]>, attempt: u32) {
        if attempt == 0 {
            return;
        }
        let prefix = match key {
            Some(key) => self.prefixes.label_for_key(key),
            None => NO_KEY_PREFIX.to_string(),
        };
        self.client_retries_total
            .with_label_values(&[op.label(), prefix.as_str()])
            .inc();
        self.client_retry_attempt
            .with_label_values(&[op.label()])
            .observe(f64::from(attempt));
    }
}
