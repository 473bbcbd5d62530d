//! One key's history (`MvccStore::key_history`): every version and tombstone from a revision on,
//! oldest first, in pages; compacted history is refused; and a page visits only the key's own
//! index entries, however many other keys and versions the store holds.

use crate::support;

use revkv_storage::{ApplyEntry, DeleteRangeRequest, KeyRange, ReadError, Request};
use support::{log_entry, put_request, TestStore};

/// Applies `requests` as one batch of consecutive log entries (one write transaction).
fn apply_all(store: &mut TestStore, requests: Vec<Request>) {
    let entries: Vec<ApplyEntry> = requests
        .into_iter()
        .map(|request| {
            let index = store.next_index;
            store.next_index += 1;
            log_entry(index, request)
        })
        .collect();
    store.store.apply_batch(&entries).expect("apply");
}

fn delete(key: &str) -> Request {
    Request::DeleteRange(DeleteRangeRequest {
        range: KeyRange::single(key),
        prev_kv: false,
    })
}

/// A store where `app/target` gets values v1, v2, a delete, then v3, between a crowd of other
/// keys before (`a/...`) and after (`z/...`) it in key order, each with several versions.
fn crowded_store() -> (TestStore, Vec<u64>) {
    let mut store = TestStore::new();
    let mut crowd = Vec::new();
    for round in 0..4 {
        for index in 0..500 {
            crowd.push(put_request(&format!("a/{index}"), &format!("{round}")));
            crowd.push(put_request(&format!("z/{index}"), &format!("{round}")));
        }
    }
    apply_all(&mut store, crowd);
    let mut target_revisions = Vec::new();
    for request in [
        put_request("app/target", "v1"),
        put_request("app/target", "v2"),
        delete("app/target"),
        put_request("app/target", "v3"),
    ] {
        store.apply(request);
        target_revisions.push(store.revision());
        store.put("a/0", "between");
    }
    (store, target_revisions)
}

#[test]
fn every_version_and_tombstone_comes_oldest_first_in_pages() {
    let (store, revisions) = crowded_store();
    let first = store
        .store
        .key_history(b"app/target", Some(1), 3)
        .expect("first page");
    let described: Vec<(u64, String, bool)> = first
        .versions
        .iter()
        .map(|version| {
            let value = String::from_utf8(version.kv.value.clone()).unwrap();
            (version.kv.mod_revision, value, version.deleted)
        })
        .collect();
    assert_eq!(
        described,
        vec![
            (revisions[0], "v1".to_string(), false),
            (revisions[1], "v2".to_string(), false),
            (revisions[2], String::new(), true),
        ]
    );
    assert_eq!(first.versions[1].kv.version, 2);
    assert_eq!(first.next_from_revision, Some(revisions[3]));
    assert_eq!(first.revision, store.revision());

    let second = store
        .store
        .key_history(b"app/target", Some(revisions[3]), 3)
        .expect("second page");
    assert_eq!(second.versions.len(), 1);
    assert_eq!(second.versions[0].kv.value, b"v3");
    assert_eq!(
        second.versions[0].kv.version, 1,
        "a delete resets the version"
    );
    assert_eq!(second.next_from_revision, None);

    let later = store
        .store
        .key_history(b"app/target", Some(revisions[1]), 100)
        .expect("from a later revision");
    assert_eq!(later.versions.len(), 3);
    let absent = store.store.key_history(b"app/none", Some(1), 100).unwrap();
    assert!(absent.versions.is_empty());
}

#[test]
fn a_page_visits_only_the_keys_own_entries_however_crowded_the_store() {
    let (store, _) = crowded_store();
    for limit in [1, 2, 3, 4, 100] {
        let page = store
            .store
            .key_history(b"app/target", Some(1), limit)
            .unwrap();
        assert!(
            page.index_entries_visited <= page.versions.len() + 1,
            "limit {limit}: visited {} index entries for {} versions in a store of {} revisions",
            page.index_entries_visited,
            page.versions.len(),
            store.revision()
        );
    }
    // The busiest key: 4 crowd versions plus 4 "between" puts; a page of 2 still visits 3 entries.
    let busy = store.store.key_history(b"a/0", Some(1), 2).unwrap();
    assert_eq!(busy.versions.len(), 2);
    assert_eq!(busy.index_entries_visited, 3);
}

#[test]
fn compacted_history_and_bad_limits_are_refused() {
    let (mut store, revisions) = crowded_store();
    let limit_zero = store.store.key_history(b"app/target", Some(1), 0);
    assert!(matches!(limit_zero, Err(ReadError::Invalid(_))));
    let over_limit = store.store.key_history(b"app/target", Some(1), u64::MAX);
    assert!(matches!(over_limit, Err(ReadError::Invalid(_))));
    store.apply(Request::Compact {
        revision: revisions[2],
    });
    let compacted = store
        .store
        .key_history(b"app/target", Some(revisions[1]), 10);
    assert!(matches!(
        compacted,
        Err(ReadError::Compacted { compact_revision, .. }) if compact_revision == revisions[2]
    ));
    let after = store
        .store
        .key_history(b"app/target", Some(revisions[2] + 1), 10)
        .unwrap();
    assert_eq!(after.versions.len(), 1);
}
