//! The chunked export (`snapshot_stream`) and `restore_member` in-process, on real files:
//! chunks are bounded and add up to the store's stream; a reader that goes away stops the export;
//! a restore makes a data directory whose state and raft log say "new cluster at index 0 with
//! this membership"; and a flipped byte, a cut, or a non-empty data directory is refused with an
//! error naming the file, with nothing written.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use revkv_raft::snapshot_stream::ChunkWriter;
use revkv_raft::{
    restore_member, ChunkLimits, ChunkedExport, MemberNode, RestorePhase, RestorePlan,
};
use revkv_storage::{
    codec, inspect_snapshot, ApplyEntry, EntryPayload, LogId, LogOptions, MvccStore, PutRequest,
    RaftLogStore, Request, StoreOptions,
};

/// A store with `keys` keys of `value_bytes` bytes each, written one entry per key.
fn store_with_keys(directory: &Path, keys: u64, value_bytes: usize) -> Arc<MvccStore> {
    let store = MvccStore::open(directory.join("state.redb"), StoreOptions::default()).unwrap();
    let entries: Vec<ApplyEntry> = (1..=keys)
        .map(|index| ApplyEntry {
            log_id: LogId {
                term: 1,
                node_id: 1,
                index,
            },
            payload: EntryPayload::Request(Request::Put(PutRequest {
                key: format!("key/{index:06}").into_bytes(),
                value: vec![b'v'; value_bytes],
                lease: 0,
                prev_kv: false,
            })),
        })
        .collect();
    store.apply_batch(&entries).unwrap();
    Arc::new(store)
}

fn members(ids: &[u64]) -> BTreeMap<u64, MemberNode> {
    ids.iter()
        .map(|id| {
            let node = MemberNode {
                peer_url: format!("http://127.0.0.1:{}", 7100 + id),
                client_url: String::new(),
                grpc_url: None,
            };
            (*id, node)
        })
        .collect()
}

fn backup_file(directory: &Path) -> std::path::PathBuf {
    let store = store_with_keys(directory, 200, 100);
    let path = directory.join("backup.revkv");
    let mut file = std::fs::File::create(&path).unwrap();
    store.export_stream(Some(1), &mut file).unwrap();
    file.sync_all().unwrap();
    path
}

#[tokio::test]
async fn chunks_are_bounded_and_add_up_to_the_stream() {
    let directory = tempfile::tempdir().unwrap();
    let store = store_with_keys(directory.path(), 500, 1000);
    let limits = ChunkLimits {
        chunk_bytes: 4096,
        chunks_in_flight: 2,
    };
    let mut received = Vec::new();
    let mut chunks = 0;
    let summary = ChunkedExport::start(store.clone(), Some(3), limits)
        .for_each_chunk(|chunk| {
            assert!(!chunk.is_empty() && chunk.len() <= limits.chunk_bytes);
            chunks += 1;
            received.extend_from_slice(&chunk);
            Ok(())
        })
        .await
        .unwrap();
    assert!(chunks > 100, "only {chunks} chunks");
    let inspected = inspect_snapshot(&mut received.as_slice()).unwrap();
    assert_eq!(inspected, summary);
    assert_eq!(inspected.member_id, Some(3));
    assert_eq!(inspected.live_keys, Some(500));
    let mut direct = Vec::new();
    store.export_stream(Some(3), &mut direct).unwrap();
    assert_eq!(direct, received);
}

#[test]
fn a_chunk_writer_whose_reader_went_away_fails() {
    let (sender, receiver) = tokio::sync::mpsc::channel(1);
    let mut writer = ChunkWriter::new(sender, 4);
    drop(receiver);
    let error = writer.write_all(b"more than one chunk").unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe);
}

#[test]
fn a_restored_member_starts_a_new_cluster_at_index_zero_with_its_membership() {
    let directory = tempfile::tempdir().unwrap();
    let backup = backup_file(directory.path());
    let source = inspect_snapshot(&mut std::fs::File::open(&backup).unwrap()).unwrap();
    let restore = |id: u64| {
        let plan = RestorePlan::new(
            backup.clone(),
            directory.path().join(format!("member-{id}")),
            id,
            members(&[2, 3, 4]),
        );
        restore_member(&plan).unwrap();
        // The check counted every record, and the write wrote as many.
        let progress = &plan.progress;
        assert_eq!(progress.phase(), RestorePhase::Writing);
        assert!(progress.records() > 0 && progress.records() <= source.records);
        assert_eq!(
            progress.checked_totals(),
            (progress.records(), progress.bytes())
        );
        plan.data_dir
    };
    let restored: Vec<_> = [2, 3, 4].into_iter().map(restore).collect();
    let mut seen = Vec::new();
    for data_dir in &restored {
        let store = MvccStore::open(data_dir.join("state.redb"), StoreOptions::default()).unwrap();
        let applied = store.applied_state().unwrap();
        let log_id = LogId {
            term: 0,
            node_id: 2,
            index: 0,
        };
        assert_eq!(applied.last_applied, Some(log_id));
        let membership: revkv_raft::types::alias::StoredMembership =
            codec::decode(applied.membership.as_deref().unwrap()).unwrap();
        let voters: Vec<u64> = membership.membership().voter_ids().collect();
        assert_eq!(voters, vec![2, 3, 4]);
        assert_eq!(store.current_revision().unwrap(), source.current_revision);
        let log = RaftLogStore::open(data_dir.join("raft-log"), LogOptions::default()).unwrap();
        assert_eq!(log.last_purged().unwrap(), Some(log_id));
        seen.push((store.hash(None).unwrap(), store.cluster_id().unwrap()));
    }
    assert!(seen.iter().all(|other| *other == seen[0]), "{seen:?}");
    assert_ne!(seen[0].1, source.cluster_id);
    assert!(seen[0].1.is_some());
    // Only the backup and the three data directories: no staging directory is left.
    assert_eq!(
        std::fs::read_dir(directory.path()).unwrap().count(),
        1 + 1 + 3
    );
}

/// Asserts that restoring `backup` into a new directory fails with an error naming `named`, and
/// that the parent directory holds exactly what it held before.
fn assert_refused_and_nothing_written(backup: &Path, data_dir: &Path, named: &Path) -> String {
    let parent = data_dir.parent().unwrap();
    let listing = |directory: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = listing(parent);
    let plan = RestorePlan::new(
        backup.to_path_buf(),
        data_dir.to_path_buf(),
        1,
        members(&[1, 2, 3]),
    );
    let error = restore_member(&plan).unwrap_err().to_string();
    assert!(
        error.contains(&named.display().to_string()),
        "the error does not name {}: {error}",
        named.display()
    );
    assert_eq!(listing(parent), before, "the restore wrote something");
    error
}

#[test]
fn a_corrupt_or_truncated_backup_is_refused_and_nothing_is_written() {
    let directory = tempfile::tempdir().unwrap();
    let backup = backup_file(directory.path());
    let bytes = std::fs::read(&backup).unwrap();
    let target = directory.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let data_dir = target.join("member-1");

    let flipped = directory.path().join("flipped.revkv");
    let mut damaged = bytes.clone();
    damaged[bytes.len() / 2] ^= 0x04;
    std::fs::write(&flipped, &damaged).unwrap();
    let error = assert_refused_and_nothing_written(&flipped, &data_dir, &flipped);
    assert!(error.contains("not a usable backup"), "{error}");

    let cut = directory.path().join("cut.revkv");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    assert_refused_and_nothing_written(&cut, &data_dir, &cut);

    let missing = directory.path().join("missing.revkv");
    assert_refused_and_nothing_written(&missing, &data_dir, &missing);
}

#[test]
fn a_data_directory_that_is_not_empty_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let backup = backup_file(directory.path());
    let data_dir = directory.path().join("used");
    std::fs::create_dir(&data_dir).unwrap();
    std::fs::write(data_dir.join("state.redb"), b"someone's data").unwrap();
    assert_refused_and_nothing_written(&backup, &data_dir, &data_dir);
    assert_eq!(
        std::fs::read(data_dir.join("state.redb")).unwrap(),
        b"someone's data"
    );

    // An empty directory is taken.
    let empty = directory.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let plan = RestorePlan::new(backup, empty.clone(), 1, members(&[1]));
    let restored = restore_member(&plan);
    assert!(restored.is_ok(), "{restored:?}");
    assert!(empty.join("state.redb").is_file());
}
