//! Round trips of the raft log store through close and reopen on real files: entries, the vote, the
//! committed id, truncation and purging, across several segment files; the invariants that refuse
//! a gap, an overlap or a backwards purge without writing anything (an append that does not
//! continue the log stops the member, a backwards purge is refused); torn and corrupted segments;
//! and the refusal of paths that are not a revkv raft log (a state file, garbage bytes, a plain
//! redb database, a directory of someone else's files), each error naming the path.

use std::path::{Path, PathBuf};

use revkv_storage::{
    AppendError, LogId, LogOptions, MvccStore, OpenError, RaftLogStore, StorageFailure,
    StoreOptions,
};

/// A raft log file in its own temporary directory, reopened at will.
struct LogOnDisk {
    directory: tempfile::TempDir,
    log: Option<RaftLogStore>,
}

impl LogOnDisk {
    fn create() -> Self {
        let directory = tempfile::tempdir().expect("temporary directory");
        let log = RaftLogStore::open(directory.path().join("raft-log"), LogOptions::default())
            .expect("create the raft log");
        LogOnDisk {
            directory,
            log: Some(log),
        }
    }

    fn path(&self) -> PathBuf {
        self.directory.path().join("raft-log")
    }

    fn log(&self) -> &RaftLogStore {
        self.log.as_ref().expect("the log is open")
    }

    /// Closes the log (dropping the redb database) and opens the same file again.
    fn close_and_reopen(&mut self) {
        drop(self.log.take());
        self.log =
            Some(RaftLogStore::open(self.path(), LogOptions::default()).expect("reopen the log"));
    }

    fn append_indexes(&self, indexes: impl IntoIterator<Item = u64>) -> Result<(), AppendError> {
        let entries: Vec<(u64, Vec<u8>)> = indexes
            .into_iter()
            .map(|index| (index, entry_bytes_for_index(index)))
            .collect();
        self.log().append(
            entries
                .iter()
                .map(|(index, bytes)| (*index, bytes.as_slice())),
        )
    }

    fn every_entry(&self) -> Vec<(u64, Vec<u8>)> {
        self.log().entries(0..u64::MAX).expect("read every entry")
    }

    fn last_index(&self) -> Option<u64> {
        self.log()
            .last_entry()
            .expect("read the last entry")
            .map(|(index, _)| index)
    }
}

fn log_id_at(term: u64, index: u64) -> LogId {
    LogId {
        term,
        node_id: 1,
        index,
    }
}

/// Distinct, recognisable bytes for each index, so a read that returns the wrong entry fails.
fn entry_bytes_for_index(index: u64) -> Vec<u8> {
    format!("entry number {index} of the test log").into_bytes()
}

fn expected_entries(indexes: impl IntoIterator<Item = u64>) -> Vec<(u64, Vec<u8>)> {
    indexes
        .into_iter()
        .map(|index| (index, entry_bytes_for_index(index)))
        .collect()
}

fn assert_invariant_error<T: std::fmt::Debug>(result: Result<T, StorageFailure>, context: &str) {
    match result {
        Err(StorageFailure::Invariant(_)) => {}
        other => panic!("{context}: expected StorageFailure::Invariant, got {other:?}"),
    }
}

/// An append that does not continue the log stops the member (a panic) before it writes anything.
fn assert_append_stops<T: std::fmt::Debug>(
    append: impl FnOnce() -> Result<T, AppendError>,
    context: &str,
) {
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(append));
    let Err(panic) = stopped else {
        panic!("{context}: expected the append to stop the member, got {stopped:?}");
    };
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        message.contains("the raft log is contiguous"),
        "{context}: the panic names the invariant: {message:?}"
    );
}

fn assert_foreign_file_naming(error: OpenError, expected_file: &Path, expected_kind: &str) {
    let display = error.to_string();
    match error {
        OpenError::ForeignFile { file, expected, .. } => {
            assert_eq!(file, expected_file, "the error names the refused file");
            assert_eq!(expected, expected_kind);
        }
        other => panic!("expected Error::ForeignFile, got {other:?}"),
    }
    assert!(
        display.contains(&expected_file.display().to_string()),
        "the message {display:?} names the file {}",
        expected_file.display()
    );
}

/// Deterministic pseudo-random bytes (xorshift64), so a failure reproduces exactly.
fn pseudo_random_bytes(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[test]
fn a_new_log_is_empty_and_has_no_vote_committed_or_purged_id() {
    let mut on_disk = LogOnDisk::create();
    for _ in 0..2 {
        assert_eq!(on_disk.every_entry(), Vec::new());
        assert_eq!(on_disk.log().last_entry().unwrap(), None);
        assert_eq!(on_disk.log().first_index().unwrap(), None);
        assert_eq!(on_disk.log().last_purged().unwrap(), None);
        assert_eq!(on_disk.log().vote().unwrap(), None);
        assert_eq!(on_disk.log().committed().unwrap(), None);
        on_disk.close_and_reopen();
    }
    assert_eq!(on_disk.log().path(), on_disk.path());
}

#[test]
fn appended_batches_survive_close_and_reopen_and_read_back_by_range() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    on_disk.append_indexes(4..=10).unwrap();
    on_disk.append_indexes([11]).unwrap();
    on_disk.append_indexes([]).unwrap();

    on_disk.close_and_reopen();

    assert_eq!(on_disk.every_entry(), expected_entries(1..=11));
    assert_eq!(on_disk.log().entries(4..7).unwrap(), expected_entries(4..7));
    assert_eq!(on_disk.log().entries(1..2).unwrap(), expected_entries([1]));
    assert_eq!(
        on_disk.log().entries(10..100).unwrap(),
        expected_entries(10..=11)
    );
    assert_eq!(on_disk.log().entries(5..5).unwrap(), Vec::new());
    let reversed_range = std::ops::Range { start: 7, end: 3 };
    assert_eq!(on_disk.log().entries(reversed_range).unwrap(), Vec::new());
    assert_eq!(on_disk.log().entries(12..20).unwrap(), Vec::new());
    assert_eq!(
        on_disk.log().last_entry().unwrap(),
        Some((11, entry_bytes_for_index(11)))
    );
    assert_eq!(on_disk.log().first_index().unwrap(), Some(1));

    // The reopened log continues exactly where it ended.
    on_disk.append_indexes(12..=13).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=13));
}

#[test]
fn a_log_may_start_at_any_index_when_nothing_was_ever_purged() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(40..=42).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.log().first_index().unwrap(), Some(40));
    assert_eq!(on_disk.last_index(), Some(42));
    assert_eq!(on_disk.every_entry(), expected_entries(40..=42));
}

#[test]
fn the_saved_vote_survives_reopen_and_the_latest_save_wins() {
    let mut on_disk = LogOnDisk::create();
    on_disk
        .log()
        .save_vote(b"term 1, voted for node 2")
        .unwrap();
    on_disk.close_and_reopen();
    assert_eq!(
        on_disk.log().vote().unwrap().as_deref(),
        Some(&b"term 1, voted for node 2"[..])
    );

    on_disk
        .log()
        .save_vote(b"term 2, voted for node 3")
        .unwrap();
    on_disk.close_and_reopen();
    assert_eq!(
        on_disk.log().vote().unwrap().as_deref(),
        Some(&b"term 2, voted for node 3"[..])
    );

    // Saving the vote touches nothing else.
    assert_eq!(on_disk.every_entry(), Vec::new());
    assert_eq!(on_disk.log().committed().unwrap(), None);
}

#[test]
fn the_committed_id_survives_a_clean_close_and_can_be_cleared() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=5).unwrap();
    on_disk.log().save_committed(Some(log_id_at(2, 4))).unwrap();
    assert_eq!(on_disk.log().committed().unwrap(), Some(log_id_at(2, 4)));
    on_disk.close_and_reopen();
    assert_eq!(on_disk.log().committed().unwrap(), Some(log_id_at(2, 4)));

    on_disk.log().save_committed(Some(log_id_at(3, 5))).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.log().committed().unwrap(), Some(log_id_at(3, 5)));

    on_disk.log().save_committed(None).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.log().committed().unwrap(), None);
    assert_eq!(on_disk.every_entry(), expected_entries(1..=5));
}

#[test]
fn truncate_after_an_index_keeps_the_prefix_across_reopen_and_the_log_continues_after_it() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=10).unwrap();
    on_disk.log().truncate_after(Some(6)).unwrap();
    on_disk.close_and_reopen();

    assert_eq!(on_disk.every_entry(), expected_entries(1..=6));
    assert_eq!(
        on_disk.log().last_entry().unwrap(),
        Some((6, entry_bytes_for_index(6)))
    );
    assert_eq!(on_disk.log().first_index().unwrap(), Some(1));

    // The truncated indexes are free again, and only the next one may be appended.
    assert_append_stops(
        || on_disk.append_indexes([8]),
        "append past the truncation point",
    );
    on_disk
        .log()
        .append([(7, &b"a new leader's entry 7"[..])])
        .unwrap();
    on_disk.close_and_reopen();
    assert_eq!(
        on_disk.log().entries(6..100).unwrap(),
        vec![
            (6, entry_bytes_for_index(6)),
            (7, b"a new leader's entry 7".to_vec())
        ]
    );

    // Truncating after the last index, or past it, changes nothing.
    on_disk.log().truncate_after(Some(7)).unwrap();
    on_disk.log().truncate_after(Some(100)).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.last_index(), Some(7));
}

#[test]
fn truncate_after_none_empties_the_log_across_reopen_and_keeps_the_vote() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=5).unwrap();
    on_disk.log().save_vote(b"vote").unwrap();
    on_disk.log().truncate_after(None).unwrap();
    on_disk.close_and_reopen();

    assert_eq!(on_disk.every_entry(), Vec::new());
    assert_eq!(on_disk.log().last_entry().unwrap(), None);
    assert_eq!(on_disk.log().first_index().unwrap(), None);
    assert_eq!(on_disk.log().vote().unwrap().as_deref(), Some(&b"vote"[..]));

    // Nothing was purged, so the log may start again at the beginning.
    on_disk.append_indexes(1..=2).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=2));
}

#[test]
fn purge_through_survives_reopen_and_appends_continue_after_the_remaining_entries() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=10).unwrap();
    on_disk.log().purge_through(log_id_at(2, 4)).unwrap();
    on_disk.close_and_reopen();

    assert_eq!(on_disk.log().last_purged().unwrap(), Some(log_id_at(2, 4)));
    assert_eq!(on_disk.log().first_index().unwrap(), Some(5));
    assert_eq!(on_disk.every_entry(), expected_entries(5..=10));
    assert_eq!(on_disk.log().entries(1..5).unwrap(), Vec::new());

    assert_append_stops(
        || on_disk.append_indexes([5]),
        "append at the purged index + 1",
    );
    assert_append_stops(|| on_disk.append_indexes([12]), "append with a gap");
    on_disk.append_indexes([11]).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(5..=11));
}

#[test]
fn after_purging_every_entry_the_next_append_must_continue_at_the_purged_index_plus_one() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=5).unwrap();
    on_disk.log().purge_through(log_id_at(3, 5)).unwrap();
    on_disk.close_and_reopen();

    assert_eq!(on_disk.log().last_purged().unwrap(), Some(log_id_at(3, 5)));
    assert_eq!(on_disk.log().first_index().unwrap(), None);
    assert_eq!(on_disk.log().last_entry().unwrap(), None);

    assert_append_stops(|| on_disk.append_indexes([1]), "restart the log at 1");
    assert_append_stops(|| on_disk.append_indexes([5]), "append at the purged index");
    assert_append_stops(
        || on_disk.append_indexes([7]),
        "append past the purged index + 1",
    );
    on_disk.append_indexes(6..=7).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(6..=7));
    assert_eq!(on_disk.log().first_index().unwrap(), Some(6));
}

#[test]
fn purging_past_the_last_entry_and_emptying_the_log_still_continues_at_the_purged_index_plus_one() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    // A snapshot installed from the leader may cover more than this log holds.
    on_disk.log().purge_through(log_id_at(4, 20)).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), Vec::new());
    assert_eq!(on_disk.log().last_purged().unwrap(), Some(log_id_at(4, 20)));
    assert_append_stops(
        || on_disk.append_indexes([4]),
        "continue the purged entries",
    );
    on_disk.append_indexes(21..=22).unwrap();

    on_disk.log().truncate_after(None).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), Vec::new());
    assert_append_stops(
        || on_disk.append_indexes([1]),
        "restart after truncating all",
    );
    on_disk.append_indexes([21]).unwrap();
    assert_eq!(on_disk.every_entry(), expected_entries([21]));
}

#[test]
fn appending_with_a_gap_is_refused_and_writes_nothing() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();

    assert_append_stops(
        || on_disk.append_indexes([5]),
        "append one entry past a gap",
    );
    // A batch that starts right but has a gap inside is refused as a whole.
    assert_append_stops(
        || on_disk.append_indexes([4, 5, 7]),
        "append a batch with a gap inside",
    );
    assert_eq!(on_disk.every_entry(), expected_entries(1..=3));

    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=3));
    on_disk.append_indexes(4..=5).unwrap();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=5));
}

#[test]
fn appending_an_overlapping_index_is_refused_and_writes_nothing() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=5).unwrap();

    for overlapping in [1, 3, 5] {
        assert_append_stops(
            || {
                on_disk
                    .log()
                    .append([(overlapping, &b"an overwriting entry"[..])])
            },
            &format!("overwrite entry {overlapping}"),
        );
    }
    // A batch that repeats an index inside itself is refused as a whole.
    assert_append_stops(
        || on_disk.append_indexes([6, 7, 7]),
        "append a batch that repeats an index",
    );
    assert_eq!(on_disk.every_entry(), expected_entries(1..=5));

    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=5));
}

#[test]
fn purging_backwards_is_refused_and_keeps_the_purged_id_and_entries() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=10).unwrap();
    on_disk.log().purge_through(log_id_at(1, 6)).unwrap();

    assert_invariant_error(
        on_disk.log().purge_through(log_id_at(1, 3)),
        "purge through an index before the last purged one",
    );
    assert_eq!(on_disk.log().last_purged().unwrap(), Some(log_id_at(1, 6)));

    on_disk.close_and_reopen();
    assert_invariant_error(
        on_disk.log().purge_through(log_id_at(1, 5)),
        "purge backwards after a reopen",
    );
    assert_eq!(on_disk.log().last_purged().unwrap(), Some(log_id_at(1, 6)));
    assert_eq!(on_disk.every_entry(), expected_entries(7..=10));

    // Moving forward is still allowed.
    on_disk.log().purge_through(log_id_at(1, 8)).unwrap();
    assert_eq!(on_disk.every_entry(), expected_entries(9..=10));
}

#[test]
fn opening_a_state_file_as_a_raft_log_fails_with_foreign_file_naming_the_path() {
    let directory = tempfile::tempdir().unwrap();
    let state_path = directory.path().join("state.redb");
    drop(MvccStore::open(&state_path, StoreOptions::default()).expect("create a state file"));

    let error = RaftLogStore::open(&state_path, LogOptions::default())
        .err()
        .expect("a state file is not a raft log");
    assert_foreign_file_naming(error, &state_path, "raft-log");

    // The refused file is still a working state file.
    let store = MvccStore::open(&state_path, StoreOptions::default()).expect("reopen as state");
    assert_eq!(store.current_revision().unwrap(), 1);
}

#[test]
fn opening_a_raft_log_segment_as_a_state_file_fails_naming_the_path() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=2).unwrap();
    drop(on_disk.log.take());
    let segment_path = segment_files(&on_disk.path())[0].clone();
    let segment_bytes = std::fs::read(&segment_path).unwrap();

    let error = MvccStore::open(&segment_path, StoreOptions::default())
        .err()
        .expect("a raft log segment is not a state file");
    assert!(error
        .to_string()
        .contains(&segment_path.display().to_string()));

    // The refused file is still a working raft log.
    assert_eq!(std::fs::read(&segment_path).unwrap(), segment_bytes);
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=2));
}

#[test]
fn opening_a_file_of_garbage_bytes_fails_naming_the_path_and_leaves_the_file_untouched() {
    let directory = tempfile::tempdir().unwrap();
    let garbage_path = directory.path().join("garbage.redb");
    let garbage = pseudo_random_bytes(64 * 1024, 0x5eed_0f9a_7b1d);
    std::fs::write(&garbage_path, &garbage).unwrap();

    let log_error = RaftLogStore::open(&garbage_path, LogOptions::default())
        .err()
        .expect("garbage is not a raft log");
    let log_message = log_error.to_string();
    assert!(
        log_message.contains(&garbage_path.display().to_string()),
        "the message {log_message:?} names the file"
    );

    let state_error = MvccStore::open(&garbage_path, StoreOptions::default())
        .err()
        .expect("garbage is not a state file");
    let state_message = state_error.to_string();
    assert!(
        state_message.contains(&garbage_path.display().to_string()),
        "the message {state_message:?} names the file"
    );

    assert_eq!(
        std::fs::read(&garbage_path).unwrap(),
        garbage,
        "a refused file is never overwritten"
    );
}

#[test]
fn opening_a_plain_redb_database_with_an_unrelated_table_fails_with_foreign_file() {
    const UNRELATED: redb::TableDefinition<&str, u64> =
        redb::TableDefinition::new("somebody_elses_table");
    let directory = tempfile::tempdir().unwrap();
    let plain_path = directory.path().join("plain.redb");
    {
        let database = redb::Database::create(&plain_path).unwrap();
        let write = database.begin_write().unwrap();
        write
            .open_table(UNRELATED)
            .unwrap()
            .insert("answer", 42)
            .unwrap();
        write.commit().unwrap();
    }

    let log_error = RaftLogStore::open(&plain_path, LogOptions::default())
        .err()
        .expect("a plain redb database is not a raft log");
    assert_foreign_file_naming(log_error, &plain_path, "raft-log");
    let state_error = MvccStore::open(&plain_path, StoreOptions::default())
        .err()
        .expect("a plain redb database is not a state file");
    assert_foreign_file_naming(state_error, &plain_path, "state");

    // Refusing the file did not add revkv tables to it or change its data.
    use redb::{ReadableDatabase, TableHandle};
    let database = redb::Database::create(&plain_path).unwrap();
    let read = database.begin_read().unwrap();
    let table_names: Vec<String> = read
        .list_tables()
        .unwrap()
        .map(|handle| handle.name().to_string())
        .collect();
    assert_eq!(table_names, vec!["somebody_elses_table".to_string()]);
    let table = read.open_table(UNRELATED).unwrap();
    assert_eq!(table.get("answer").unwrap().unwrap().value(), 42);
}

#[test]
fn opening_a_plain_redb_database_with_a_foreign_table_named_meta_fails_with_foreign_file() {
    // Same name as revkv's metadata table, different key and value types.
    const FOREIGN_META: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("meta");
    let directory = tempfile::tempdir().unwrap();
    let plain_path = directory.path().join("plain-with-meta.redb");
    {
        let database = redb::Database::create(&plain_path).unwrap();
        let write = database.begin_write().unwrap();
        write
            .open_table(FOREIGN_META)
            .unwrap()
            .insert(1, 2)
            .unwrap();
        write.commit().unwrap();
    }

    let error = RaftLogStore::open(&plain_path, LogOptions::default())
        .err()
        .expect("a plain redb database is not a raft log");
    assert_foreign_file_naming(error, &plain_path, "raft-log");
}

#[test]
fn opening_a_plain_redb_database_whose_meta_table_has_no_marker_fails_with_foreign_file() {
    const META_WITHOUT_MARKER: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new("meta");
    let directory = tempfile::tempdir().unwrap();
    let plain_path = directory.path().join("meta-without-marker.redb");
    {
        let database = redb::Database::create(&plain_path).unwrap();
        let write = database.begin_write().unwrap();
        write
            .open_table(META_WITHOUT_MARKER)
            .unwrap()
            .insert("something_else", &b"bytes"[..])
            .unwrap();
        write.commit().unwrap();
    }

    let error = MvccStore::open(&plain_path, StoreOptions::default())
        .err()
        .expect("a meta table without the marker is not a state file");
    assert_foreign_file_naming(error, &plain_path, "state");
}

#[test]
fn opening_a_raft_log_that_is_already_open_is_refused_without_calling_it_foreign() {
    let on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=2).unwrap();

    let error = RaftLogStore::open(on_disk.path(), LogOptions::default())
        .err()
        .expect("redb refuses a second open of the same file");
    let message = error.to_string();
    assert!(
        message.contains(&on_disk.path().display().to_string()),
        "the message {message:?} names the file"
    );
    assert!(
        !matches!(error, OpenError::ForeignFile { .. }),
        "a revkv raft log that is merely in use is not a foreign file: {message}"
    );
    assert_eq!(on_disk.every_entry(), expected_entries(1..=2));
}

/// The segment files of a log directory, oldest first.
fn segment_files(directory: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    files.sort();
    files
}

/// A log whose segments hold about two entries each, so a few appends span several files.
fn open_with_small_segments(path: &Path) -> RaftLogStore {
    RaftLogStore::open(path, LogOptions { segment_bytes: 100 }).expect("open the raft log")
}

#[test]
fn entries_spread_over_many_segments_read_back_and_purging_removes_whole_segments() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("raft-log");
    let log = open_with_small_segments(&path);
    for index in 1..=12 {
        let bytes = entry_bytes_for_index(index);
        log.append([(index, bytes.as_slice())]).unwrap();
    }
    let segments_before = segment_files(&path).len();
    assert!(
        segments_before >= 4,
        "{segments_before} segments for 12 entries"
    );
    assert_eq!(log.entries(3..10).unwrap(), expected_entries(3..10));

    log.purge_through(log_id_at(1, 7)).unwrap();
    assert!(segment_files(&path).len() < segments_before);
    assert_eq!(log.entries(0..100).unwrap(), expected_entries(8..=12));
    assert_eq!(log.first_index().unwrap(), Some(8));

    log.truncate_after(Some(9)).unwrap();
    drop(log);
    let log = open_with_small_segments(&path);
    assert_eq!(log.entries(0..100).unwrap(), expected_entries(8..=9));
    let bytes = entry_bytes_for_index(10);
    log.append([(10, bytes.as_slice())]).unwrap();
    assert_eq!(log.last_entry().unwrap().map(|(index, _)| index), Some(10));
}

#[test]
fn a_write_torn_by_a_crash_at_the_end_of_the_newest_segment_is_cut_off() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    // A reopen cuts the newest segment's preallocated space, so the file ends at its last record.
    on_disk.close_and_reopen();
    drop(on_disk.log.take());
    let segment = segment_files(&on_disk.path()).pop().unwrap();
    let whole_length = std::fs::metadata(&segment).unwrap().len();

    // Half of a fourth record: its header promises more bytes than the file holds.
    let mut torn = encoded_record(4);
    torn.truncate(torn.len() / 2);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(&torn);
    std::fs::write(&segment, &bytes).unwrap();

    assert_tail_cut_and_log_continues(&mut on_disk, &segment, 3, whole_length);
}

#[test]
fn a_newest_segment_whose_header_a_crash_lost_is_removed_and_the_log_continues() {
    // What a power cut leaves of a segment created just before it: the file, without its header
    // (empty, or zeros where the header was not written).
    for remnant in [Vec::new(), vec![0u8; 40]] {
        let mut on_disk = LogOnDisk::create();
        on_disk.append_indexes(1..=3).unwrap();
        // Starting a segment cuts the one before it back to its last record first.
        on_disk.close_and_reopen();
        drop(on_disk.log.take());
        let remnant_path = on_disk.path().join("00000000000000000004.seg");
        std::fs::write(&remnant_path, &remnant).unwrap();
        on_disk.close_and_reopen();
        assert!(!remnant_path.exists(), "the remnant is removed");
        assert!(on_disk.log().repaired_tail().is_some(), "and reported");
        assert_eq!(on_disk.every_entry(), expected_entries(1..=3));
        on_disk.append_indexes(4..=5).unwrap();
        on_disk.close_and_reopen();
        assert_eq!(on_disk.every_entry(), expected_entries(1..=5));
    }
}

#[test]
fn a_newest_segment_with_a_zeroed_header_but_records_after_it_is_refused_not_removed() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    on_disk.close_and_reopen();
    drop(on_disk.log.take());
    // Damage, not a crash's remnant: the records after the header may be acknowledged entries.
    let segment = overwrite_newest_segment_at(&on_disk.path(), 0, &[0u8; 17]);
    let error = RaftLogStore::open(on_disk.path(), LogOptions::default())
        .err()
        .expect("a zeroed header before records is damage");
    assert!(
        error.to_string().contains(&segment.display().to_string()),
        "{error}"
    );
    assert!(segment.exists(), "nothing is removed");
}

#[test]
fn a_newest_segment_with_a_foreign_header_is_still_refused() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    on_disk.close_and_reopen();
    drop(on_disk.log.take());
    let damaged = on_disk.path().join("00000000000000000004.seg");
    std::fs::write(&damaged, b"not a segment header at all").unwrap();
    let error = RaftLogStore::open(on_disk.path(), LogOptions::default())
        .err()
        .expect("a damaged header is not a crash's remnant");
    assert!(
        error.to_string().contains("00000000000000000004.seg"),
        "{error}"
    );
    assert!(damaged.exists(), "nothing is removed");
}

/// Reopens the log and checks that the damaged tail of `segment` was cut back to `length` bytes,
/// reported, and that entries 1 to `kept` are there and the log continues after them.
fn assert_tail_cut_and_log_continues(
    on_disk: &mut LogOnDisk,
    segment: &Path,
    kept: u64,
    length: u64,
) {
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=kept));
    assert_eq!(std::fs::metadata(segment).unwrap().len(), length);
    let repaired = on_disk
        .log()
        .repaired_tail()
        .expect("the open reports what it cut");
    assert!(
        repaired.contains(&segment.display().to_string()),
        "{repaired}"
    );
    on_disk.append_indexes(kept + 1..=kept + 2).unwrap();
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=kept + 2));
}

/// Writes `bytes` into the newest segment at `offset`, as a crash might have left them.
fn overwrite_newest_segment_at(path: &Path, offset: u64, bytes: &[u8]) -> PathBuf {
    use std::os::unix::fs::FileExt;
    let segment = segment_files(path).pop().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.write_all_at(bytes, offset).unwrap();
    segment
}

/// The length of the newest segment's records, found by a reopen (which cuts what follows them).
fn records_length_after_reopen(on_disk: &mut LogOnDisk) -> u64 {
    on_disk.close_and_reopen();
    let segment = segment_files(&on_disk.path()).pop().unwrap();
    std::fs::metadata(&segment).unwrap().len()
}

#[test]
fn appends_preallocate_space_that_a_reopen_gives_back_and_the_next_append_takes_again() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    let segment = segment_files(&on_disk.path()).pop().unwrap();
    let preallocated = std::fs::metadata(&segment).unwrap().len();
    let records = records_length_after_reopen(&mut on_disk);
    assert!(
        preallocated > records,
        "the file grew ahead of its records: {preallocated} bytes for {records} of records"
    );
    assert_eq!(on_disk.log().repaired_tail(), None, "zeros are not damage");
    assert_eq!(on_disk.every_entry(), expected_entries(1..=3));
    on_disk.append_indexes(4..=6).unwrap();
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), preallocated);
    on_disk.close_and_reopen();
    assert_eq!(on_disk.every_entry(), expected_entries(1..=6));
}

#[test]
fn a_write_torn_inside_preallocated_space_is_cut_off() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    let records = records_length_after_reopen(&mut on_disk);
    on_disk.append_indexes(4..=4).unwrap();
    drop(on_disk.log.take());
    // Entry 5 was being written into the zeros after entry 4 when the crash came.
    let entry_four_end = records + encoded_record(4).len() as u64;
    let mut torn = encoded_record(5);
    torn.truncate(torn.len() / 2);
    let segment = overwrite_newest_segment_at(&on_disk.path(), entry_four_end, &torn);

    assert_tail_cut_and_log_continues(&mut on_disk, &segment, 4, entry_four_end);
}

#[test]
fn bytes_after_a_gap_of_zeros_are_cut_and_never_read_as_entries() {
    let mut on_disk = LogOnDisk::create();
    on_disk.append_indexes(1..=3).unwrap();
    let records = records_length_after_reopen(&mut on_disk);
    on_disk.append_indexes(4..=4).unwrap();
    drop(on_disk.log.take());
    // A later page of an unacknowledged write reached the disk, an earlier one did not: a whole,
    // valid record for index 5 sits a page past the end, behind zeros.
    let segment = overwrite_newest_segment_at(&on_disk.path(), records + 8192, &encoded_record(5));
    let entry_four_end = records + encoded_record(4).len() as u64;
    assert_tail_cut_and_log_continues(&mut on_disk, &segment, 4, entry_four_end);
}

/// Entry `index`'s record as the log writes it.
fn encoded_record(index: u64) -> Vec<u8> {
    let mut record = Vec::new();
    revkv_storage::codec::encode_log_record(&mut record, index, &entry_bytes_for_index(index))
        .unwrap();
    record
}

#[test]
fn a_corrupted_record_in_an_older_segment_fails_the_open_naming_the_file() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("raft-log");
    let log = open_with_small_segments(&path);
    for index in 1..=6 {
        let bytes = entry_bytes_for_index(index);
        log.append([(index, bytes.as_slice())]).unwrap();
    }
    drop(log);
    let oldest = segment_files(&path).remove(0);
    let mut bytes = std::fs::read(&oldest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&oldest, &bytes).unwrap();

    let error = RaftLogStore::open(&path, LogOptions { segment_bytes: 100 })
        .err()
        .expect("a corrupted older segment is refused");
    assert!(
        matches!(error, OpenError::Storage(StorageFailure::Corrupt { .. })),
        "{error:?}"
    );
    assert!(error.to_string().contains(&oldest.display().to_string()));
    assert_eq!(
        std::fs::read(&oldest).unwrap(),
        bytes,
        "nothing is cut from it"
    );
}

#[test]
fn a_torn_metadata_slot_falls_back_to_the_last_durable_vote() {
    let mut on_disk = LogOnDisk::create();
    on_disk.log().save_vote(b"vote-1").unwrap();
    // Written without an fsync into the other slot; then that slot is torn.
    on_disk.log().save_committed(Some(log_id_at(1, 1))).unwrap();
    drop(on_disk.log.take());
    let meta_path = on_disk.path().join("meta");
    let mut bytes = std::fs::read(&meta_path).unwrap();
    let (first, second) = (&bytes[..4096], &bytes[4096..]);
    let torn_slot = if first.starts_with(b"revkvlmt") && second.starts_with(b"revkvlmt") {
        // The committed id went to the slot that did not hold the vote's durable write; tear
        // whichever has the higher sequence number (bytes 9..17).
        let sequence = |slot: &[u8]| u64::from_le_bytes(slot[9..17].try_into().unwrap());
        if sequence(first) > sequence(second) {
            0
        } else {
            1
        }
    } else {
        panic!("both slots are written by now");
    };
    bytes[torn_slot * 4096 + 30] ^= 0xff;
    std::fs::write(&meta_path, &bytes).unwrap();

    on_disk.close_and_reopen();
    assert_eq!(on_disk.log().vote().unwrap(), Some(b"vote-1".to_vec()));
    assert_eq!(on_disk.log().committed().unwrap(), None);
}

#[test]
fn a_directory_of_someone_elses_files_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("notes.txt"), b"mine").unwrap();
    let error = RaftLogStore::open(directory.path(), LogOptions::default())
        .err()
        .expect("a non-empty foreign directory is not a raft log");
    assert_foreign_file_naming(error, directory.path(), "raft-log");
    assert_eq!(
        std::fs::read(directory.path().join("notes.txt")).unwrap(),
        b"mine"
    );
}
