//! etcd's KV service through the `etcd-client` crate against one real revkv member: range options,
//! put options, delete, txn, compaction, and the error codes and messages clients match on.

use crate::support;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use support::{grpc_status, GrpcMember};
use tonic::Code;

fn keys(response: &etcd_client::GetResponse) -> Vec<String> {
    response
        .kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_options_follow_etcd() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let first = client.put("app/a", "3", None).await.unwrap();
    let first_revision = first.header().unwrap().revision();
    client.put("app/b", "1", None).await.unwrap();
    client.put("app/c", "2", None).await.unwrap();
    client.put("app/a", "4", None).await.unwrap();
    client.put("zzz", "x", None).await.unwrap();

    let prefix = client
        .get("app/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(keys(&prefix), ["app/a", "app/b", "app/c"]);
    assert_eq!(prefix.count(), 3);
    assert!(!prefix.more());
    assert_eq!(prefix.kvs()[0].version(), 2);
    assert_eq!(prefix.kvs()[0].create_revision(), first_revision);

    let limited = client
        .get("app/", Some(GetOptions::new().with_prefix().with_limit(2)))
        .await
        .unwrap();
    assert_eq!(keys(&limited), ["app/a", "app/b"]);
    assert!(limited.more());
    assert_eq!(limited.count(), 3);

    let sorted = client
        .get(
            "app/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Value, SortOrder::Descend)
                    .with_limit(2),
            ),
        )
        .await
        .unwrap();
    assert_eq!(keys(&sorted), ["app/a", "app/c"], "values 4, 2, then 1 cut");
    assert!(sorted.more());

    let filtered = client
        .get(
            "app/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_min_mod_revision(first_revision + 2),
            ),
        )
        .await
        .unwrap();
    assert_eq!(keys(&filtered), ["app/a", "app/c"]);
    assert_eq!(filtered.count(), 3, "count ignores filters, as in etcd");

    let at_first = client
        .get(
            "app/a",
            Some(GetOptions::new().with_revision(first_revision)),
        )
        .await
        .unwrap();
    assert_eq!(at_first.kvs()[0].value(), b"3");

    let keys_only = client
        .get(
            "app/",
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .unwrap();
    assert!(keys_only.kvs().iter().all(|kv| kv.value().is_empty()));
    let count_only = client
        .get(
            "app/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    assert!(count_only.kvs().is_empty());
    assert_eq!(count_only.count(), 3);

    let from_key = client
        .get("app/c", Some(GetOptions::new().with_from_key()))
        .await
        .unwrap();
    assert_eq!(keys(&from_key), ["app/c", "probe", "zzz"]);
    let range = client
        .get("app/b", Some(GetOptions::new().with_range("app/c")))
        .await
        .unwrap();
    assert_eq!(keys(&range), ["app/b"]);
    let serializable = client
        .get("zzz", Some(GetOptions::new().with_serializable()))
        .await
        .unwrap();
    assert_eq!(serializable.kvs()[0].value(), b"x");
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_delete_options_follow_etcd() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    client.put("k", "v1", None).await.unwrap();
    let put = client
        .put("k", "v2", Some(PutOptions::new().with_prev_key()))
        .await
        .unwrap();
    assert_eq!(put.prev_key().unwrap().value(), b"v1");

    let lease = client.lease_grant(60, None).await.unwrap().id();
    client
        .put(
            "k",
            "",
            Some(PutOptions::new().with_ignore_value().with_lease(lease)),
        )
        .await
        .unwrap();
    let now = client.get("k", None).await.unwrap();
    assert_eq!(now.kvs()[0].value(), b"v2", "ignore_value kept the value");
    assert_eq!(now.kvs()[0].lease(), lease);
    client
        .put("k", "v3", Some(PutOptions::new().with_ignore_lease()))
        .await
        .unwrap();
    let now = client.get("k", None).await.unwrap();
    assert_eq!(
        (now.kvs()[0].value(), now.kvs()[0].lease()),
        (&b"v3"[..], lease)
    );

    let missing = client
        .put("absent", "", Some(PutOptions::new().with_ignore_value()))
        .await
        .unwrap_err();
    assert_eq!(
        grpc_status(missing),
        (Code::InvalidArgument, "etcdserver: key not found".into())
    );
    let provided = client
        .put("k", "x", Some(PutOptions::new().with_ignore_value()))
        .await
        .unwrap_err();
    assert_eq!(
        grpc_status(provided),
        (
            Code::InvalidArgument,
            "etcdserver: value is provided".into()
        )
    );
    let empty = client.put("", "x", None).await.unwrap_err();
    assert_eq!(
        grpc_status(empty),
        (
            Code::InvalidArgument,
            "etcdserver: key is not provided".into()
        )
    );
    let no_lease = client
        .put("k", "x", Some(PutOptions::new().with_lease(987654)))
        .await
        .unwrap_err();
    assert_eq!(
        grpc_status(no_lease),
        (
            Code::NotFound,
            "etcdserver: requested lease not found".into()
        )
    );

    client.put("d/1", "a", None).await.unwrap();
    client.put("d/2", "b", None).await.unwrap();
    let deleted = client
        .delete(
            "d/",
            Some(DeleteOptions::new().with_prefix().with_prev_key()),
        )
        .await
        .unwrap();
    assert_eq!(deleted.deleted(), 2);
    assert_eq!(deleted.prev_kvs().len(), 2);
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_compares_branches_and_errors() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let put = client.put("t", "1", None).await.unwrap();
    let revision = put.header().unwrap().revision();
    let txn = Txn::new()
        .when([
            Compare::value("t", CompareOp::Equal, "1"),
            Compare::mod_revision("t", CompareOp::Equal, revision),
            Compare::version("t", CompareOp::Greater, 0),
            Compare::create_revision("t", CompareOp::Less, revision + 1),
            Compare::lease("t", CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put("t", "2", None), TxnOp::get("t", None)])
        .or_else([TxnOp::get("t", None)]);
    let answer = client.txn(txn).await.unwrap();
    assert!(answer.succeeded());
    match &answer.op_responses()[1] {
        TxnOpResponse::Get(get) => assert_eq!(get.kvs()[0].value(), b"2"),
        other => panic!("expected a get answer, got {other:?}"),
    }
    let failing = Txn::new()
        .when([Compare::value("t", CompareOp::Equal, "1")])
        .and_then([TxnOp::put("t", "3", None)])
        .or_else([TxnOp::get("t", None)]);
    let answer = client.txn(failing).await.unwrap();
    assert!(!answer.succeeded());
    assert!(
        member
            .metrics_text()
            .contains("revkv_conflicts_total{op=\"txn\""),
        "a failed compare is counted as a conflict"
    );

    let duplicate = Txn::new().and_then([TxnOp::put("x", "1", None), TxnOp::put("x", "2", None)]);
    assert_eq!(
        grpc_status(client.txn(duplicate).await.unwrap_err()),
        (
            Code::InvalidArgument,
            "etcdserver: duplicate key given in txn request".into()
        )
    );
    let too_many = Txn::new().and_then(
        (0..200)
            .map(|n| TxnOp::put(format!("many/{n}"), "", None))
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        grpc_status(client.txn(too_many).await.unwrap_err()),
        (
            Code::InvalidArgument,
            "etcdserver: too many operations in txn request".into()
        )
    );
    // A nested txn is served (issue 63, item 8; compared with etcd 3.6 in the process tests'
    // `txn_extensions_vs_etcd.rs`): an empty one succeeds, and its answer is nested.
    let nested = Txn::new().and_then([TxnOp::txn(Txn::new())]);
    let answer = client.txn(nested).await.unwrap();
    assert!(answer.succeeded());
    assert!(
        matches!(answer.op_responses()[..], [TxnOpResponse::Txn(ref inner)] if inner.succeeded()),
        "{answer:?}"
    );
    member.stop().await;
}

/// A txn whose branches only get is answered from the store, as etcd answers it: the same
/// answer a txn through the log would give, at the current revision, and no log entry taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txn_that_only_reads_is_answered_without_the_log() {
    const READ_ONLY_TXNS: u64 = 20;
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    client.put("r/a", "1", None).await.unwrap();
    let put = client.put("r/b", "2", None).await.unwrap();
    let revision = put.header().unwrap().revision();
    let before = client.status().await.unwrap().raft_index();
    for round in 0..READ_ONLY_TXNS {
        // Linearizable gets in one half, serializable in the other (answered without a read
        // barrier, as etcd answers a txn whose ranges are all serializable).
        let options = match round % 2 {
            0 => GetOptions::new().with_prefix(),
            _ => GetOptions::new().with_prefix().with_serializable(),
        };
        let txn = Txn::new()
            .when([Compare::value("r/a", CompareOp::Equal, "1")])
            .and_then([TxnOp::get("r/", Some(options)), TxnOp::get("r/b", None)])
            .or_else([TxnOp::get("r/a", None)]);
        let answer = client.txn(txn).await.unwrap();
        assert!(answer.succeeded());
        assert_eq!(answer.header().unwrap().revision(), revision);
        let responses = answer.op_responses();
        let [TxnOpResponse::Get(all), TxnOpResponse::Get(one)] = responses.as_slice() else {
            panic!("two get answers: {answer:?}");
        };
        assert_eq!(keys(all), ["r/a", "r/b"]);
        assert_eq!(all.count(), 2);
        assert_eq!(one.kvs()[0].value(), b"2");
    }
    let failing = Txn::new()
        .when([Compare::value("r/a", CompareOp::Equal, "9")])
        .and_then([TxnOp::get("r/b", None)])
        .or_else([TxnOp::get("r/a", None)]);
    let answer = client.txn(failing).await.unwrap();
    assert!(!answer.succeeded());
    let responses = answer.op_responses();
    let [TxnOpResponse::Get(read)] = responses.as_slice() else {
        panic!("one get answer: {answer:?}");
    };
    assert_eq!(read.kvs()[0].value(), b"1");
    // Each txn through the log would have taken an entry; the member's own background entries
    // (checkpoints, compaction) take fewer than that many in the meantime.
    let after = client.status().await.unwrap().raft_index();
    assert!(after - before < READ_ONLY_TXNS, "{before} -> {after}");
    // A txn that writes still goes through the log and takes the next revision.
    let writing = Txn::new().and_then([TxnOp::put("r/c", "3", None)]);
    let written = client.txn(writing).await.unwrap();
    assert_eq!(written.header().unwrap().revision(), revision + 1);
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_and_revision_errors_use_etcds_messages() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let first = client.put("c", "1", None).await.unwrap();
    let old = first.header().unwrap().revision();
    let latest = client.put("c", "2", None).await.unwrap();
    let current = latest.header().unwrap().revision();
    client
        .compact(
            current,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .unwrap();
    let compacted = client
        .get("c", Some(GetOptions::new().with_revision(old)))
        .await
        .unwrap_err();
    assert_eq!(
        grpc_status(compacted),
        (
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted".into()
        )
    );
    let future = client
        .get("c", Some(GetOptions::new().with_revision(current + 100)))
        .await
        .unwrap_err();
    assert_eq!(
        grpc_status(future),
        (
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision".into()
        )
    );
    let again = client.compact(old, None).await.unwrap_err();
    assert_eq!(grpc_status(again).0, Code::OutOfRange);
    let hash = client.hash_kv(0).await.unwrap();
    assert_eq!(hash.compact_version(), current);
    member.stop().await;
}

/// Several tasks increment one counter with compare-and-swap txns; the final value equals the
/// number of successful swaps, and every failed swap was retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_swap_under_contention_loses_no_increment() {
    const TASKS: u64 = 4;
    const INCREMENTS: u64 = 15;
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    client.put("counter", "0", None).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mut client = member.client().await;
        tasks.push(tokio::spawn(async move {
            let (mut swaps, mut conflicts) = (0u64, 0u64);
            while swaps < INCREMENTS {
                let now = client.get("counter", None).await.unwrap();
                let kv = &now.kvs()[0];
                let value: u64 = kv.value_str().unwrap().parse().unwrap();
                let txn = Txn::new()
                    .when([Compare::mod_revision(
                        "counter",
                        CompareOp::Equal,
                        kv.mod_revision(),
                    )])
                    .and_then([TxnOp::put("counter", (value + 1).to_string(), None)]);
                if client.txn(txn).await.unwrap().succeeded() {
                    swaps += 1;
                } else {
                    conflicts += 1;
                }
            }
            (swaps, conflicts)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap().0;
    }
    let now = client.get("counter", None).await.unwrap();
    assert_eq!(now.kvs()[0].value_str().unwrap(), total.to_string());
    assert_eq!(total, TASKS * INCREMENTS);
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_carry_the_cluster_id_the_store_recorded() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let recorded = member
        .node
        .backend()
        .member()
        .store()
        .cluster_id()
        .expect("read the store's cluster id")
        .expect("a new cluster records its id when it applies its founding membership");
    assert_ne!(recorded, 0);
    let put = client.put("k", "v", None).await.expect("put");
    assert_eq!(put.header().expect("a header").cluster_id(), recorded);
    let get = client.get("k", None).await.expect("get");
    assert_eq!(get.header().expect("a header").cluster_id(), recorded);
    let status = client.status().await.expect("status");
    assert_eq!(status.header().expect("a header").cluster_id(), recorded);
    member.stop().await;
}
