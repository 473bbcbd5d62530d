//! Which batches `MvccStore::apply_batch_if_small` applies on the caller's task (the raft layer's
//! own): bounded work only (puts and single-key txns, a few entries, no durable commit due). A
//! batch it refuses is left untouched for the caller to apply elsewhere.

use crate::support;

use std::time::Duration;

use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyRange, RangeRequest, Request,
    StoreOptions, TxnOp, TxnRequest,
};
use support::{log_entry, put_request, TestStore};

fn txn_of(ops: Vec<TxnOp>) -> Request {
    Request::Txn(TxnRequest {
        compare: vec![Compare {
            key: b"k".to_vec(),
            range_end: revkv_storage::RangeEnd::Single,
            target: CompareTarget::ModRevision(0),
            op: CompareOp::Equal,
        }],
        success: ops,
        failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single("k")))],
    })
}

/// Applies `entries` if they are small; asserts that a refused batch changed nothing.
fn applied_if_small(test: &TestStore, entries: &[revkv_storage::ApplyEntry]) -> bool {
    let before = test.store.applied_state().expect("applied state");
    match test.store.apply_batch_if_small(entries) {
        Some(applied) => {
            let outcomes = applied.expect("a small batch applies");
            assert_eq!(outcomes.len(), entries.len(), "one outcome per entry");
            true
        }
        None => {
            let after = test.store.applied_state().expect("applied state");
            assert_eq!(
                after.last_applied, before.last_applied,
                "a refused batch is not applied"
            );
            false
        }
    }
}

#[test]
fn puts_and_single_key_txns_are_small_and_range_work_is_not() {
    let nine: Vec<_> = (1..=9)
        .map(|index| log_entry(index, put_request(&format!("k{index}"), "v")))
        .collect();
    let test = TestStore::new();
    assert!(
        !applied_if_small(&test, &nine),
        "more entries than the limit"
    );
    assert!(applied_if_small(&test, &nine[..8]), "eight puts are small");
    assert_eq!(test.store.current_revision().expect("revision"), 9);

    let single_key_txn = txn_of(vec![
        TxnOp::Put(match put_request("k", "v") {
            Request::Put(put) => put,
            _ => unreachable!(),
        }),
        TxnOp::DeleteRange(DeleteRangeRequest {
            range: KeyRange::single("j"),
            prev_kv: false,
        }),
    ]);
    assert!(applied_if_small(&test, &[log_entry(9, single_key_txn)]));

    let prefix_delete = Request::DeleteRange(DeleteRangeRequest {
        range: KeyRange::prefix("k"),
        prev_kv: false,
    });
    let prefix_get_in_txn = txn_of(vec![TxnOp::Get(RangeRequest::of(KeyRange::prefix("k")))]);
    for request in [
        prefix_delete,
        prefix_get_in_txn,
        Request::LeaseRevoke { id: 7 },
        Request::Compact { revision: 1 },
    ] {
        let described = format!("{request:?}");
        assert!(
            !applied_if_small(&test, &[log_entry(10, request)]),
            "{described} is not small"
        );
    }
}

#[test]
fn a_batch_whose_commit_is_durable_is_not_small() {
    let every_commit_durable = StoreOptions {
        durable_commit_interval: Duration::ZERO,
        ..StoreOptions::default()
    };
    let test = TestStore::with_options(every_commit_durable);
    assert!(!applied_if_small(
        &test,
        &[log_entry(1, put_request("k", "v"))]
    ));
}
