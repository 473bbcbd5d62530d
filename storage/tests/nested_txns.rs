//! What etcd serves in a txn beyond compare-and-swap, applied by the store (issue 63, item 8):
//! nested txns, compares over a key range, gets at a revision, and puts that keep the current
//! value or lease. Each test states one of etcd's rules (`server/etcdserver/txn/txn.go` and
//! `checkIntervals` in `v3rpc/key.go`, etcd 3.6) against a real store; `model.rs` runs random
//! nested txns against a naive model as well.

use crate::support;

use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeepCurrent, KeyRange, KeyValue, Limits,
    Malformed, PutRequest, PutResponse, RangeEnd, RangeRequest, Rejection, Request, Response,
    StoreOptions, TxnBranch, TxnOp, TxnOpResponse, TxnRequest, TxnResponse,
};
use support::{ok, TestStore};

fn put(key: &str, value: &str) -> TxnOp {
    TxnOp::Put(put_request(key, value, 0))
}

fn put_request(key: &str, value: &str, lease: i64) -> PutRequest {
    PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        prev_kv: false,
    }
}

fn get(key: &str) -> TxnOp {
    TxnOp::Get(RangeRequest::of(KeyRange::single(key)))
}

fn get_at(key: &str, revision: u64) -> TxnOp {
    TxnOp::Get(RangeRequest {
        revision: Some(revision),
        ..RangeRequest::of(KeyRange::single(key))
    })
}

fn delete(range: KeyRange) -> TxnOp {
    TxnOp::DeleteRange(DeleteRangeRequest {
        range,
        prev_kv: false,
    })
}

/// A put of `key` that keeps its current value.
fn keeping_value_of(key: &str) -> TxnOp {
    TxnOp::PutKeeping {
        put: put_request(key, "", 0),
        keep: KeepCurrent {
            value: true,
            lease: false,
        },
    }
}

fn nested(compare: Vec<Compare>, success: Vec<TxnOp>, failure: Vec<TxnOp>) -> TxnOp {
    TxnOp::Txn(TxnRequest {
        compare,
        success,
        failure,
    })
}

fn txn(compare: Vec<Compare>, success: Vec<TxnOp>, failure: Vec<TxnOp>) -> Request {
    Request::Txn(TxnRequest {
        compare,
        success,
        failure,
    })
}

fn version_is(key: &str, version: u64) -> Compare {
    Compare::of_key(key, CompareTarget::Version(version), CompareOp::Equal)
}

fn over(range: KeyRange, target: CompareTarget, op: CompareOp) -> Compare {
    Compare {
        key: range.start,
        range_end: range.end,
        target,
        op,
    }
}

fn answer(response: Response) -> TxnResponse {
    match response {
        Response::Txn(answer) => answer,
        other => panic!("a txn answered {other:?}"),
    }
}

fn value_of(store: &TestStore, key: &str) -> Option<String> {
    store
        .get(key)
        .map(|kv| String::from_utf8(kv.value).unwrap())
}

fn got(response: &TxnOpResponse) -> Vec<KeyValue> {
    match response {
        TxnOpResponse::Get(range) => range.kvs.clone(),
        other => panic!("not a get: {other:?}"),
    }
}

#[test]
fn a_nested_txn_compares_against_the_state_before_the_outermost_txn() {
    let mut store = TestStore::new();
    // The put of "a" runs before the nested txn, but the nested compare still sees "a" missing,
    // as etcd decides every branch before any op runs.
    let outcome = store.apply(txn(
        vec![],
        vec![
            put("a", "1"),
            nested(
                vec![version_is("a", 0)],
                vec![put("b", "yes")],
                vec![put("b", "no")],
            ),
        ],
        vec![],
    ));
    assert_eq!(outcome.revision, 2, "the whole tree is one revision");
    let response = answer(ok(outcome));
    assert!(response.succeeded);
    assert_eq!(
        response.responses,
        vec![
            TxnOpResponse::Put(PutResponse::default()),
            TxnOpResponse::Txn(TxnResponse {
                succeeded: true,
                responses: vec![TxnOpResponse::Put(PutResponse::default())],
            }),
        ]
    );
    assert_eq!(value_of(&store, "b").as_deref(), Some("yes"));
    let a = store.get("a").unwrap();
    let b = store.get("b").unwrap();
    assert_eq!((a.mod_revision, b.mod_revision), (2, 2));
}

#[test]
fn a_nested_txns_ops_run_where_it_stands_in_its_branch() {
    let mut store = TestStore::new();
    let response = answer(ok(store.apply(txn(
        vec![],
        vec![
            put("a", "1"),
            nested(vec![], vec![get("a"), get("c")], vec![]),
            put("c", "3"),
            get("c"),
        ],
        vec![],
    ))));
    let TxnOpResponse::Txn(inner) = &response.responses[1] else {
        panic!("the second answer is the nested txn's");
    };
    assert_eq!(
        got(&inner.responses[0])[0].value,
        b"1",
        "sees the put before it"
    );
    assert!(got(&inner.responses[1]).is_empty(), "not the put after it");
    assert_eq!(got(&response.responses[3])[0].value, b"3");
}

#[test]
fn the_failure_branch_of_a_nested_txn_runs_when_its_compares_fail() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let response = answer(ok(store.apply(txn(
        vec![version_is("a", 1)],
        vec![nested(
            vec![version_is("a", 5)],
            vec![put("b", "never")],
            vec![nested(vec![], vec![put("c", "deep")], vec![])],
        )],
        vec![put("d", "never")],
    ))));
    assert!(response.succeeded);
    let TxnOpResponse::Txn(inner) = &response.responses[0] else {
        panic!("a nested answer");
    };
    assert!(!inner.succeeded);
    assert_eq!(value_of(&store, "c").as_deref(), Some("deep"));
    assert_eq!((store.get("b"), store.get("d")), (None, None));
}

#[test]
fn a_range_compare_holds_when_it_holds_for_every_key_of_the_range() {
    let mut store = TestStore::new();
    store.put("app/1", "x");
    store.put("app/2", "x");
    store.put("other", "y");
    let every_value_is_x = || {
        over(
            KeyRange::prefix("app/"),
            CompareTarget::Value(b"x".to_vec()),
            CompareOp::Equal,
        )
    };
    let holds = |store: &mut TestStore, compare: Compare| {
        answer(ok(store.apply(txn(vec![compare], vec![], vec![])))).succeeded
    };
    assert!(holds(&mut store, every_value_is_x()));
    store.put("app/2", "z");
    assert!(!holds(&mut store, every_value_is_x()), "one key differs");
    let unbounded = over(
        KeyRange {
            start: b"app/".to_vec(),
            end: RangeEnd::Unbounded,
        },
        CompareTarget::ModRevision(0),
        CompareOp::Greater,
    );
    assert!(holds(&mut store, unbounded), "app/1, app/2 and other");
}

#[test]
fn a_range_with_no_key_compares_as_one_missing_key() {
    let mut store = TestStore::new();
    store.put("app/1", "x");
    let empty = || KeyRange::prefix("none/");
    let holds = |store: &mut TestStore, target: CompareTarget, op: CompareOp| {
        let compare = over(empty(), target, op);
        answer(ok(store.apply(txn(vec![compare], vec![], vec![])))).succeeded
    };
    // etcd's `applyCompare`: version, revisions and lease compare as 0; a value never holds.
    assert!(holds(
        &mut store,
        CompareTarget::Version(0),
        CompareOp::Equal
    ));
    assert!(!holds(
        &mut store,
        CompareTarget::CreateRevision(0),
        CompareOp::Greater
    ));
    assert!(!holds(
        &mut store,
        CompareTarget::Value(Vec::new()),
        CompareOp::Equal
    ));
    assert!(!holds(
        &mut store,
        CompareTarget::Value(Vec::new()),
        CompareOp::NotEqual
    ));
}

#[test]
fn a_get_at_a_revision_inside_a_txn_reads_that_revision_not_the_txns_writes() {
    let mut store = TestStore::new();
    store.put("a", "1");
    store.put("a", "2");
    let response = answer(ok(store.apply(txn(
        vec![],
        vec![put("a", "3"), get_at("a", 2), get_at("a", 3), get("a")],
        vec![],
    ))));
    let values: Vec<Vec<u8>> = response.responses[1..]
        .iter()
        .map(|op| got(op)[0].value.clone())
        .collect();
    assert_eq!(values, vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
}

#[test]
fn a_get_past_the_current_revision_or_below_the_compact_revision_refuses_the_whole_txn() {
    let mut store = TestStore::new();
    store.put("a", "1");
    store.put("a", "2");
    let before = store.revision();
    let future = store.apply(txn(vec![], vec![put("b", "x"), get_at("a", 4)], vec![]));
    assert_eq!(
        future.result,
        Err(Rejection::FutureRevision {
            requested: 4,
            current: 3
        })
    );
    assert_eq!(store.revision(), before);
    assert_eq!(store.get("b"), None, "nothing of the txn was written");
    ok(store.apply(Request::Compact { revision: 3 }));
    let compacted = store.apply(txn(vec![], vec![put("b", "x"), get_at("a", 2)], vec![]));
    assert_eq!(
        compacted.result,
        Err(Rejection::Compacted {
            requested: 2,
            compact_revision: 3
        })
    );
    assert_eq!(store.get("b"), None);
    // The compact revision itself is still readable, as in etcd.
    let at_compaction = answer(ok(store.apply(txn(vec![], vec![get_at("a", 3)], vec![]))));
    assert_eq!(got(&at_compaction.responses[0])[0].value, b"2");
}

#[test]
fn a_keeping_put_keeps_the_current_value_or_lease() {
    let mut store = TestStore::new();
    ok(store.apply(Request::LeaseGrant {
        id: 7,
        ttl_seconds: 60,
    }));
    ok(store.apply(Request::Put(put_request("a", "old", 7))));
    ok(store.apply(txn(vec![], vec![keeping_value_of("a")], vec![])));
    let a = store.get("a").unwrap();
    assert_eq!(
        (a.value.as_slice(), a.lease, a.version),
        (&b"old"[..], 0, 2)
    );
    assert!(store.store.lease_keys(7).unwrap().is_empty(), "detached");
    ok(store.apply(Request::Put(put_request("a", "old", 7))));
    let keep_lease = TxnOp::PutKeeping {
        put: put_request("a", "new", 0),
        keep: KeepCurrent {
            value: false,
            lease: true,
        },
    };
    ok(store.apply(txn(vec![], vec![keep_lease], vec![])));
    let a = store.get("a").unwrap();
    assert_eq!((a.value.as_slice(), a.lease), (&b"new"[..], 7));
    assert_eq!(store.store.lease_keys(7).unwrap(), vec![b"a".to_vec()]);
}

#[test]
fn a_keeping_put_of_a_missing_key_refuses_the_whole_txn() {
    let mut store = TestStore::new();
    let before = store.revision();
    let outcome = store.apply(txn(
        vec![],
        vec![put("b", "x"), keeping_value_of("missing")],
        vec![],
    ));
    assert_eq!(
        outcome.result,
        Err(Rejection::Malformed(Malformed::KeyNotFound {
            key: "missing".into()
        }))
    );
    assert_eq!((store.revision(), store.get("b")), (before, None));
}

#[test]
fn a_keeping_put_that_carries_what_it_keeps_is_invalid() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let carries_a_value = TxnOp::PutKeeping {
        put: put_request("a", "v", 0),
        keep: KeepCurrent {
            value: true,
            lease: false,
        },
    };
    let outcome = store.apply(txn(vec![], vec![carries_a_value], vec![]));
    assert!(matches!(outcome.result, Err(Rejection::Invalid(_))));
}

fn duplicate(store: &mut TestStore, success: Vec<TxnOp>) -> bool {
    let before = store.revision();
    let outcome = store.apply(txn(vec![], success, vec![]));
    let refused = matches!(
        outcome.result,
        Err(Rejection::Malformed(Malformed::DuplicateTxnKey { .. }))
    );
    assert!(refused || outcome.result.is_ok(), "{:?}", outcome.result);
    if refused {
        assert_eq!(store.revision(), before);
    }
    refused
}

#[test]
fn keys_written_by_ops_that_could_both_run_are_duplicates_as_in_etcd() {
    let mut store = TestStore::new();
    let then_and_else = nested(vec![], vec![put("k", "1")], vec![put("k", "2")]);
    assert!(
        !duplicate(&mut store, vec![then_and_else]),
        "never both run"
    );
    let sibling_puts = vec![
        nested(vec![], vec![put("k", "1")], vec![]),
        nested(vec![], vec![], vec![put("k", "2")]),
    ];
    assert!(duplicate(&mut store, sibling_puts));
    let parent_put_and_nested_put =
        vec![put("k", "1"), nested(vec![], vec![put("k", "2")], vec![])];
    assert!(duplicate(&mut store, parent_put_and_nested_put));
    let parent_delete_and_nested_put = vec![
        delete(KeyRange::prefix("k")),
        nested(vec![], vec![put("k", "2")], vec![]),
    ];
    assert!(duplicate(&mut store, parent_delete_and_nested_put));
    let nested_delete_then_parent_put = vec![
        nested(vec![], vec![delete(KeyRange::single("k"))], vec![]),
        put("k", "2"),
    ];
    assert!(duplicate(&mut store, nested_delete_then_parent_put));
    let nested_delete_then_nested_put = vec![
        nested(vec![], vec![delete(KeyRange::single("k"))], vec![]),
        nested(vec![], vec![put("k", "2")], vec![]),
    ];
    assert!(duplicate(&mut store, nested_delete_then_nested_put));
    let delete_and_put_in_opposite_branches = nested(
        vec![],
        vec![delete(KeyRange::single("k"))],
        vec![put("k", "2")],
    );
    assert!(!duplicate(
        &mut store,
        vec![delete_and_put_in_opposite_branches]
    ));
}

/// etcd accepts this one and writes the key twice at one revision; revkv refuses it (one version
/// of a key per revision, `validate.rs`), and above all does not stop applying.
#[test]
fn a_nested_put_then_a_later_nested_delete_of_the_same_key_is_refused() {
    let mut store = TestStore::new();
    let put_then_delete = vec![
        nested(vec![], vec![put("k", "1")], vec![]),
        nested(vec![], vec![delete(KeyRange::prefix("k"))], vec![]),
    ];
    assert!(duplicate(&mut store, put_then_delete));
    assert_eq!(store.put("k", "ok").revision, 2, "the store still applies");
}

#[test]
fn nested_txns_share_the_op_budget_of_their_path() {
    let limits = Limits {
        max_txn_ops: 4,
        ..Limits::default()
    };
    let mut store = TestStore::with_options(StoreOptions {
        limits,
        ..StoreOptions::default()
    });
    // The top level uses 3 of 4, so its nested txn may hold 1 op per branch.
    let within = txn(
        vec![],
        vec![
            put("a", "1"),
            put("b", "1"),
            nested(vec![], vec![put("c", "1")], vec![]),
        ],
        vec![],
    );
    ok(store.apply(within));
    let over_budget = txn(
        vec![],
        vec![
            put("a", "1"),
            put("b", "1"),
            nested(vec![], vec![put("c", "1"), put("d", "1")], vec![]),
        ],
        vec![],
    );
    assert_eq!(
        store.apply(over_budget).result,
        Err(Rejection::Malformed(Malformed::TooManyTxnOps {
            branch: TxnBranch::Success,
            count: 2,
            limit: 1
        }))
    );
}

#[test]
fn the_ops_of_all_nested_txns_together_and_the_nesting_depth_are_bounded() {
    let limits = Limits {
        max_nested_txn_ops: 3,
        ..Limits::default()
    };
    let mut store = TestStore::with_options(StoreOptions {
        limits,
        ..StoreOptions::default()
    });
    let two_nested = |second_ops: usize| {
        let second = (0..second_ops).map(|index| put(&format!("n{index}"), "1"));
        txn(
            vec![],
            vec![
                nested(vec![], vec![put("a", "1")], vec![]),
                nested(vec![], second.collect(), vec![]),
            ],
            vec![],
        )
    };
    ok(store.apply(two_nested(2)));
    assert!(matches!(
        store.apply(two_nested(3)).result,
        Err(Rejection::Invalid(message)) if message.contains("max_nested_txn_ops")
    ));
    let mut deep = TxnRequest::default();
    for _ in 0..70 {
        deep = TxnRequest {
            success: vec![TxnOp::Txn(deep)],
            ..TxnRequest::default()
        };
    }
    let mut store = TestStore::new();
    assert!(matches!(
        store.apply(Request::Txn(deep)).result,
        Err(Rejection::Invalid(message)) if message.contains("nested more than")
    ));
}

#[test]
fn a_rejected_nested_op_leaves_nothing_written() {
    let mut store = TestStore::new();
    let outcome = store.apply(txn(
        vec![],
        vec![
            put("a", "1"),
            nested(vec![], vec![TxnOp::Put(put_request("b", "1", 99))], vec![]),
        ],
        vec![],
    ));
    assert_eq!(outcome.result, Err(Rejection::LeaseNotFound { id: 99 }));
    assert_eq!((store.revision(), store.get("a")), (1, None));
}

/// etcd's `IsTxnReadonly` looks at the top level only: a nested txn, even of gets, goes through
/// the log (and the alarms treat it as a write), taking no revision when nothing writes.
#[test]
fn a_txn_with_nested_gets_goes_through_the_log_and_takes_no_revision() {
    let mut store = TestStore::new();
    store.put("a", "1");
    store.put("a", "2");
    let reads = TxnRequest {
        compare: vec![over(
            KeyRange::prefix("a"),
            CompareTarget::Version(2),
            CompareOp::Equal,
        )],
        success: vec![
            get("a"),
            nested(
                vec![version_is("a", 1)],
                vec![get("x")],
                vec![get_at("a", 2)],
            ),
        ],
        failure: vec![],
    };
    assert!(!reads.reads_only());
    assert!(
        store.store.read_txn(&reads).is_err(),
        "not for the read path"
    );
    let response = answer(ok(store.apply(Request::Txn(reads))));
    assert_eq!(store.revision(), 3, "a read takes no revision");
    let TxnOpResponse::Txn(inner) = &response.responses[1] else {
        panic!("a nested answer");
    };
    assert!(!inner.succeeded);
    assert_eq!(got(&inner.responses[0])[0].value, b"1");
}

#[test]
fn a_branch_that_does_not_run_refuses_nothing() {
    let mut store = TestStore::new();
    store.put("a", "1");
    let never_runs = vec![
        get_at("a", 1000),
        TxnOp::Put(put_request("b", "1", 99)),
        keeping_value_of("missing"),
    ];
    let response = answer(ok(store.apply(txn(
        vec![],
        vec![nested(
            vec![version_is("a", 1)],
            vec![put("c", "1")],
            never_runs,
        )],
        vec![],
    ))));
    assert!(response.succeeded);
    assert_eq!(value_of(&store, "c").as_deref(), Some("1"));
}

/// etcd's `checkTxn` checks each op that will run at its turn, so the first op's refusal is the
/// answer: a put's missing lease before a later get's future revision or keeping put's missing
/// key, and the other way round.
#[test]
fn the_first_refused_op_in_running_order_names_the_refusal() {
    let mut store = TestStore::new();
    let unknown_lease = || TxnOp::Put(put_request("b", "1", 99));
    let keeping_missing = || keeping_value_of("missing");
    let lease_not_found = Err(Rejection::LeaseNotFound { id: 99 });
    let refusal =
        |store: &mut TestStore, ops: Vec<TxnOp>| store.apply(txn(vec![], ops, vec![])).result;
    assert_eq!(
        refusal(&mut store, vec![unknown_lease(), get_at("a", 1000)]),
        lease_not_found
    );
    assert_eq!(
        refusal(&mut store, vec![unknown_lease(), keeping_missing()]),
        lease_not_found
    );
    assert_eq!(
        refusal(&mut store, vec![keeping_missing(), unknown_lease()]),
        Err(Rejection::Malformed(Malformed::KeyNotFound {
            key: "missing".into()
        }))
    );
    assert_eq!(
        refusal(
            &mut store,
            vec![
                nested(vec![], vec![get_at("a", 1000)], vec![]),
                unknown_lease()
            ]
        ),
        Err(Rejection::FutureRevision {
            requested: 1000,
            current: 1
        })
    );
}
