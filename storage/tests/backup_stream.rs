//! The snapshot stream as a backup: its header names the member, the cluster and the live keys;
//! `inspect_snapshot` checks a whole stream without a store and refuses a flipped byte or a cut
//! anywhere; `import_for_restore` keeps the history but takes the new cluster's raft position and
//! id, and refuses a bad stream with the store unchanged.

use crate::support;

use revkv_storage::{
    inspect_snapshot, ApplyEntry, EntryPayload, KeyRange, LogId, Request, RestoreTarget,
    SnapshotSummary,
};
use support::TestStore;

/// A store whose cluster was founded by a membership entry at log index 0, with some history.
fn store_with_history() -> TestStore {
    let mut store = TestStore::new();
    let founding = ApplyEntry {
        log_id: LogId {
            term: 0,
            node_id: 1,
            index: 0,
        },
        payload: EntryPayload::Membership(b"founding membership".to_vec()),
    };
    store.store.apply_batch(&[founding]).unwrap();
    store.put("a", "1");
    store.put("a", "2");
    store.put("b", "1");
    store.put("c", "1");
    store.delete(KeyRange::single("b"));
    store.apply(Request::Compact { revision: 3 });
    store
}

fn export(store: &TestStore, member: u64) -> (Vec<u8>, SnapshotSummary) {
    let mut stream = Vec::new();
    let summary = store
        .store
        .export_stream(Some(member), &mut stream)
        .unwrap();
    (stream, summary)
}

#[test]
fn the_header_names_the_member_the_cluster_and_the_live_keys() {
    let store = store_with_history();
    let (stream, exported) = export(&store, 7);
    let inspected = inspect_snapshot(&mut stream.as_slice()).unwrap();
    assert_eq!(inspected, exported);
    assert_eq!(inspected.member_id, Some(7));
    assert_eq!(inspected.live_keys, Some(2));
    assert_eq!(inspected.current_revision, store.revision());
    assert_eq!(inspected.compact_revision, 3);
    assert_eq!(
        inspected.stream_version,
        revkv_storage::codec::STREAM_VERSION
    );
    let founded = xxhash_rust::xxh3::xxh3_64(b"founding membership");
    assert_eq!(inspected.cluster_id, Some(founded));
    assert_eq!(store.store.cluster_id().unwrap(), Some(founded));
    // A later membership change keeps the founding id.
    let change = ApplyEntry {
        log_id: LogId {
            term: 1,
            node_id: 1,
            index: store.next_index,
        },
        payload: EntryPayload::Membership(b"another membership".to_vec()),
    };
    store.store.apply_batch(&[change]).unwrap();
    assert_eq!(store.store.cluster_id().unwrap(), Some(founded));
}

#[test]
fn inspection_refuses_every_flipped_byte_and_every_cut() {
    let mut store = store_with_history();
    store.apply(Request::LeaseGrant {
        id: 5,
        ttl_seconds: 60,
    });
    let (stream, _) = export(&store, 1);
    for position in 0..stream.len() {
        let mut flipped = stream.clone();
        flipped[position] ^= 0x01;
        assert!(
            inspect_snapshot(&mut flipped.as_slice()).is_err(),
            "a flipped bit at byte {position} of {} passed",
            stream.len()
        );
    }
    for length in 0..stream.len() {
        assert!(
            inspect_snapshot(&mut &stream[..length]).is_err(),
            "a stream cut at {length} of {} bytes passed",
            stream.len()
        );
    }
    let mut longer = stream.clone();
    longer.push(0);
    assert!(inspect_snapshot(&mut longer.as_slice()).is_err());
}

#[test]
fn a_restore_keeps_the_history_under_a_new_raft_position_and_cluster_id() {
    let source = store_with_history();
    let (stream, exported) = export(&source, 2);
    let membership_log_id = LogId {
        term: 0,
        node_id: 4,
        index: 0,
    };
    let target = RestoreTarget::new(&exported, b"new membership".to_vec(), membership_log_id);
    assert_ne!(Some(target.cluster_id), exported.cluster_id);
    let restored = TestStore::new();
    restored
        .store
        .import_for_restore(&mut stream.as_slice(), &target, &Default::default())
        .unwrap();
    let revision = source.revision();
    assert_eq!(restored.revision(), revision);
    assert_eq!(
        restored.store.hash(Some(revision)).unwrap(),
        source.store.hash(Some(revision)).unwrap()
    );
    assert_eq!(restored.store.applied_state().unwrap(), target.applied);
    assert_eq!(
        restored.store.cluster_id().unwrap(),
        Some(target.cluster_id)
    );
    assert_eq!(restored.get_at("a", 4).unwrap().unwrap().value, b"2");
    assert!(restored.get_at("a", 2).is_err(), "below the compaction");

    // A second restore of the same file and membership gets the same store and id.
    let again = TestStore::new();
    let same_target = RestoreTarget::new(&exported, b"new membership".to_vec(), membership_log_id);
    again
        .store
        .import_for_restore(&mut stream.as_slice(), &same_target, &Default::default())
        .unwrap();
    assert_eq!(same_target, target);
    assert_eq!(
        again.store.hash(None).unwrap(),
        restored.store.hash(None).unwrap()
    );
}

#[test]
fn a_restore_from_a_bad_stream_changes_nothing() {
    let source = store_with_history();
    let (stream, exported) = export(&source, 2);
    let target = RestoreTarget::new(
        &exported,
        b"m".to_vec(),
        LogId {
            term: 0,
            node_id: 1,
            index: 0,
        },
    );
    let mut existing = TestStore::new();
    existing.put("kept", "yes");
    let before = (
        existing.store.hash(None).unwrap(),
        existing.store.applied_state().unwrap(),
        existing.store.cluster_id().unwrap(),
    );
    let mut flipped = stream.clone();
    flipped[stream.len() / 2] ^= 0x10;
    for bad in [&flipped[..], &stream[..stream.len() - 1]] {
        assert!(existing
            .store
            .import_for_restore(&mut &bad[..], &target, &Default::default())
            .is_err());
        let after = (
            existing.store.hash(None).unwrap(),
            existing.store.applied_state().unwrap(),
            existing.store.cluster_id().unwrap(),
        );
        assert_eq!(after, before);
    }
}

/// etcd's snapshot envelope (`codec::etcd_envelope`): a stream wrapped in zero padding and a
/// SHA-256 reads as the stream; a damaged checksum makes the file read as plain bytes, which the
/// stream checker then refuses; and padding without a valid checksum is refused too.
#[test]
fn a_backup_in_etcds_envelope_reads_as_the_stream_and_a_bad_envelope_is_refused() {
    use revkv_storage::codec::etcd_envelope::Enveloper;
    use revkv_storage::open_backup_file;

    let mut store = support::TestStore::new();
    store.put("a", "1");
    store.put("b", "2");
    let mut stream = Vec::new();
    let plain = store.store.export_snapshot(&mut stream).unwrap();
    let mut enveloper = Enveloper::default();
    enveloper.feed(&stream);
    let mut enveloped = stream.clone();
    enveloped.extend_from_slice(&enveloper.finish());
    assert_eq!(enveloped.len() % 512, 32);

    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("etcdctl-saved.db");
    std::fs::write(&file, &enveloped).unwrap();
    let summary = revkv_storage::inspect_snapshot(&mut open_backup_file(&file).unwrap()).unwrap();
    assert_eq!(summary.checksum, plain.checksum);

    let mut damaged = enveloped.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    std::fs::write(&file, &damaged).unwrap();
    assert!(revkv_storage::inspect_snapshot(&mut open_backup_file(&file).unwrap()).is_err());

    // Padding alone, with no checksum, is more than the stream: refused.
    let mut padded = stream.clone();
    padded.extend_from_slice(&[0u8; 512]);
    std::fs::write(&file, &padded).unwrap();
    assert!(revkv_storage::inspect_snapshot(&mut open_backup_file(&file).unwrap()).is_err());
}
