//! What etcd serves in a txn beyond compare-and-swap, against etcd 3.6.16 itself (issue 63, item
//! 8): nested txns, compares over a key range, gets at a revision and puts with `ignore_value` /
//! `ignore_lease`, sent through etcd's gRPC API by the `etcd-client` crate (etcdctl cannot write
//! a nested txn). One script runs against a fresh etcd and a fresh three-member revkv; every answer
//! is written down whole (succeeded, every nested answer, every key-value with its revisions and
//! version, the header's revision, the error's code and message) and the two transcripts must be
//! equal, except the one rule revkv keeps stricter on purpose, which the script checks apart.
//!
//! Without etcd 3.6 in the private tools directory the test passes with a note, except under
//! `CI=true`.

use crate::etcd_history;
use crate::process_cluster;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use etcd_history::etcd_3_minor;
use process_cluster::{cluster_options, ProcessCluster};
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::{json, Value};

fn kv_json(kv: &KeyValue) -> Value {
    json!({
        "key": String::from_utf8_lossy(kv.key()),
        "value": String::from_utf8_lossy(kv.value()),
        "create_revision": kv.create_revision(),
        "mod_revision": kv.mod_revision(),
        "version": kv.version(),
        "lease": kv.lease(),
    })
}

/// A txn's answer, whole, nested answers included; the header's revision but not its ids.
fn txn_json(response: &TxnResponse) -> Value {
    let ops: Vec<Value> = response
        .op_responses()
        .iter()
        .map(|op| match op {
            TxnOpResponse::Put(put) => json!({"put": put.prev_key().map(kv_json)}),
            TxnOpResponse::Get(get) => json!({
                "get": get.kvs().iter().map(kv_json).collect::<Vec<_>>(),
                "count": get.count(),
                "more": get.more(),
            }),
            TxnOpResponse::Delete(delete) => json!({
                "deleted": delete.deleted(),
                "prev_kvs": delete.prev_kvs().iter().map(kv_json).collect::<Vec<_>>(),
            }),
            TxnOpResponse::Txn(nested) => json!({"txn": txn_json(nested)}),
        })
        .collect();
    json!({
        "revision": response.header().map(|header| header.revision()),
        "succeeded": response.succeeded(),
        "ops": ops,
    })
}

fn outcome(answer: Result<TxnResponse, etcd_client::Error>) -> Value {
    match answer {
        Ok(response) => txn_json(&response),
        Err(etcd_client::Error::GRpcStatus(status)) => {
            json!({"error": format!("{:?}: {}", status.code(), status.message())})
        }
        Err(other) => json!({"error": other.to_string()}),
    }
}

fn put(key: &str, value: &str) -> TxnOp {
    TxnOp::put(key, value, None)
}

fn version_is(key: &str, version: i64) -> Compare {
    Compare::version(key, CompareOp::Equal, version)
}

/// The txns of the script, each with what it is about.
fn script() -> Vec<(&'static str, Txn)> {
    let prefix_values_are =
        |value: &str| Compare::value("app/", CompareOp::Equal, value).with_range("app0");
    vec![
        (
            "a nested txn's compare reads the state before the outer txn",
            Txn::new().and_then([
                put("a", "10"),
                TxnOp::txn(
                    Txn::new()
                        .when([version_is("a", 1)])
                        .and_then([put("n", "before")])
                        .or_else([put("n", "after")]),
                ),
                TxnOp::get("a", None),
            ]),
        ),
        (
            "nested two deep, the failure branch",
            Txn::new().when([version_is("a", 2)]).and_then([TxnOp::txn(
                Txn::new().when([version_is("a", 7)]).or_else([
                    TxnOp::txn(Txn::new().and_then([put("deep", "1"), TxnOp::get("n", None)])),
                    TxnOp::get("deep", None),
                ]),
            )]),
        ),
        (
            "a range compare that holds for every key",
            Txn::new()
                .when([prefix_values_are("x")])
                .and_then([put("range", "held")])
                .or_else([put("range", "failed")]),
        ),
        (
            "a range compare that one key breaks",
            Txn::new()
                .when([Compare::mod_revision("app/", CompareOp::Less, 3).with_range("app0")])
                .and_then([put("range", "held")])
                .or_else([put("range", "failed")]),
        ),
        (
            "a range with no key compares as a missing key",
            Txn::new()
                .when(
                    [
                        Compare::create_revision("none/", CompareOp::Greater, 0)
                            .with_range("none0"),
                    ],
                )
                .or_else([TxnOp::get("range", None)]),
        ),
        (
            "gets at revisions inside a txn that writes",
            Txn::new().and_then([
                put("a", "11"),
                TxnOp::get("a", Some(GetOptions::new().with_revision(2))),
                TxnOp::get(
                    "app/",
                    Some(GetOptions::new().with_prefix().with_revision(3)),
                ),
                TxnOp::get("a", None),
            ]),
        ),
        (
            "a get at a future revision refuses the whole txn",
            Txn::new().and_then([
                put("never", "1"),
                TxnOp::get("a", Some(GetOptions::new().with_revision(1000))),
            ]),
        ),
        (
            "ignore_value and ignore_lease inside a txn",
            Txn::new().and_then([
                TxnOp::put(
                    "a",
                    "",
                    Some(PutOptions::new().with_ignore_value().with_prev_key()),
                ),
                TxnOp::put("b", "new-b", Some(PutOptions::new().with_ignore_lease())),
            ]),
        ),
        (
            "ignore_value on a missing key refuses the whole txn",
            Txn::new().and_then([
                put("never", "1"),
                TxnOp::txn(Txn::new().and_then([TxnOp::put(
                    "missing",
                    "",
                    Some(PutOptions::new().with_ignore_value()),
                )])),
            ]),
        ),
        (
            "a nested txn's success and failure may put the same key",
            Txn::new().and_then([TxnOp::txn(
                Txn::new()
                    .when([version_is("a", 0)])
                    .and_then([put("same", "then")])
                    .or_else([put("same", "else")]),
            )]),
        ),
        (
            "two nested txns putting one key",
            Txn::new().and_then([
                TxnOp::txn(Txn::new().and_then([put("dup", "1")])),
                TxnOp::txn(Txn::new().or_else([put("dup", "2")])),
            ]),
        ),
        (
            "a delete then a nested put of its key",
            Txn::new().and_then([
                TxnOp::delete("dup", None),
                TxnOp::txn(Txn::new().and_then([put("dup", "1")])),
            ]),
        ),
        (
            "a txn of nested gets only",
            Txn::new().and_then([TxnOp::txn(
                Txn::new()
                    .when([prefix_values_are("x")])
                    .and_then([TxnOp::get("app/", Some(GetOptions::new().with_prefix()))])
                    .or_else([TxnOp::get("a", Some(GetOptions::new().with_revision(2)))]),
            )]),
        ),
    ]
}

/// Runs the setup and the script against one system.
async fn run_script(endpoint: &str) -> Vec<(&'static str, Value)> {
    let mut client = Client::connect([endpoint], None)
        .await
        .expect("connect over gRPC");
    for (key, value) in [("a", "1"), ("b", "2"), ("app/1", "x"), ("app/2", "x")] {
        client.put(key, value, None).await.expect("a setup put");
    }
    let lease = client.lease_grant(600, None).await.expect("a lease").id();
    let with_lease = PutOptions::new().with_lease(lease);
    client
        .put("b", "2", Some(with_lease))
        .await
        .expect("attach b");
    let mut seen = Vec::new();
    for (about, txn) in script() {
        seen.push((about, outcome(client.txn(txn).await)));
        let b_lease = client.get("b", None).await.unwrap().kvs()[0].lease();
        seen.push(("b keeps its lease", json!(b_lease == lease)));
    }
    seen
}

/// etcd lets a nested txn put a key that a later nested txn deletes (its check looks only at
/// puts after deletes) and writes the key twice in one revision; revkv refuses the pair, as its
/// key index keeps one version of a key per revision.
async fn put_then_nested_delete(endpoint: &str) -> Value {
    let mut client = Client::connect([endpoint], None).await.unwrap();
    let txn = Txn::new().and_then([
        TxnOp::txn(Txn::new().and_then([put("twice", "1")])),
        TxnOp::txn(Txn::new().and_then([TxnOp::delete("twice", None)])),
    ]);
    outcome(client.txn(txn).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_txns_range_compares_and_keeping_puts_answer_as_etcd_3_6_does() {
    let Some(release) = etcd_3_minor(6) else {
        return;
    };
    let etcd = EtcdServer::start(&release.etcd).await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    revkv.wait_for_published_client_urls().await;
    let revkv_endpoint = format!("http://{}", revkv.grpc_endpoints()[0]);

    let from_etcd = run_script(&etcd.client_url).await;
    let from_revkv = run_script(&revkv_endpoint).await;
    for ((about, on_etcd), (_, on_revkv)) in from_etcd.iter().zip(&from_revkv) {
        assert_eq!(on_revkv, on_etcd, "{about}");
    }
    assert_eq!(from_revkv.len(), from_etcd.len());
    // The script reached the data: the first txn put under a nested compare, as etcd did.
    assert_eq!(from_etcd[0].1["ops"][1]["txn"]["succeeded"], json!(true));

    let on_etcd = put_then_nested_delete(&etcd.client_url).await;
    let on_revkv = put_then_nested_delete(&revkv_endpoint).await;
    assert_eq!(
        on_etcd["succeeded"],
        json!(true),
        "etcd accepts it: {on_etcd}"
    );
    assert_eq!(
        on_revkv["error"],
        json!("InvalidArgument: etcdserver: duplicate key given in txn request"),
    );
}
