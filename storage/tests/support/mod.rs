//! Helpers shared by the storage integration tests: a store on a real redb file in a temporary
//! directory, and one-line ways to apply requests as consecutive raft log entries.
#![allow(dead_code)]

use revkv_storage::{
    ApplyEntry, ApplyOutcome, DeleteRangeRequest, EntryPayload, KeyRange, KeyValue, LogId,
    MvccStore, PutRequest, RangeRequest, Request, Response, StoreOptions,
};

/// A store in its own temporary directory, applying requests at consecutive log indexes.
pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub store: MvccStore,
    pub next_index: u64,
}

impl TestStore {
    pub fn new() -> Self {
        Self::with_options(StoreOptions::default())
    }

    pub fn with_options(options: StoreOptions) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = MvccStore::open(dir.path().join("state.redb"), options).expect("open store");
        TestStore {
            dir,
            store,
            next_index: 1,
        }
    }

    /// Closes and reopens the store on the same file.
    pub fn reopen(&mut self, options: StoreOptions) {
        let path = self.store.path().to_path_buf();
        let placeholder = tempfile::tempdir().expect("temporary directory");
        let old = std::mem::replace(
            &mut self.store,
            MvccStore::open(placeholder.path().join("x.redb"), StoreOptions::default())
                .expect("placeholder"),
        );
        drop(old);
        self.store = MvccStore::open(path, options).expect("reopen store");
    }

    pub fn apply(&mut self, request: Request) -> ApplyOutcome {
        let entry = log_entry(self.next_index, request);
        self.next_index += 1;
        let mut outcomes = self.store.apply_batch(&[entry]).expect("apply");
        outcomes.pop().expect("one outcome")
    }

    pub fn put(&mut self, key: &str, value: &str) -> ApplyOutcome {
        self.apply(put_request(key, value))
    }

    pub fn delete(&mut self, range: KeyRange) -> ApplyOutcome {
        self.apply(Request::DeleteRange(DeleteRangeRequest {
            range,
            prev_kv: true,
        }))
    }

    pub fn get(&self, key: &str) -> Option<KeyValue> {
        let result = self
            .store
            .range(&RangeRequest::of(KeyRange::single(key)))
            .expect("read");
        result.response.kvs.into_iter().next()
    }

    pub fn get_at(&self, key: &str, revision: u64) -> revkv_storage::Result<Option<KeyValue>> {
        let request = RangeRequest {
            revision: Some(revision),
            ..RangeRequest::of(KeyRange::single(key))
        };
        Ok(self.store.range(&request)?.response.kvs.into_iter().next())
    }

    pub fn revision(&self) -> u64 {
        self.store.current_revision().expect("revision")
    }
}

/// `request` as the committed log entry at `index` (term 1, from member 1).
/// Applies `entries`, which must stop the member (a panic naming `invariant`) before anything is
/// written: a batch that would apply an entry twice.
pub fn assert_apply_stops(store: &MvccStore, entries: &[ApplyEntry], invariant: &str) {
    let applied =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.apply_batch(entries)));
    let Err(panic) = applied else {
        panic!("expected the batch to stop the member, got {applied:?}");
    };
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        message.contains(invariant),
        "the panic names the invariant {invariant:?}: {message:?}"
    );
}

pub fn log_entry(index: u64, request: Request) -> ApplyEntry {
    ApplyEntry {
        log_id: LogId {
            term: 1,
            node_id: 1,
            index,
        },
        payload: EntryPayload::Request(request),
    }
}

pub fn put_request(key: &str, value: &str) -> Request {
    Request::Put(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        lease: 0,
        prev_kv: true,
    })
}

/// Unwraps a successful response.
pub fn ok(outcome: ApplyOutcome) -> Response {
    outcome.result.expect("request succeeded")
}

/// `stream` with its auth frame replaced by `auth` and the trailer recomputed, so the only fault
/// in the result is the one planted in the records.
pub fn replace_auth_frame(stream: &[u8], auth: &revkv_storage::auth::AuthState) -> Vec<u8> {
    use revkv_storage::codec::{read_frame, write_frame, SnapshotFrame};
    let mut reader = stream;
    let mut rewritten = Vec::new();
    let mut frames_after_header = 0u64;
    while let Some(frame) = read_frame::<_, SnapshotFrame>(&mut reader).unwrap() {
        let frame = match frame {
            SnapshotFrame::Auth(_) => {
                frames_after_header += 1;
                SnapshotFrame::Auth(auth.clone())
            }
            SnapshotFrame::Trailer { .. } => SnapshotFrame::Trailer {
                record_count: frames_after_header,
                checksum: xxhash_rust::xxh3::xxh3_64(&rewritten),
            },
            SnapshotFrame::StreamHeader(header) => {
                frames_after_header = 0;
                SnapshotFrame::StreamHeader(header)
            }
            other => {
                frames_after_header += 1;
                other
            }
        };
        write_frame(&mut rewritten, &frame).unwrap();
    }
    rewritten
}

/// Checks the two ways cluster state (alarms, intents) leaves a store through snapshots: a
/// snapshot of a store without any clears what `follower` had, and a restore of `stream` (taken
/// from a store that had some) starts a new cluster without them. `held` reads the state.
pub fn assert_cleared_by_quiet_snapshot_and_dropped_by_restore<T: std::fmt::Debug>(
    follower: &TestStore,
    stream: &[u8],
    held: impl Fn(&MvccStore) -> Vec<T>,
) -> TestStore {
    let quiet = TestStore::new();
    let mut quiet_stream = Vec::new();
    quiet.store.export_snapshot(&mut quiet_stream).unwrap();
    follower
        .store
        .import_snapshot(&mut quiet_stream.as_slice())
        .unwrap();
    let left = held(&follower.store);
    assert!(left.is_empty(), "a quiet snapshot left {left:?}");
    let restored = TestStore::new();
    let target = revkv_storage::RestoreTarget {
        applied: Default::default(),
        cluster_id: 99,
    };
    restored
        .store
        .import_for_restore(&mut &stream[..], &target, &Default::default())
        .unwrap();
    let kept = held(&restored.store);
    assert!(kept.is_empty(), "a restore kept {kept:?}");
    restored
}

/// `leader`'s raft snapshot, and a fresh store that installed it.
pub fn snapshot_and_a_store_that_installed_it(leader: &TestStore) -> (Vec<u8>, TestStore) {
    let mut stream = Vec::new();
    leader.store.export_snapshot(&mut stream).unwrap();
    let follower = TestStore::new();
    follower
        .store
        .import_snapshot(&mut stream.as_slice())
        .unwrap();
    (stream, follower)
}
