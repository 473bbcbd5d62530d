//! The snapshot reads share between two commits (`read_snapshot.rs`): shared while no commit
//! follows it, never shared across a commit (including one that lands while a read is opening
//! its snapshot), and never in a defragmentation's way. Unit tests, because the race they plant
//! (a commit between a read's transaction and its storing the snapshot) needs the store's
//! insides to happen every time.

use crate::mvcc::read_snapshot::ReadSnapshot;
use crate::mvcc::test_support::{apply, open_store, put};
use crate::mvcc::{MvccStore, StoreOptions};
use crate::types::{KeyRange, RangeRequest, Request};

/// The value of `key` at the current revision, through the store's own read path.
fn value_of(store: &MvccStore, key: &str) -> Option<Vec<u8>> {
    let answer = store
        .range(&RangeRequest::of(KeyRange::single(key)))
        .unwrap();
    answer.response.kvs.into_iter().next().map(|kv| kv.value)
}

#[test]
fn reads_between_two_commits_share_one_snapshot_and_the_next_commit_ends_it() {
    let (_directory, store) = open_store();
    apply(&store, 1, put("a", "1"));
    assert!(!store.read_snapshot.holds_a_snapshot(), "a commit ends it");

    assert_eq!(value_of(&store, "a"), Some(b"1".to_vec()));
    assert!(store.read_snapshot.holds_a_snapshot(), "the read left it");
    let (first, first_state) = store.read_tables().unwrap();
    let (second, second_state) = store.read_tables().unwrap();
    assert!(first.history.is_same_table(&second.history));
    assert_eq!(first_state, second_state);

    apply(&store, 2, put("a", "2"));
    assert!(!store.read_snapshot.holds_a_snapshot());
    assert_eq!(
        value_of(&store, "a"),
        Some(b"2".to_vec()),
        "read your write"
    );
    let (after, after_state) = store.read_tables().unwrap();
    assert!(!after.history.is_same_table(&first.history));
    assert_eq!(
        after_state.current_revision,
        first_state.current_revision + 1
    );
}

#[test]
fn a_snapshot_opened_before_a_commit_is_not_left_for_the_reads_after_it() {
    let (_directory, store) = open_store();
    apply(&store, 1, put("a", "1"));
    // A read opens its snapshot, and a commit lands before the read stores it for others.
    let stale = store
        .read_snapshot
        .shared_or_fresh(|| {
            let (tables, state) = store.read_tables_fresh()?;
            apply(&store, 2, put("a", "2"));
            Ok::<_, crate::error::StorageFailure>(ReadSnapshot {
                history: tables.history,
                state,
            })
        })
        .unwrap();
    assert_eq!(
        stale.state.current_revision, 2,
        "the read itself sees its own snapshot"
    );
    assert!(!store.read_snapshot.holds_a_snapshot());
    assert_eq!(value_of(&store, "a"), Some(b"2".to_vec()));
}

#[test]
fn every_kind_of_commit_ends_the_shared_snapshot() {
    // A compaction cleans one entry in its own apply and leaves the rest to its steps.
    let directory = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        compaction_inline_entries: 1,
        ..StoreOptions::default()
    };
    let store = MvccStore::open(directory.path().join("state.redb"), options).unwrap();
    for index in 1..=5 {
        apply(&store, index, put("a", &index.to_string()));
    }
    let compact_to = store.read_tables().unwrap().1.current_revision;
    let commits: [(&str, &dyn Fn()); 4] = [
        ("an applied batch", &|| {
            apply(&store, 6, put("b", "1"));
        }),
        ("a flush", &|| store.flush().unwrap()),
        ("a compaction", &|| {
            apply(
                &store,
                7,
                Request::Compact {
                    revision: compact_to,
                },
            );
        }),
        ("a compaction's cleaning step", &|| {
            assert!(store.compaction_pending(), "the step has entries to clean");
            store.compact_step(1).unwrap();
        }),
    ];
    for (what, commit) in commits {
        value_of(&store, "a");
        assert!(store.read_snapshot.holds_a_snapshot(), "before {what}");
        commit();
        assert!(!store.read_snapshot.holds_a_snapshot(), "after {what}");
    }
}

#[test]
fn a_shared_snapshot_does_not_keep_a_defragmentation_waiting() {
    let (_directory, store) = open_store();
    for index in 1..=200 {
        apply(
            &store,
            index,
            put(&format!("k{index:03}"), &"v".repeat(1_000)),
        );
    }
    assert_eq!(
        value_of(&store, "k001"),
        Some("v".repeat(1_000).into_bytes())
    );
    assert!(store.read_snapshot.holds_a_snapshot());

    store.defragment().unwrap();
    assert_eq!(
        value_of(&store, "k200"),
        Some("v".repeat(1_000).into_bytes())
    );
}

/// Three threads read while one applies: every read answers at least the revision of the last
/// commit that finished before the read began.
#[test]
fn concurrent_reads_are_never_older_than_a_commit_that_finished_before_them() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let (_directory, store) = open_store();
    let store = Arc::new(store);
    let published = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (store, published, done) = (store.clone(), published.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) {
                    let committed = published.load(Ordering::Acquire);
                    let answer = store
                        .range(&RangeRequest::of(KeyRange::single("k")))
                        .unwrap();
                    assert!(
                        answer.revision >= committed,
                        "a read answered revision {} after revision {committed} was committed",
                        answer.revision
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for index in 1..=5_000u64 {
        let outcome = apply(&store, index, put("k", &index.to_string()));
        published.store(outcome.revision, Ordering::Release);
    }
    done.store(true, Ordering::Release);
    for reader in readers {
        assert!(reader.join().unwrap() > 0, "every reader read");
    }
}
