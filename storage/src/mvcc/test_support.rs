//! Helpers for the store's unit tests.

use crate::mvcc::{MvccStore, StoreOptions};
use crate::types::{ApplyEntry, ApplyOutcome, EntryPayload, LogId, PutRequest, Request};

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

/// A put of `key` = `value`, without a lease or the previous value.
pub fn put(key: &str, value: &str) -> Request {
    Request::Put(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        lease: 0,
        prev_kv: false,
    })
}

/// An empty store with the default options in a directory of its own (kept while the directory
/// lives).
pub fn open_store() -> (tempfile::TempDir, MvccStore) {
    let directory = tempfile::tempdir().unwrap();
    let store = MvccStore::open(directory.path().join("state.redb"), StoreOptions::default());
    (directory, store.unwrap())
}
