//! Which batches `MvccStore::is_small_apply` lets the raft layer apply on its own task: bounded
//! work only (puts and single-key txns, a few entries, no durable commit due).

mod support;

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
            target: CompareTarget::ModRevision(0),
            op: CompareOp::Equal,
        }],
        success: ops,
        failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single("k")))],
    })
}

#[test]
fn puts_and_single_key_txns_are_small_and_range_work_is_not() {
    let test = TestStore::new();
    let store = &test.store;
    let puts: Vec<_> = (1..=8)
        .map(|index| log_entry(index, put_request(&format!("k{index}"), "v")))
        .collect();
    assert!(store.is_small_apply(&puts));
    let nine: Vec<_> = (1..=9)
        .map(|index| log_entry(index, put_request(&format!("k{index}"), "v")))
        .collect();
    assert!(!store.is_small_apply(&nine), "more entries than the limit");

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
    assert!(store.is_small_apply(&[log_entry(1, single_key_txn)]));

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
            !store.is_small_apply(&[log_entry(1, request)]),
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
    assert!(!test
        .store
        .is_small_apply(&[log_entry(1, put_request("k", "v"))]));
}
