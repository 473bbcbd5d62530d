//! Helpers for the store's unit tests.

use crate::mvcc::MvccStore;
use crate::types::{ApplyEntry, ApplyOutcome, EntryPayload, LogId, Request};

/// Applies `request` as the committed log entry at `index` (term 1, from member 1), alone in its
/// batch, and answers its outcome.
pub fn apply(store: &MvccStore, index: u64, request: Request) -> ApplyOutcome {
    let entry = ApplyEntry {
        log_id: LogId {
            term: 1,
            node_id: 1,
            index,
        },
        payload: EntryPayload::Request(request),
    };
    store.apply_batch(&[entry]).unwrap().pop().unwrap()
}
