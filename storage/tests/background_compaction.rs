//! Compaction in bounded background steps: after `Request::Compact` the compact revision holds at
//! once, while the window is cleaned step by step (`MvccStore::compact_step`). A store mid-way
//! answers every read and hashes exactly like a store that cleaned everything inside the apply;
//! the pending window survives a reopen, grows with a later compaction, and travels through a
//! snapshot, whose importer cleans it.

use crate::support;

use revkv_storage::{Error, KeyRange, MvccStore, RangeRequest, Request, StoreOptions};
use support::{ok, TestStore};

/// A store that cleans nothing inside the apply: everything is left to the background steps.
fn background_only() -> StoreOptions {
    StoreOptions {
        compaction_inline_entries: 0,
        ..StoreOptions::default()
    }
}

/// A store that cleans every window inside the apply, as before compaction had steps.
fn all_inline() -> StoreOptions {
    StoreOptions {
        compaction_inline_entries: usize::MAX,
        ..StoreOptions::default()
    }
}

/// 40 keys, each written 30 times, a third of them deleted: 1,200 puts and some tombstones.
fn write_history(test: &mut TestStore) {
    for round in 0..30 {
        for key in 0..40 {
            test.put(&format!("k/{key:02}"), &format!("v{round}"));
        }
    }
    for key in (0..40).step_by(3) {
        ok(test.delete(KeyRange::single(format!("k/{key:02}"))));
    }
}

fn everything_at(store: &MvccStore, revision: Option<u64>) -> Vec<(Vec<u8>, Vec<u8>, u64)> {
    let request = RangeRequest {
        revision,
        ..RangeRequest::of(KeyRange::prefix("k/"))
    };
    let read = store.range(&request).unwrap();
    read.response
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.value, kv.mod_revision))
        .collect()
}

fn history_entries(store: &MvccStore) -> u64 {
    store.stats().unwrap().history_entries
}

#[test]
fn a_store_mid_compaction_reads_and_hashes_like_a_cleaned_one_and_steps_finish_it() {
    let mut cleaned = TestStore::with_options(all_inline());
    let mut stepping = TestStore::with_options(background_only());
    for test in [&mut cleaned, &mut stepping] {
        write_history(test);
    }
    let compact_at = cleaned.revision() - 20;
    for test in [&mut cleaned, &mut stepping] {
        ok(test.apply(Request::Compact {
            revision: compact_at,
        }));
    }
    assert!(
        !cleaned.store.compaction_pending(),
        "1,000 entries fit inline"
    );
    assert!(stepping.store.compaction_pending());
    let garbage = history_entries(&stepping.store) - history_entries(&cleaned.store);
    assert!(
        garbage > 1_000,
        "nothing was cleaned yet: {garbage} extra entries"
    );

    // Same answers and the same hash, though one file still holds the superseded versions.
    for revision in [None, Some(compact_at), Some(compact_at + 10)] {
        assert_eq!(
            everything_at(&stepping.store, revision),
            everything_at(&cleaned.store, revision)
        );
    }
    let below = stepping.get_at("k/01", compact_at - 1).unwrap_err();
    assert!(matches!(below, Error::Compacted { .. }), "{below}");
    assert_eq!(
        stepping.store.hash(None).unwrap(),
        cleaned.store.hash(None).unwrap()
    );

    // Bounded steps: each cleans at most 100 entries of the window.
    let mut steps = 0;
    while stepping.store.compact_step(100).unwrap() {
        steps += 1;
        assert!(steps < 1_000, "the steps do not end");
    }
    // The window holds one entry per revision up to the compact revision.
    let window_entries = compact_at - 1;
    assert!(
        steps as u64 >= window_entries / 100 - 1,
        "{steps} steps for a window of {window_entries} entries"
    );
    assert!(!stepping.store.compaction_pending());
    assert_eq!(
        history_entries(&stepping.store),
        history_entries(&cleaned.store)
    );
    assert_eq!(
        stepping.store.hash(None).unwrap(),
        cleaned.store.hash(None).unwrap()
    );
}

#[test]
fn a_pending_window_survives_a_reopen_and_grows_with_a_later_compaction() {
    let mut cleaned = TestStore::with_options(all_inline());
    let mut stepping = TestStore::with_options(background_only());
    for test in [&mut cleaned, &mut stepping] {
        write_history(test);
        let first = test.revision() - 600;
        ok(test.apply(Request::Compact { revision: first }));
    }
    stepping.store.compact_step(150).unwrap();
    stepping.reopen(background_only());
    assert!(
        stepping.store.compaction_pending(),
        "the window outlives a restart"
    );

    // More writes, then a second compaction while the first window is still pending.
    for test in [&mut cleaned, &mut stepping] {
        for key in 0..40 {
            test.put(&format!("k/{key:02}"), "later");
        }
        let second = test.revision() - 10;
        ok(test.apply(Request::Compact { revision: second }));
    }
    stepping.store.finish_compaction(64).unwrap();
    assert_eq!(
        history_entries(&stepping.store),
        history_entries(&cleaned.store)
    );
    assert_eq!(
        everything_at(&stepping.store, None),
        everything_at(&cleaned.store, None)
    );
    assert_eq!(
        stepping.store.hash(None).unwrap(),
        cleaned.store.hash(None).unwrap()
    );
}

#[test]
fn a_snapshot_taken_mid_compaction_is_cleaned_by_its_importer() {
    let mut cleaned = TestStore::with_options(all_inline());
    let mut stepping = TestStore::with_options(background_only());
    for test in [&mut cleaned, &mut stepping] {
        write_history(test);
        let revision = test.revision() - 5;
        ok(test.apply(Request::Compact { revision }));
    }
    let mut stream = Vec::new();
    stepping.store.export_snapshot(&mut stream).unwrap();

    let importer = TestStore::with_options(background_only());
    importer
        .store
        .import_snapshot(&mut stream.as_slice())
        .unwrap();
    assert!(importer.store.compaction_pending());
    assert_eq!(
        importer.store.hash(None).unwrap(),
        cleaned.store.hash(None).unwrap()
    );
    importer.store.finish_compaction(500).unwrap();
    assert_eq!(
        history_entries(&importer.store),
        history_entries(&cleaned.store)
    );
    assert_eq!(
        everything_at(&importer.store, None),
        everything_at(&cleaned.store, None)
    );
}
