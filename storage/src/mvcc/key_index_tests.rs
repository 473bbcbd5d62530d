//! The key index seen from a read transaction that began before a compaction, and after a write
//! that failed: unit tests, because they work below the store's API, to make the race that
//! `IndexHandle::read_at` guards against happen every time, and a write fail after it changed the
//! index.

use crate::error::{ReadError, StorageFailure};
use crate::mvcc::key_index::IndexEntry;
use crate::mvcc::test_support::{apply, open_store, put};
use crate::mvcc::MvccStore;
use crate::types::{DeleteRangeRequest, KeyRange, Request};

/// Revision 2 puts a=1, 3 puts a=2, 4 deletes a, 5 puts b.
fn store_with_history() -> (tempfile::TempDir, MvccStore) {
    let (directory, store) = open_store();
    apply(&store, 1, put("a", "1"));
    apply(&store, 2, put("a", "2"));
    let delete = DeleteRangeRequest {
        range: KeyRange::single("a"),
        prev_kv: false,
    };
    apply(&store, 3, Request::DeleteRange(delete));
    apply(&store, 4, put("b", "1"));
    (directory, store)
}

#[test]
fn a_read_that_began_before_a_compaction_past_its_revision_is_refused_not_answered_wrong() {
    let (_directory, store) = store_with_history();
    let (tables, state) = store.read_tables().unwrap();
    assert_eq!((state.current_revision, state.compact_revision), (5, 0));
    assert_eq!(tables.kv_at(b"a", 2, true).unwrap().unwrap().value, b"1");

    // Compacting at 4 removes a@2, a@3 and the tombstone a@4 from the index. The old
    // transaction still sees revision 2 as readable, but the index no longer has its versions:
    // without the guard it would answer "no key a at revision 2".
    apply(&store, 5, Request::Compact { revision: 4 });
    store.finish_compaction(1_000).unwrap();
    for revision in [2, 3] {
        let refused = tables.kv_at(b"a", revision, true).unwrap_err();
        assert!(
            matches!(refused, ReadError::Compacted { requested, compact_revision: 4 } if requested == revision),
            "{refused}"
        );
        let mut visited = Vec::new();
        let walk = tables.visit_live_at(b"", None, revision, &mut |key, _| {
            visited.push(key.to_vec());
            Ok(true)
        });
        assert!(matches!(walk, Err(ReadError::Compacted { .. })), "{walk:?}");
    }
    // At or above the compact revision, the old transaction reads what it always could.
    assert!(tables.kv_at(b"a", 4, true).unwrap().is_none());
    assert_eq!(tables.kv_at(b"b", 5, true).unwrap().unwrap().value, b"1");
}

#[test]
fn a_read_that_began_before_new_writes_does_not_see_them() {
    let (_directory, store) = store_with_history();
    let (tables, state) = store.read_tables().unwrap();
    apply(&store, 5, put("c", "1"));
    apply(&store, 6, put("b", "2"));
    let mut visited = Vec::new();
    tables
        .visit_live_at(b"", None, state.current_revision, &mut |key, entry| {
            visited.push((key.to_vec(), entry.revision));
            Ok(true)
        })
        .unwrap();
    assert_eq!(visited, vec![(b"b".to_vec(), 5)]);
    let b = tables.kv_at(b"b", state.current_revision, true).unwrap();
    assert_eq!(b.unwrap().value, b"1");
}

#[test]
fn a_write_that_fails_after_changing_the_index_leaves_nothing_of_it_there() {
    let (_directory, store) = store_with_history();
    let sizes_before = store.key_index_sizes();
    let changes_before = store.key_index.read().change_count();
    // What a batch does before its commit: it indexes a version that the file then never receives.
    let never_committed = IndexEntry {
        revision: 6,
        position: 0,
        tombstone: false,
        create_revision: 6,
        version: 1,
        lease: 0,
        record_bytes: 10,
    };
    store
        .key_index
        .write()
        .insert(b"lost", never_committed)
        .unwrap();
    let failure = Err::<(), _>(StorageFailure::Invariant("the commit failed".into()));
    let reported = store
        .undo_index_on_failure(changes_before, failure)
        .unwrap_err();
    assert!(
        matches!(reported, StorageFailure::Invariant(_)),
        "{reported}"
    );
    assert_eq!(store.key_index_sizes(), sizes_before);

    // Revision 6 is taken by a write that commits, and reads see only it.
    assert_eq!(apply(&store, 5, put("next", "1")).revision, 6);
    let (tables, _) = store.read_tables().unwrap();
    assert!(tables.kv_at(b"lost", 6, true).unwrap().is_none());
    assert_eq!(tables.kv_at(b"next", 6, true).unwrap().unwrap().value, b"1");
}
