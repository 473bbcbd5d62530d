//! A revkv store written as an etcd snapshot and read back with this crate's own reader gives
//! the same history: every record at its revision and position, the leases, the compaction
//! floor and the current revision. A store etcd could not reproduce, or one with users, is
//! refused. (etcd's own tools read the file in node/bin/tests/etcd_snapshot_out.rs.)

use revkv_etcd_snapshot::{convert_revkv_backup, export_store, EtcdSnapshot, EtcdSnapshotError};
use revkv_storage::codec::SnapshotFrame;
use revkv_storage::{
    ApplyEntry, DeleteRangeRequest, EntryPayload, KeyRange, LogId, MvccStore, PutRequest, Request,
    StoreOptions, TxnOp, TxnRequest,
};

struct Store {
    _directory: tempfile::TempDir,
    store: MvccStore,
    next_index: u64,
}

impl Store {
    fn new() -> Store {
        let directory = tempfile::tempdir().unwrap();
        let store =
            MvccStore::open(directory.path().join("state.redb"), StoreOptions::default()).unwrap();
        Store {
            _directory: directory,
            store,
            next_index: 1,
        }
    }

    fn apply(&mut self, request: Request) {
        let entry = ApplyEntry {
            log_id: LogId {
                term: 1,
                node_id: 1,
                index: self.next_index,
            },
            payload: EntryPayload::Request(request),
        };
        self.next_index += 1;
        let outcome = self.store.apply_batch(&[entry]).unwrap().pop().unwrap();
        outcome.result.expect("the request succeeds");
    }
}

fn put(key: &str, value: &str, lease: i64) -> PutRequest {
    PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        prev_kv: false,
    }
}

/// Overwrites, a delete, a txn of three changes in one revision, a leased key, a compaction.
fn store_with_history() -> Store {
    let mut store = Store::new();
    store.apply(Request::Put(put("a", "1", 0)));
    store.apply(Request::Put(put("b", "1", 0)));
    store.apply(Request::Put(put("a", "2", 0)));
    store.apply(Request::Txn(TxnRequest {
        compare: Vec::new(),
        success: vec![
            TxnOp::Put(put("c", "1", 0)),
            TxnOp::Put(put("d", "1", 0)),
            TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange::single("b"),
                prev_kv: false,
            }),
        ],
        failure: Vec::new(),
    }));
    store.apply(Request::LeaseGrant {
        id: 7,
        ttl_seconds: 600,
    });
    store.apply(Request::Put(put("leased", "v", 7)));
    store.apply(Request::Compact { revision: 4 });
    store.apply(Request::Put(put("a", "3", 0)));
    store
}

/// The store's own frames: records and leases (the lease's renewal index is revkv's own).
fn frames_of(store: &MvccStore) -> Vec<SnapshotFrame> {
    let mut frames = Vec::new();
    store
        .export_frames(None, &mut |frame| {
            if let SnapshotFrame::Record { .. } = frame {
                frames.push(frame.clone());
            }
            if let SnapshotFrame::LeaseState {
                id,
                ttl_seconds,
                checkpointed_remaining_ms,
                ..
            } = frame
            {
                frames.push(SnapshotFrame::LeaseState {
                    id: *id,
                    ttl_seconds: *ttl_seconds,
                    checkpointed_remaining_ms: *checkpointed_remaining_ms,
                    renewed_at_index: 0,
                });
            }
            Ok::<(), revkv_storage::Error>(())
        })
        .unwrap();
    frames
}

fn frames_read_back(path: &std::path::Path) -> (EtcdSnapshot, Vec<SnapshotFrame>) {
    let snapshot = EtcdSnapshot::open(path).unwrap();
    let mut frames = Vec::new();
    snapshot
        .feed(&mut |frame| {
            frames.push(frame);
            Ok(())
        })
        .unwrap();
    (snapshot, frames)
}

fn read_write_file(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap()
}

#[test]
fn a_store_written_as_an_etcd_snapshot_reads_back_with_its_whole_history() {
    let source = store_with_history();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("etcd.db");
    let (_, export) = export_store(&source.store, read_write_file(&path)).unwrap();
    assert_eq!(
        (
            export.current_revision,
            export.compact_revision,
            export.leases
        ),
        (7, 4, 1)
    );
    // The bolt file, then etcdctl's trailer.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), export.bytes + 32);

    let (snapshot, frames) = frames_read_back(&path);
    assert!(snapshot.had_trailer);
    let history = snapshot.history().unwrap();
    assert_eq!((history.current_revision, history.compact_revision), (7, 4));
    assert_eq!(frames, frames_of(&source.store));
    assert!(
        frames.len() >= 5,
        "the history reached the file: {frames:?}"
    );
}

#[test]
fn a_revkv_backup_converts_to_the_same_etcd_snapshot() {
    let source = store_with_history();
    let directory = tempfile::tempdir().unwrap();
    let mut stream = Vec::new();
    source.store.export_stream(Some(1), &mut stream).unwrap();
    let converted = directory.path().join("converted.db");
    convert_revkv_backup(&mut stream.as_slice(), read_write_file(&converted)).unwrap();
    let exported = directory.path().join("exported.db");
    export_store(&source.store, read_write_file(&exported)).unwrap();
    assert_eq!(
        std::fs::read(&converted).unwrap(),
        std::fs::read(&exported).unwrap()
    );

    // A damaged backup is refused, not converted.
    let middle = stream.len() / 2;
    stream[middle] ^= 0x01;
    let refused = directory.path().join("refused.db");
    assert!(convert_revkv_backup(&mut stream.as_slice(), read_write_file(&refused)).is_err());
}

#[test]
fn users_with_bcrypt_hashes_go_out_and_come_back_and_argon2_ones_are_refused() {
    use revkv_storage::auth::AuthRequest;
    let mut source = store_with_history();
    source.apply(Request::Auth(AuthRequest::UserAdd {
        name: "alice".into(),
        // What etcd 3.4 wrote for `alice:wonderland`.
        password_hash: "$2a$10$QR3YAb0LZE8/YqbeBVAo0.kP6LdHO8OGzOAziYL/f4T08xTZA0FXq".into(),
    }));
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("etcd.db");
    export_store(&source.store, read_write_file(&path)).unwrap();
    let snapshot = EtcdSnapshot::open(&path).unwrap();
    assert_eq!(
        snapshot.auth_state().unwrap().as_ref(),
        Some(&*source.store.auth())
    );

    source.apply(Request::Auth(AuthRequest::UserAdd {
        name: "bob".into(),
        password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
    }));
    let refused_path = directory.path().join("refused.db");
    let refused = export_store(&source.store, read_write_file(&refused_path));
    assert!(
        matches!(refused, Err(EtcdSnapshotError::Unsupported(ref why)) if why.contains("bob")),
        "{:?}",
        refused.map(|(_, export)| export)
    );
}
