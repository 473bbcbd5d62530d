//! Lease data written before checkpoints existed still loads: a version-1 lease record in a
//! layout-3 file, and a snapshot stream whose leases are `Lease` frames. Unit tests, because they
//! write those old bytes below the store's API.

use std::path::Path;

use redb::Database;
use xxhash_rust::xxh3::Xxh3;

use crate::codec::{self, LeaseRecordV1, SnapshotFrame};
use crate::mvcc::tables::LEASES;
use crate::mvcc::test_support::apply;
use crate::mvcc::{MvccStore, StoreOptions};
use crate::types::{CheckpointedLease, LeaseInfo, Request, Response};

fn checkpoint(computed_at_index: u64, id: i64, remaining_ttl_ms: u64) -> Request {
    Request::LeaseCheckpoint {
        computed_at_index,
        leases: vec![CheckpointedLease {
            id,
            remaining_ttl_ms,
        }],
    }
}

/// Rewrites lease 7's record in the way layout 3 stored it before checkpoints.
fn write_version_1_record(path: &Path) {
    let database = Database::create(path).unwrap();
    let write = database.begin_write().unwrap();
    {
        let mut leases = write.open_table(LEASES).unwrap();
        let old = codec::encode(&LeaseRecordV1 {
            ttl_seconds: 30,
            attached_keys: 0,
        })
        .unwrap();
        leases.insert(7, old.as_slice()).unwrap();
    }
    write.commit().unwrap();
}

#[test]
fn a_lease_record_written_before_checkpoints_loads_and_takes_a_checkpoint() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("state.redb");
    let store = MvccStore::open(&path, StoreOptions::default()).unwrap();
    let grant = Request::LeaseGrant {
        id: 7,
        ttl_seconds: 30,
    };
    assert!(apply(&store, 1, grant).result.is_ok());
    drop(store);
    write_version_1_record(&path);

    let store = MvccStore::open(&path, StoreOptions::default()).unwrap();
    let expected = LeaseInfo {
        id: 7,
        granted_ttl_seconds: 30,
        attached_keys: 0,
        checkpointed_remaining_ms: None,
    };
    assert_eq!(store.leases().unwrap(), std::slice::from_ref(&expected));
    // An old record counts as renewed at index 0, so any checkpoint applies to it.
    let recorded = apply(&store, 2, checkpoint(0, 7, 12_000));
    assert_eq!(
        recorded.result.unwrap(),
        Response::LeaseCheckpoint { recorded: vec![7] }
    );
    let checkpointed = LeaseInfo {
        checkpointed_remaining_ms: Some(12_000),
        ..expected
    };
    assert_eq!(store.lease(7).unwrap(), Some(checkpointed));
}

/// Re-encodes a snapshot stream with every `LeaseState` frame turned into the older `Lease`
/// frame, and a trailer whose checksum covers the new bytes.
fn with_old_lease_frames(stream: &[u8]) -> Vec<u8> {
    let mut reader = stream;
    let mut frames = Vec::new();
    while let Some(frame) = codec::read_frame::<_, SnapshotFrame>(&mut reader).unwrap() {
        frames.push(frame);
    }
    let mut old = Vec::new();
    let mut hasher = Xxh3::new();
    for frame in frames {
        let frame = match frame {
            SnapshotFrame::LeaseState {
                id, ttl_seconds, ..
            } => SnapshotFrame::Lease { id, ttl_seconds },
            SnapshotFrame::Trailer { record_count, .. } => SnapshotFrame::Trailer {
                record_count,
                checksum: hasher.digest(),
            },
            other => other,
        };
        let start = old.len();
        codec::write_frame(&mut old, &frame).unwrap();
        hasher.update(&old[start..]);
    }
    old
}

#[test]
fn a_snapshot_stream_written_before_checkpoints_imports_with_no_checkpoints() {
    let directory = tempfile::tempdir().unwrap();
    let store = MvccStore::open(directory.path().join("a.redb"), StoreOptions::default()).unwrap();
    let grant = Request::LeaseGrant {
        id: 7,
        ttl_seconds: 30,
    };
    assert!(apply(&store, 1, grant).result.is_ok());
    assert!(apply(&store, 2, checkpoint(1, 7, 9_000)).result.is_ok());
    let mut stream = Vec::new();
    store.export_snapshot(&mut stream).unwrap();

    let copy = MvccStore::open(directory.path().join("b.redb"), StoreOptions::default()).unwrap();
    copy.import_snapshot(&mut stream.as_slice()).unwrap();
    assert_eq!(
        copy.leases().unwrap(),
        store.leases().unwrap(),
        "a current stream carries the checkpoint"
    );

    let old = with_old_lease_frames(&stream);
    let older = MvccStore::open(directory.path().join("c.redb"), StoreOptions::default()).unwrap();
    older.import_snapshot(&mut old.as_slice()).unwrap();
    let lease = older.lease(7).unwrap().unwrap();
    assert_eq!(
        (lease.granted_ttl_seconds, lease.checkpointed_remaining_ms),
        (30, None)
    );
}
