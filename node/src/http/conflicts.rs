//! Counting conflicts (`revkv_conflicts_total{op, prefix}`): every answer that tells a client its
//! revision precondition failed is counted here exactly once, by the handler that answers, on the
//! member the client asked. Forwarded writes reach the leader through the peer protocol, not
//! through these handlers, so no conflict is counted twice.

use revkv_metrics::KvOp;

use super::error::ApiError;
use super::state::ApiState;
use crate::backend::KvBackend;
use crate::error::NodeError;

/// Counts `result` as a conflict on `key` if it is a `409 conflict` answer.
pub fn count_if_conflict<B: KvBackend, T>(
    state: &ApiState<B>,
    op: KvOp,
    key: &[u8],
    result: &Result<T, ApiError>,
) {
    if let Err(error) = result {
        if matches!(error.node_error(), NodeError::Conflict { .. }) {
            state.metrics.kv.record_conflict(op, key);
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
        state.metrics.kv.record_conflict(KvOp::Txn, key);
    }
}
