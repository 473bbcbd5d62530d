//! Counting conflicts (`revkv_conflicts_total{op, prefix, resolution}`): every answer that tells a
//! client its revision precondition failed is counted here exactly once, as `rejected`, by the
//! handler that answers, on the member the client asked. Forwarded writes reach the leader through
//! the peer protocol, not through these handlers, so no conflict is counted twice. The handlers
//! that resolve conflicts themselves (`kv_patch`, `kv_merge`) count `retried` and `merged` too.
//! Each is also noted in the member's hot-key top-k and its conflicts-per-interval history.

use std::time::Instant;

use revkv_metrics::{ConflictResolution, KvOp};

use super::error::ApiError;
use super::state::ApiState;
use crate::auth::authenticate::unix_now;
use crate::backend::KvBackend;
use crate::error::NodeError;
use crate::hot_keys::HotKeyEvent;

/// Counts `count` conflicts on `key` resolved as `resolution`: the metric, and the key in the
/// member's hot-key top-k (at the member's revision now).
pub fn note_conflicts<B: KvBackend>(
    state: &ApiState<B>,
    op: KvOp,
    resolution: ConflictResolution,
    key: &[u8],
    count: u64,
) {
    if count == 0 {
        return;
    }
    state
        .metrics
        .kv
        .record_conflicts(op, resolution, key, count);
    let revision = state.backend.header().map_or(0, |header| header.revision);
    state
        .hot_keys
        .record(key, HotKeyEvent::Conflict, count, revision, Instant::now());
    state
        .conflict_rates
        .record(HotKeyEvent::Conflict, count, unix_now());
}

/// Notes a client retry (`X-Retry-Attempt` >= 1) on `key` in the hot-key top-k.
pub fn note_client_retry<B: KvBackend>(state: &ApiState<B>, key: Option<&[u8]>, attempt: u32) {
    if let (Some(key), true) = (key, attempt > 0) {
        let revision = state.backend.header().map_or(0, |header| header.revision);
        state
            .hot_keys
            .record(key, HotKeyEvent::Retry, 1, revision, Instant::now());
        state
            .conflict_rates
            .record(HotKeyEvent::Retry, 1, unix_now());
    }
}

/// Counts `result` as a conflict on `key` if it is a `409 conflict` answer.
pub fn count_if_conflict<B: KvBackend, T>(
    state: &ApiState<B>,
    op: KvOp,
    key: &[u8],
    result: &Result<T, ApiError>,
) {
    if let Err(error) = result {
        if matches!(error.node_error(), NodeError::Conflict { .. }) {
            note_conflicts(state, op, ConflictResolution::Rejected, key, 1);
        }
    }
}

/// Counts a txn whose compares failed, under its first compare's key. A txn without compares
/// always succeeds, so it never gets here without a key.
pub fn count_failed_txn<B: KvBackend>(
    state: &ApiState<B>,
    succeeded: bool,
    first_compare_key: Option<&[u8]>,
) {
    if let (false, Some(key)) = (succeeded, first_compare_key) {
        note_conflicts(state, KvOp::Txn, ConflictResolution::Rejected, key, 1);
    }
}
