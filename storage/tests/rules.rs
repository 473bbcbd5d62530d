//! One focused test per rule of the contract's data model (docs/API.md, section 1).

use crate::support;

use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, Error, EventKind, KeyRange, Malformed,
    PutRequest, RangeRequest, ReadError, Rejection, Request, Response, StoreOptions, TxnBranch,
    TxnOp, TxnOpResponse, TxnRequest,
};
use support::{ok, put_request, TestStore};

fn compare(key: &str, target: CompareTarget, op: CompareOp) -> Compare {
    Compare {
        key: key.into(),
        range_end: revkv_storage::RangeEnd::Single,
        target,
        op,
    }
}

fn txn(compare: Vec<Compare>, success: Vec<TxnOp>, failure: Vec<TxnOp>) -> Request {
    Request::Txn(TxnRequest {
        compare,
        success,
        failure,
    })
}

fn put_op(key: &str, value: &str) -> TxnOp {
    match put_request(key, value) {
        Request::Put(put) => TxnOp::Put(put),
        _ => unreachable!(),
    }
}

fn get_op(key: &str) -> TxnOp {
    TxnOp::Get(RangeRequest::of(KeyRange::single(key)))
}

#[test]
fn an_empty_store_is_at_revision_one() {
    let store = TestStore::new();
    assert_eq!(store.revision(), 1);
    assert_eq!(store.store.compact_revision().unwrap(), 0);
}

#[test]
fn each_put_bumps_the_revision_by_one_and_tracks_versions() {
    let mut store = TestStore::new();
    assert_eq!(store.put("a", "1").revision, 2);
    assert_eq!(store.put("a", "2").revision, 3);
    assert_eq!(store.put("b", "1").revision, 4);
    let a = store.get("a").unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (2, 3, 2));
    assert_eq!(a.value, b"2");
    // Writing the same value again is still a change.
    assert_eq!(store.put("b", "1").revision, 5);
    assert_eq!(store.get("b").unwrap().version, 2);
}

#[test]
fn put_returns_the_previous_key_value() {
    let mut store = TestStore::new();
    let first = ok(store.put("a", "1"));
    assert_eq!(first, Response::Put(Default::default()));
    let Response::Put(second) = ok(store.put("a", "2")) else {
        panic!("put answered with something else")
    };
    assert_eq!(second.prev_kv.unwrap().value, b"1");
}

#[test]
fn delete_resets_version_and_recreate_gets_a_new_create_revision() {
    let mut store = TestStore::new();
    store.put("a", "1");
    store.put("a", "2");
    let deleted = store.delete(KeyRange::single("a"));
    assert_eq!(deleted.revision, 4);
    let Response::DeleteRange(response) = deleted.result.unwrap() else {
        panic!("delete answered with something else")
    };
    assert_eq!(response.deleted, 1);
    assert_eq!(response.prev_kvs[0].value, b"2");
    assert!(store.get("a").is_none());
    store.put("a", "3");
    let a = store.get("a").unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (5, 5, 1));
}

#[test]
fn a_delete_that_removes_nothing_does_not_bump_the_revision() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let outcome = store.delete(KeyRange::single("missing"));
    assert_eq!(outcome.revision, 2);
    assert_eq!(store.revision(), 2);
}

#[test]
fn a_prefix_delete_removes_every_key_at_one_revision() {
    let mut store = TestStore::new();
    for key in ["app/a", "app/b", "apq", "ap"] {
        store.put(key, "v");
    }
    let outcome = store.delete(KeyRange::prefix("app/"));
    assert_eq!(outcome.revision, 6);
    assert!(store.get("app/a").is_none() && store.get("app/b").is_none());
    assert!(store.get("apq").is_some() && store.get("ap").is_some());
    let batch = store.store.events_since(6, 100, false).unwrap();
    assert_eq!(batch.events.len(), 2);
    assert!(batch
        .events
        .iter()
        .all(|event| event.kind == EventKind::Delete && event.kv.mod_revision == 6));
}

#[test]
fn a_txn_applies_all_its_changes_at_one_revision() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let outcome = store.apply(txn(
        vec![compare(
            "a",
            CompareTarget::Value(b"1".to_vec()),
            CompareOp::Equal,
        )],
        vec![put_op("a", "2"), put_op("b", "2"), get_op("a")],
        vec![],
    ));
    assert_eq!(outcome.revision, 3);
    let Response::Txn(response) = outcome.result.unwrap() else {
        panic!("txn answered with something else")
    };
    assert!(response.succeeded);
    // The get sees the txn's own put.
    let TxnOpResponse::Get(get) = &response.responses[2] else {
        panic!("third response is not a get")
    };
    assert_eq!(get.kvs[0].value, b"2");
    assert_eq!(get.kvs[0].mod_revision, 3);
    assert_eq!(store.get("a").unwrap().mod_revision, 3);
    assert_eq!(store.get("b").unwrap().mod_revision, 3);
}

#[test]
fn a_failed_compare_runs_the_failure_branch() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let outcome = store.apply(txn(
        vec![compare(
            "a",
            CompareTarget::ModRevision(99),
            CompareOp::Equal,
        )],
        vec![put_op("a", "never")],
        vec![get_op("a")],
    ));
    assert_eq!(outcome.revision, 2, "a read-only branch changes nothing");
    let Response::Txn(response) = outcome.result.unwrap() else {
        panic!("txn answered with something else")
    };
    assert!(!response.succeeded);
    assert_eq!(store.get("a").unwrap().value, b"1");
}

#[test]
fn compares_treat_a_missing_key_as_zero_and_fail_value_compares() {
    let mut store = TestStore::new();
    let cases = [
        (CompareTarget::Version(0), CompareOp::Equal, true),
        (CompareTarget::CreateRevision(0), CompareOp::Equal, true),
        (CompareTarget::ModRevision(1), CompareOp::Less, true),
        (CompareTarget::Lease(0), CompareOp::Equal, true),
        (CompareTarget::Value(Vec::new()), CompareOp::Equal, false),
        (
            CompareTarget::Value(b"x".to_vec()),
            CompareOp::NotEqual,
            false,
        ),
    ];
    for (target, op, expected) in cases {
        let outcome = store.apply(txn(
            vec![compare("missing", target.clone(), op)],
            vec![],
            vec![],
        ));
        let Response::Txn(response) = outcome.result.unwrap() else {
            panic!("txn answered with something else")
        };
        assert_eq!(response.succeeded, expected, "{target:?} {op:?}");
    }
}

#[test]
fn compare_operators_order_values_and_numbers() {
    let mut store = TestStore::new();
    store.put("k", "m");
    store.put("k", "m");
    let cases = [
        (
            CompareTarget::Value(b"a".to_vec()),
            CompareOp::Greater,
            true,
        ),
        (CompareTarget::Value(b"z".to_vec()), CompareOp::Less, true),
        (
            CompareTarget::Value(b"m".to_vec()),
            CompareOp::NotEqual,
            false,
        ),
        (CompareTarget::Version(2), CompareOp::Equal, true),
        (CompareTarget::Version(3), CompareOp::Less, true),
        (CompareTarget::CreateRevision(2), CompareOp::Equal, true),
        (CompareTarget::ModRevision(3), CompareOp::Greater, false),
        (CompareTarget::Lease(0), CompareOp::NotEqual, false),
    ];
    for (target, op, expected) in cases {
        let outcome = store.apply(txn(vec![compare("k", target.clone(), op)], vec![], vec![]));
        let Response::Txn(response) = outcome.result.unwrap() else {
            panic!("txn answered with something else")
        };
        assert_eq!(response.succeeded, expected, "{target:?} {op:?}");
    }
}

#[test]
fn a_txn_writing_one_key_twice_is_rejected_without_any_change() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let outcome = store.apply(txn(
        vec![],
        vec![put_op("b", "1"), put_op("b", "2")],
        vec![],
    ));
    let duplicate = Malformed::DuplicateTxnKey { key: "b".into() };
    assert_eq!(outcome.result, Err(Rejection::Malformed(duplicate)));
    assert_eq!(outcome.revision, 2);
    assert!(store.get("b").is_none());
    let delete_then_put = txn(
        vec![],
        vec![
            TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange::prefix("a"),
                prev_kv: false,
            }),
            put_op("a", "2"),
        ],
        vec![],
    );
    let put_inside_the_delete = Malformed::DuplicateTxnKey { key: "a".into() };
    assert_eq!(
        store.apply(delete_then_put).result,
        Err(Rejection::Malformed(put_inside_the_delete))
    );
    assert_eq!(store.get("a").unwrap().value, b"1");
}

#[test]
fn limits_reject_without_writing() {
    let options = StoreOptions {
        limits: revkv_storage::Limits {
            max_key_bytes: 8,
            max_value_bytes: 4,
            max_txn_ops: 2,
            max_range_keys: 100,
            ..revkv_storage::Limits::default()
        },
        ..StoreOptions::default()
    };
    let mut store = TestStore::with_options(options);
    assert!(matches!(
        store.put("too-long-key", "v").result,
        Err(Rejection::Invalid(_))
    ));
    assert!(matches!(
        store.put("k", "12345").result,
        Err(Rejection::TooLarge(_))
    ));
    let three_ops = txn(
        vec![],
        vec![put_op("a", "1"), put_op("b", "1"), put_op("c", "1")],
        vec![],
    );
    let too_many = Malformed::TooManyTxnOps {
        branch: TxnBranch::Success,
        count: 3,
        limit: 2,
    };
    assert_eq!(
        store.apply(three_ops).result,
        Err(Rejection::Malformed(too_many))
    );
    assert_eq!(store.revision(), 1);
    assert!(store.get("a").is_none());
}

#[test]
fn historical_reads_see_exactly_the_state_after_each_revision() {
    let mut store = TestStore::new();
    store.put("a", "1"); // 2
    store.put("a", "2"); // 3
    store.delete(KeyRange::single("a")); // 4
    store.put("a", "3"); // 5
    assert!(store.get_at("a", 1).unwrap().is_none());
    assert_eq!(store.get_at("a", 2).unwrap().unwrap().value, b"1");
    assert_eq!(store.get_at("a", 3).unwrap().unwrap().value, b"2");
    assert!(store.get_at("a", 4).unwrap().is_none());
    let recreated = store.get_at("a", 5).unwrap().unwrap();
    assert_eq!((recreated.create_revision, recreated.version), (5, 1));
    assert!(matches!(
        store.get_at("a", 6),
        Err(Error::FutureRevision {
            requested: 6,
            current: 5
        })
    ));
}

#[test]
fn compaction_discards_superseded_history_and_refuses_older_reads() {
    let mut store = TestStore::new();
    store.put("a", "1"); // 2
    store.put("b", "1"); // 3
    store.put("a", "2"); // 4
    store.delete(KeyRange::single("b")); // 5
    store.put("c", "1"); // 6
    let outcome = store.apply(Request::Compact { revision: 5 });
    assert_eq!(outcome.result.unwrap(), Response::Compact);
    assert_eq!(outcome.revision, 6, "compaction does not bump the revision");
    assert!(matches!(
        store.get_at("a", 4),
        Err(Error::Compacted {
            requested: 4,
            compact_revision: 5
        })
    ));
    // At the compact revision itself the state is intact.
    assert_eq!(store.get_at("a", 5).unwrap().unwrap().value, b"2");
    assert!(store.get_at("b", 5).unwrap().is_none());
    // A reader that already delivered everything before 5 needs the delete at 5, which
    // compaction dropped: it must resume above the compact revision.
    assert!(matches!(
        store.store.events_since(5, 10, false),
        Err(ReadError::Compacted { .. })
    ));
    let events = store.store.events_since(6, 10, false).unwrap();
    assert_eq!(events.events.len(), 1);
    // A watch that starts at the compact revision is served, as by etcd: the delete at 5 is
    // gone, so it starts with the put at 6.
    let from_start = store.store.events_from_start(5, 10, true).unwrap();
    assert_eq!(from_start.events.len(), 1);
    assert_eq!(from_start.events[0].kv.mod_revision, 6);
    assert!(matches!(
        store.store.events_from_start(4, 10, false),
        Err(ReadError::Compacted {
            requested: 4,
            compact_revision: 5
        })
    ));
    // Compacting again at or below the compact revision, or in the future, is refused.
    assert!(matches!(
        store.apply(Request::Compact { revision: 5 }).result,
        Err(Rejection::Compacted { .. })
    ));
    assert!(matches!(
        store.apply(Request::Compact { revision: 7 }).result,
        Err(Rejection::FutureRevision { .. })
    ));
}

#[test]
fn a_watch_and_a_key_history_may_start_at_the_compact_revision_whose_puts_remain() {
    let mut store = TestStore::new();
    store.put("a", "1"); // 2
    store.put("b", "1"); // 3
    store.delete(KeyRange::single("b")); // 4
    store.put("a", "2"); // 5
    store.put("c", "1"); // 6
    store.apply(Request::Compact { revision: 5 });
    let events = store.store.events_from_start(5, 10, true).unwrap();
    let revisions: Vec<u64> = events
        .events
        .iter()
        .map(|event| event.kv.mod_revision)
        .collect();
    assert_eq!(revisions, [5, 6]);
    assert_eq!(events.events[0].kv.value, b"2");
    // The value before 5 is below the compact revision: no previous value, as in etcd.
    assert!(events.events[0].prev_kv.is_none());
    assert!(store.store.events_since(5, 10, false).is_err());
    // A key's history from the compact revision, and by default, starts with its put there.
    for from in [Some(5), None] {
        let history = store.store.key_history(b"a", from, 10).unwrap();
        let versions: Vec<u64> = history.versions.iter().map(|v| v.kv.mod_revision).collect();
        assert_eq!(versions, [5], "from {from:?}");
    }
    assert!(matches!(
        store.store.key_history(b"a", Some(4), 10),
        Err(ReadError::Compacted { .. })
    ));
    // Compacting at the delete of `b` (4 is below 5 now; use a fresh store) drops that delete.
    let mut deleted = TestStore::new();
    deleted.put("b", "1"); // 2
    deleted.delete(KeyRange::single("b")); // 3
    deleted.put("c", "1"); // 4
    deleted.apply(Request::Compact { revision: 3 });
    let history = deleted.store.key_history(b"b", Some(3), 10).unwrap();
    assert!(history.versions.is_empty(), "{:?}", history.versions);
    let events = deleted.store.events_from_start(3, 10, false).unwrap();
    assert_eq!(events.events.len(), 1);
    assert_eq!(events.events[0].kv.key, b"c");
}

#[test]
fn a_delete_of_more_keys_than_the_limit_is_refused_and_writes_nothing() {
    let mut store = TestStore::with_options(StoreOptions {
        limits: revkv_storage::Limits {
            max_delete_keys: 2,
            ..revkv_storage::Limits::default()
        },
        ..StoreOptions::default()
    });
    for key in ["d/1", "d/2", "d/3"] {
        store.put(key, "v");
    }
    let outcome = store.delete(KeyRange::prefix("d/"));
    assert!(
        matches!(&outcome.result, Err(Rejection::Invalid(message)) if message.contains("max_delete_keys")),
        "{:?}",
        outcome.result
    );
    assert_eq!(outcome.revision, 4, "nothing was written");
    // Two deletes in one branch count together: 1 + 2 keys, each within the limit.
    let split = txn(
        vec![],
        vec![
            TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange::single("d/1"),
                prev_kv: false,
            }),
            TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange {
                    start: b"d/2".to_vec(),
                    end: revkv_storage::RangeEnd::Until(b"d/4".to_vec()),
                },
                prev_kv: false,
            }),
        ],
        vec![],
    );
    let refused = store.apply(split).result;
    assert!(
        matches!(&refused, Err(Rejection::Invalid(message)) if message.contains("max_delete_keys")),
        "{refused:?}"
    );
    assert_eq!(store.store.current_revision().unwrap(), 4);
    // Within the limit it deletes.
    let two = store.delete(KeyRange {
        start: b"d/1".to_vec(),
        end: revkv_storage::RangeEnd::Until(b"d/3".to_vec()),
    });
    assert!(two.result.is_ok(), "{:?}", two.result);
    assert_eq!(two.revision, 5);
}

#[test]
fn ranges_page_with_limit_more_count_and_continue_tokens() {
    let mut store = TestStore::new();
    for index in 0..5 {
        store.put(&format!("k/{index}"), "v");
    }
    let first = store
        .store
        .range(&RangeRequest {
            limit: Some(2),
            ..RangeRequest::of(KeyRange::prefix("k/"))
        })
        .unwrap();
    assert_eq!(first.revision, 6);
    assert_eq!(first.response.kvs.len(), 2);
    assert_eq!(first.response.count, 5);
    assert!(first.response.more);
    // A write between pages does not show up: every page is read at the first page's revision.
    store.put("k/00", "late");
    let second = store
        .store
        .range(&RangeRequest {
            limit: Some(2),
            continue_token: first.response.continue_token.clone(),
            ..RangeRequest::of(KeyRange::prefix("k/"))
        })
        .unwrap();
    assert_eq!(second.revision, 6);
    let keys: Vec<_> = second
        .response
        .kvs
        .iter()
        .map(|kv| kv.key.clone())
        .collect();
    assert_eq!(keys, vec![b"k/2".to_vec(), b"k/3".to_vec()]);
    assert_eq!(second.response.count, 3);
    let malformed = RangeRequest {
        continue_token: Some("garbage".into()),
        ..RangeRequest::of(KeyRange::prefix("k/"))
    };
    assert!(matches!(
        store.store.range(&malformed),
        Err(ReadError::Invalid(_))
    ));
    let foreign_range = RangeRequest {
        continue_token: first.response.continue_token.clone(),
        ..RangeRequest::of(KeyRange::prefix("z/"))
    };
    assert!(matches!(
        store.store.range(&foreign_range),
        Err(ReadError::Invalid(_))
    ));
    // Compacting past the token's revision makes the next page answer compacted.
    store.apply(Request::Compact { revision: 7 });
    let stale = RangeRequest {
        continue_token: second.response.continue_token.clone(),
        ..RangeRequest::of(KeyRange::prefix("k/"))
    };
    assert!(matches!(
        store.store.range(&stale),
        Err(ReadError::Compacted { .. })
    ));
}

#[test]
fn keys_only_and_count_only_trim_the_answer() {
    let mut store = TestStore::new();
    store.put("a", "value");
    store.put("b", "value");
    let keys_only = store
        .store
        .range(&RangeRequest {
            keys_only: true,
            ..RangeRequest::of(KeyRange::prefix(""))
        })
        .unwrap();
    assert_eq!(keys_only.response.kvs.len(), 2);
    assert!(keys_only.response.kvs.iter().all(|kv| kv.value.is_empty()));
    let count_only = store
        .store
        .range(&RangeRequest {
            count_only: true,
            ..RangeRequest::of(KeyRange::prefix(""))
        })
        .unwrap();
    assert!(count_only.response.kvs.is_empty());
    assert_eq!(count_only.response.count, 2);
    assert!(!count_only.response.more);
}

#[test]
fn the_range_cap_answers_more_instead_of_everything() {
    let options = StoreOptions {
        limits: revkv_storage::Limits {
            max_range_keys: 3,
            ..Default::default()
        },
        ..StoreOptions::default()
    };
    let mut store = TestStore::with_options(options);
    for index in 0..5 {
        store.put(&format!("k{index}"), "v");
    }
    let all = store
        .store
        .range(&RangeRequest::of(KeyRange::prefix("k")))
        .unwrap();
    assert_eq!(all.response.kvs.len(), 3);
    assert!(all.response.more && all.response.continue_token.is_some());
}

#[test]
fn events_carry_prev_kv_and_group_by_revision() {
    let mut store = TestStore::new();
    store.put("a", "1"); // 2
    store.apply(txn(
        vec![],
        vec![put_op("a", "2"), put_op("b", "1")],
        vec![],
    )); // 3
    store.delete(KeyRange::single("a")); // 4
    let batch = store.store.events_since(2, 1, true).unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.next_revision, 3);
    let batch = store.store.events_since(3, 1, true).unwrap();
    assert_eq!(batch.events.len(), 2, "a revision is never split");
    assert_eq!(batch.events[0].prev_kv.as_ref().unwrap().value, b"1");
    assert!(batch.events[1].prev_kv.is_none());
    let batch = store.store.events_since(4, 10, true).unwrap();
    assert_eq!(batch.events[0].kind, EventKind::Delete);
    assert_eq!(batch.events[0].prev_kv.as_ref().unwrap().value, b"2");
    assert_eq!(batch.next_revision, 5);
}

#[test]
fn the_hash_is_equal_for_equal_histories_and_differs_otherwise() {
    let mut left = TestStore::new();
    let mut right = TestStore::new();
    for store in [&mut left, &mut right] {
        store.put("a", "1");
        store.put("b", "2");
    }
    assert_eq!(
        left.store.hash(None).unwrap(),
        right.store.hash(None).unwrap()
    );
    left.put("c", "3");
    right.put("c", "4");
    assert_ne!(
        left.store.hash(None).unwrap().hash,
        right.store.hash(None).unwrap().hash
    );
    assert_eq!(
        left.store.hash(Some(3)).unwrap(),
        right.store.hash(Some(3)).unwrap()
    );
}

#[test]
fn a_put_with_a_lease_keeps_it() {
    let mut store = TestStore::new();
    store.apply(grant(42, 10));
    store.apply(Request::Put(PutRequest {
        key: b"a".to_vec(),
        value: b"1".to_vec(),
        lease: 42,
        prev_kv: false,
    }));
    assert_eq!(store.get("a").unwrap().lease, 42);
}

#[test]
fn applying_an_entry_twice_stops_the_member_and_writes_nothing() {
    let mut store = TestStore::new();
    store.put("a", "1");
    store.next_index -= 1;
    let entry = revkv_storage::ApplyEntry {
        log_id: revkv_storage::LogId {
            term: 1,
            node_id: 1,
            index: store.next_index,
        },
        payload: revkv_storage::EntryPayload::Request(put_request("a", "2")),
    };
    support::assert_apply_stops(&store.store, &[entry], "an entry is never applied twice");
    assert_eq!(store.get("a").unwrap().value, b"1");
    assert_eq!(store.revision(), 2);
}

#[test]
fn snapshots_round_trip_into_another_store() {
    let mut source = TestStore::new();
    source.put("a", "1");
    source.put("a", "2");
    source.put("b", "1");
    source.delete(KeyRange::single("b"));
    source.apply(Request::Compact { revision: 3 });
    let mut stream = Vec::new();
    let exported = source.store.export_snapshot(&mut stream).unwrap();
    let target = TestStore::new();
    let imported = target
        .store
        .import_snapshot(&mut stream.as_slice())
        .unwrap();
    assert_eq!(exported, imported);
    assert_eq!(
        source.store.hash(None).unwrap(),
        target.store.hash(None).unwrap()
    );
    assert_eq!(target.get("a").unwrap().value, b"2");
    assert!(target.get("b").is_none());
    assert_eq!(
        target.store.applied_state().unwrap(),
        source.store.applied_state().unwrap()
    );
    // A truncated or altered stream changes nothing.
    let before = target.store.hash(None).unwrap();
    assert!(target
        .store
        .import_snapshot(&mut &stream[..stream.len() - 3])
        .is_err());
    let mut altered = stream.clone();
    let middle = altered.len() / 2;
    altered[middle] ^= 0x40;
    assert!(target
        .store
        .import_snapshot(&mut altered.as_slice())
        .is_err());
    assert_eq!(target.store.hash(None).unwrap(), before);
}

/// The key index holds every uncompacted version of a key; a read must find the one visible at its
/// revision however many versions a key has (a long history makes the range walk seek past it).
#[test]
fn reads_see_the_right_version_of_keys_with_long_histories_among_short_ones() {
    let mut store = TestStore::new();
    store.put("a", "a1");
    let mut revision_of_hot_version = Vec::new();
    for version in 1..=40 {
        let outcome = store.put("hot", &format!("h{version}"));
        revision_of_hot_version.push(outcome.revision);
        if version == 20 {
            store.put("hot2", "x1");
            store.delete(KeyRange::single("a"));
        }
    }
    store.put("z", "z1");
    let listing = |revision: Option<u64>, limit: Option<u64>| {
        let request = RangeRequest {
            revision,
            limit,
            ..RangeRequest::of(KeyRange::prefix(""))
        };
        let read = store.store.range(&request).unwrap().response;
        let pairs: Vec<(String, String)> = read
            .kvs
            .iter()
            .map(|kv| {
                (
                    String::from_utf8(kv.key.clone()).unwrap(),
                    String::from_utf8(kv.value.clone()).unwrap(),
                )
            })
            .collect();
        (pairs, read.count)
    };
    let pairs = |rows: &[(&str, &str)]| -> Vec<(String, String)> {
        rows.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        listing(None, None),
        (pairs(&[("hot", "h40"), ("hot2", "x1"), ("z", "z1")]), 3)
    );
    assert_eq!(
        listing(Some(revision_of_hot_version[9]), None),
        (pairs(&[("a", "a1"), ("hot", "h10")]), 2)
    );
    assert_eq!(
        listing(Some(revision_of_hot_version[29]), Some(1)),
        (pairs(&[("hot", "h30")]), 2),
        "a was deleted with hot's 20th version, so hot and hot2 are live"
    );
    let hot = store.get("hot").unwrap();
    assert_eq!(
        (hot.version, hot.mod_revision),
        (40, revision_of_hot_version[39])
    );
    assert_eq!(store.store.stats().unwrap().live_keys, 3);
}

// ---------------------------------------------------------------------------------------------
// Leases (issue 13; the contract's section 7): grant, attach, detach, revoke, limits.
// ---------------------------------------------------------------------------------------------

fn grant(id: i64, ttl_seconds: i64) -> Request {
    Request::LeaseGrant { id, ttl_seconds }
}

fn revoke(id: i64) -> Request {
    Request::LeaseRevoke { id }
}

fn put_with_lease(key: &str, value: &str, lease: i64) -> Request {
    Request::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        prev_kv: false,
    })
}

fn lease_keys(store: &TestStore, id: i64) -> Vec<String> {
    let keys = store.store.lease_keys(id).unwrap();
    keys.into_iter()
        .map(|key| String::from_utf8(key).unwrap())
        .collect()
}

#[test]
fn a_grant_takes_no_revision_and_a_duplicate_id_is_rejected() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let granted = store.apply(grant(7, 30));
    assert_eq!(granted.revision, 2, "a grant does not change the revision");
    assert_eq!(
        granted.result.unwrap(),
        Response::LeaseGrant(revkv_storage::LeaseGrantResponse {
            id: 7,
            ttl_seconds: 30
        })
    );
    let lease = store.store.lease(7).unwrap().unwrap();
    assert_eq!((lease.granted_ttl_seconds, lease.attached_keys), (30, 0));
    assert!(matches!(
        store.apply(grant(7, 60)).result,
        Err(Rejection::LeaseExists { id: 7 })
    ));
    assert_eq!(
        store.store.lease(7).unwrap().unwrap().granted_ttl_seconds,
        30
    );
    for bad in [grant(0, 30), grant(-3, 30), grant(8, 0), grant(8, -1)] {
        assert!(matches!(
            store.apply(bad).result,
            Err(Rejection::Invalid(_))
        ));
    }
    assert_eq!(store.revision(), 2);
}

#[test]
fn a_put_naming_a_lease_that_does_not_exist_is_rejected_and_writes_nothing() {
    let mut store = TestStore::new();
    store.apply(grant(1, 30));
    let outcome = store.apply(put_with_lease("a", "1", 2));
    assert!(matches!(
        outcome.result,
        Err(Rejection::LeaseNotFound { id: 2 })
    ));
    assert_eq!((outcome.revision, store.revision()), (1, 1));
    assert!(store.get("a").is_none());
    // A txn whose chosen branch names a missing lease writes none of its ops, not even the ones
    // before the bad put.
    let put_op_with_lease = |key: &str, lease| match put_with_lease(key, "v", lease) {
        Request::Put(put) => TxnOp::Put(put),
        _ => unreachable!(),
    };
    let outcome = store.apply(txn(
        vec![],
        vec![put_op_with_lease("b", 1), put_op_with_lease("c", 2)],
        vec![],
    ));
    assert!(matches!(
        outcome.result,
        Err(Rejection::LeaseNotFound { id: 2 })
    ));
    assert!(store.get("b").is_none() && store.get("c").is_none());
    assert_eq!(store.revision(), 1);
    assert!(lease_keys(&store, 1).is_empty());
    // The branch that does not run is not checked (as in etcd).
    let outcome = store.apply(txn(
        vec![compare("b", CompareTarget::Version(0), CompareOp::Equal)],
        vec![put_op_with_lease("b", 1)],
        vec![put_op_with_lease("c", 2)],
    ));
    assert!(outcome.result.is_ok());
    assert_eq!(store.get("b").unwrap().lease, 1);
    assert_eq!(lease_keys(&store, 1), ["b"]);
}

#[test]
fn puts_attach_and_detach_and_deletes_detach() {
    let mut store = TestStore::new();
    store.apply(grant(1, 30));
    store.apply(grant(2, 30));
    for key in ["a", "b", "c"] {
        store.apply(put_with_lease(key, "v", 1));
    }
    assert_eq!(lease_keys(&store, 1), ["a", "b", "c"]);
    assert_eq!(store.store.lease(1).unwrap().unwrap().attached_keys, 3);
    store.apply(put_with_lease("a", "v2", 0));
    store.apply(put_with_lease("b", "v2", 2));
    store.delete(KeyRange::single("c"));
    assert!(lease_keys(&store, 1).is_empty());
    assert_eq!(lease_keys(&store, 2), ["b"]);
    assert_eq!(store.store.lease(1).unwrap().unwrap().attached_keys, 0);
    assert_eq!(store.get("a").unwrap().lease, 0);
    // Revoking lease 1 now deletes nothing and takes no revision; the detached key survives.
    let revision = store.revision();
    let outcome = store.apply(revoke(1));
    assert_eq!(outcome.revision, revision);
    let Ok(Response::LeaseRevoke(revoked)) = outcome.result else {
        panic!("revoke answered {:?}", outcome.result)
    };
    assert_eq!(revoked.deleted, 0);
    assert!(store.get("a").is_some() && store.store.lease(1).unwrap().is_none());
    assert!(matches!(
        store.apply(revoke(1)).result,
        Err(Rejection::LeaseNotFound { id: 1 })
    ));
}

#[test]
fn a_revoke_deletes_every_attached_key_in_one_revision_like_a_delete_range() {
    let mut store = TestStore::new();
    store.apply(grant(5, 30));
    for key in ["svc/b", "svc/a", "other"] {
        store.apply(put_with_lease(key, "v", 5));
    }
    store.put("svc/unleased", "v");
    let before = store.revision();
    let outcome = store.apply(revoke(5));
    assert_eq!(
        outcome.revision,
        before + 1,
        "one revision for all the deletes"
    );
    let Ok(Response::LeaseRevoke(revoked)) = outcome.result else {
        panic!("revoke answered {:?}", outcome.result)
    };
    assert_eq!(revoked.deleted, 3);
    let batch = store.store.events_since(before + 1, 100, true).unwrap();
    let deleted: Vec<(&[u8], u64, EventKind)> = batch
        .events
        .iter()
        .map(|event| (event.kv.key.as_slice(), event.kv.mod_revision, event.kind))
        .collect();
    let expected: Vec<(&[u8], u64, EventKind)> = ["other", "svc/a", "svc/b"]
        .iter()
        .map(|key| (key.as_bytes(), before + 1, EventKind::Delete))
        .collect();
    assert_eq!(deleted, expected, "key order, as a delete-range makes them");
    assert!(batch.events.iter().all(|event| event.prev_kv.is_some()));
    assert!(store.get("svc/a").is_none() && store.get("svc/unleased").is_some());
    assert!(store.store.lease(5).unwrap().is_none());
    assert_eq!(store.store.stats().unwrap().live_keys, 1);
}

#[test]
fn lease_limits_are_enforced_with_clear_errors() {
    let options = StoreOptions {
        limits: revkv_storage::Limits {
            max_leases: 2,
            max_lease_ttl_seconds: 100,
            max_keys_per_lease: 2,
            ..revkv_storage::Limits::default()
        },
        ..StoreOptions::default()
    };
    let mut store = TestStore::with_options(options);
    let message = |outcome: revkv_storage::ApplyOutcome| match outcome.result {
        Err(Rejection::Invalid(message)) => message,
        other => panic!("expected a rejection, got {other:?}"),
    };
    assert!(message(store.apply(grant(1, 101))).contains("between 1 and 100"));
    store.apply(grant(1, 100));
    store.apply(grant(2, 100));
    assert!(message(store.apply(grant(3, 10))).contains("max_leases"));
    store.apply(put_with_lease("a", "v", 1));
    store.apply(put_with_lease("b", "v", 1));
    // Re-putting an attached key does not count twice; a third key does not fit.
    assert!(store.apply(put_with_lease("a", "v2", 1)).result.is_ok());
    assert!(message(store.apply(put_with_lease("c", "v", 1))).contains("keys per lease"));
    assert!(store.get("c").is_none());
    let negative = store.apply(put_with_lease("d", "v", -4));
    assert!(message(negative).contains("positive"));
    // After a revoke there is room for another lease.
    store.apply(revoke(2));
    assert!(store.apply(grant(3, 10)).result.is_ok());
}

#[test]
fn leases_survive_a_reopen_and_a_snapshot_and_are_in_the_hash() {
    let mut store = TestStore::new();
    store.apply(grant(9, 40));
    store.apply(put_with_lease("a", "v", 9));
    let hash_before_grant = store.store.hash(None).unwrap();
    store.apply(grant(10, 40));
    let hash = store.store.hash(None).unwrap();
    assert_ne!(
        hash_before_grant.hash, hash.hash,
        "a grant changes the hash"
    );
    assert_eq!(hash_before_grant.revision, hash.revision);
    store.reopen(StoreOptions::default());
    assert_eq!(store.store.hash(None).unwrap(), hash);
    assert_eq!(lease_keys(&store, 9), ["a"]);

    let mut stream = Vec::new();
    store.store.export_snapshot(&mut stream).unwrap();
    let mut copy = TestStore::new();
    copy.apply(grant(11, 5));
    copy.store.import_snapshot(&mut stream.as_slice()).unwrap();
    assert_eq!(copy.store.leases().unwrap(), store.store.leases().unwrap());
    assert_eq!(lease_keys(&copy, 9), ["a"]);
    assert!(
        copy.store.lease(11).unwrap().is_none(),
        "import replaces the leases"
    );
    assert_eq!(copy.store.hash(None).unwrap(), hash);
    // A damaged lease frame is caught by the checksum and changes nothing.
    let mut damaged = stream.clone();
    let at = damaged.len() - 30;
    damaged[at] ^= 0x40;
    assert!(copy.store.import_snapshot(&mut damaged.as_slice()).is_err());
    assert_eq!(copy.store.hash(None).unwrap(), hash);
}

// ---------------------------------------------------------------------------------------------
// Lease checkpoints (issue 13): the leader's remaining TTL of each lease, cleared by a keep-alive.
// ---------------------------------------------------------------------------------------------

fn checkpoint(computed_at_index: u64, leases: &[(i64, u64)]) -> Request {
    Request::LeaseCheckpoint {
        computed_at_index,
        leases: leases
            .iter()
            .map(|&(id, remaining_ttl_ms)| revkv_storage::CheckpointedLease {
                id,
                remaining_ttl_ms,
            })
            .collect(),
    }
}

fn checkpointed(store: &TestStore, id: i64) -> Option<u64> {
    let lease = store.store.lease(id).unwrap().expect("a granted lease");
    lease.checkpointed_remaining_ms
}

#[test]
fn a_checkpoint_never_undoes_a_renewal_whatever_the_order_of_the_two_entries() {
    let mut store = TestStore::new();
    store.put("a", "1");
    store.apply(grant(7, 60)); // index 2
    store.apply(grant(8, 60)); // index 3
    let hash = store.store.hash(None).unwrap();

    // Computed after both grants were applied: recorded, no revision, and not in the hash.
    let recorded = store.apply(checkpoint(3, &[(7, 50_000), (8, 40_000), (99, 1)]));
    assert_eq!(recorded.revision, 2, "a checkpoint takes no revision");
    assert_eq!(
        recorded.result.unwrap(),
        Response::LeaseCheckpoint {
            recorded: vec![7, 8]
        },
        "an unknown lease is skipped"
    );
    assert_eq!(
        (checkpointed(&store, 7), checkpointed(&store, 8)),
        (Some(50_000), Some(40_000))
    );
    assert_eq!(store.store.hash(None).unwrap(), hash);

    // A keep-alive of lease 7 clears its checkpoint through raft at index 5.
    let clear_index = store.next_index;
    let cleared = store.apply(Request::LeaseCheckpointClear { id: 7 });
    assert_eq!(cleared.result.unwrap(), Response::LeaseCheckpointClear);
    assert_eq!(checkpointed(&store, 7), None);
    assert_eq!(store.revision(), 2);

    // A checkpoint the leader computed before that renewal reaches the log after the clear: it
    // must not bring an older remaining TTL back for lease 7, but still applies to lease 8.
    let late = store.apply(checkpoint(clear_index - 1, &[(7, 10_000), (8, 30_000)]));
    assert_eq!(
        late.result.unwrap(),
        Response::LeaseCheckpoint { recorded: vec![8] }
    );
    assert_eq!(
        (checkpointed(&store, 7), checkpointed(&store, 8)),
        (None, Some(30_000))
    );
    // One computed after the clear was applied reflects the renewal, and is recorded.
    store.apply(checkpoint(clear_index, &[(7, 55_000)]));
    assert_eq!(checkpointed(&store, 7), Some(55_000));

    // A lease id granted again is a new lease: a checkpoint computed before its grant (of the
    // previous lease of that id) is refused.
    store.apply(revoke(8));
    let regrant_index = store.next_index;
    store.apply(grant(8, 60));
    let stale = store.apply(checkpoint(regrant_index - 1, &[(8, 1_000)]));
    assert_eq!(
        stale.result.unwrap(),
        Response::LeaseCheckpoint { recorded: vec![] }
    );
    assert_eq!(checkpointed(&store, 8), None);

    // A clear of a lease that is not granted is not_found; bad checkpoints are refused whole.
    assert!(matches!(
        store.apply(Request::LeaseCheckpointClear { id: 99 }).result,
        Err(Rejection::LeaseNotFound { id: 99 })
    ));
    for bad in [
        checkpoint(1, &[(0, 5)]),
        checkpoint(1, &[(7, 9_000_000_000_001)]),
        Request::LeaseCheckpointClear { id: -1 },
    ] {
        assert!(matches!(
            store.apply(bad).result,
            Err(Rejection::Invalid(_))
        ));
    }
    assert_eq!(checkpointed(&store, 7), Some(55_000));
}

#[test]
fn checkpoints_and_renewal_indexes_survive_a_reopen_and_a_snapshot() {
    let mut store = TestStore::new();
    store.apply(grant(7, 60)); // index 1
    store.apply(checkpoint(1, &[(7, 42_000)]));
    store.apply(grant(8, 60)); // index 3
    let renewal_index = store.next_index;
    store.apply(Request::LeaseCheckpointClear { id: 8 });
    store.reopen(StoreOptions::default());
    assert_eq!(checkpointed(&store, 7), Some(42_000));

    let mut stream = Vec::new();
    store.store.export_snapshot(&mut stream).unwrap();
    let mut copy = TestStore::new();
    copy.store.import_snapshot(&mut stream.as_slice()).unwrap();
    copy.next_index = store.next_index;
    assert_eq!(copy.store.leases().unwrap(), store.store.leases().unwrap());
    assert_eq!(
        copy.store.hash(None).unwrap(),
        store.store.hash(None).unwrap()
    );
    // The copy knows lease 8 was renewed at `renewal_index`: an older checkpoint is refused
    // there exactly as on the original.
    let older = checkpoint(renewal_index - 1, &[(8, 1_000)]);
    for target in [&mut store, &mut copy] {
        let answer = target.apply(older.clone());
        assert_eq!(
            answer.result.unwrap(),
            Response::LeaseCheckpoint { recorded: vec![] }
        );
        assert_eq!(checkpointed(target, 8), None);
    }
}
