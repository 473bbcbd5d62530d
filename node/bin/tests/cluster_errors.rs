//! Every contract error (API.md section 3) that applies to a replicated cluster, produced by real
//! requests against real `revkv serve` processes, mostly through followers so that forwarded
//! requests are covered: 400 `invalid` and `future_revision`, 404 `not_found` (key, member), 409
//! `conflict` with `current`, 410 `compacted` with `compact_revision`, 413 `too_large`, 503
//! `unavailable` with `Retry-After` (a member never added; a follower that lost its quorum; a
//! linearizable read on a leader that lost its quorum), and 504 `timeout` (`min_revision` never
//! reached; a write on a leader that lost its quorum, whose outcome is unknown).
//!
//! Members run with a 1 s request timeout so the 503 and 504 cases answer quickly.

use crate::process_cluster;

use process_cluster::{
    cluster_options, wait_until, Answer, ClusterOptions, MemberClient, ProcessCluster,
    CONVERGENCE_TIMEOUT,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MAX_VALUE_BYTES: usize = 1024;
const MAX_BODY_BYTES: usize = 8192;

fn error_cluster_options() -> ClusterOptions {
    cluster_options()
        .with_request_timeout_ms(1000)
        .with_flags(&[
            "--max-value-bytes",
            &MAX_VALUE_BYTES.to_string(),
            "--max-body-bytes",
            &MAX_BODY_BYTES.to_string(),
        ])
}

/// A PUT with preconditions in headers.
async fn conditional_put(
    client: &MemberClient,
    key: &str,
    value: &str,
    header: (&str, &str),
) -> Answer {
    client
        .send(
            Method::PUT,
            &format!("/v1/kv/{key}"),
            Some(json!({ "value": value })),
            &[header],
        )
        .await
}

/// A request with a raw (possibly malformed) body.
async fn raw_request(client: &MemberClient, method: Method, path: &str, body: Vec<u8>) -> Answer {
    client
        .try_send(method, path, Some(body), &[])
        .await
        .unwrap_or_else(|error| panic!("{path} on member {}: no answer: {error}", client.id))
}

/// Asserts a 503 `unavailable` with a `Retry-After` of whole seconds, at least 1.
fn expect_unavailable_with_retry_after(answer: &Answer, what: &str) {
    answer.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &[]);
    let retry_after = answer
        .header("retry-after")
        .unwrap_or_else(|| panic!("{what}: a 503 carries Retry-After: {answer:?}"));
    let seconds: u64 = retry_after
        .parse()
        .unwrap_or_else(|_| panic!("{what}: Retry-After is whole seconds, not {retry_after:?}"));
    assert!(seconds >= 1, "{what}: Retry-After is at least 1 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_errors_answer_their_contract_codes_through_followers_and_the_leader() {
    let cluster = ProcessCluster::start(3, error_cluster_options()).await;
    let leader_id = cluster.leader().await;
    let followers: Vec<MemberClient> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader_id)
        .map(|id| cluster.client(id))
        .collect();
    let (follower, other_follower) = (&followers[0], &followers[1]);
    let leader = cluster.client(leader_id);

    let first = follower.put_ok("errors/key", "one").await;
    let second = other_follower.put_ok("errors/key", "two").await;
    let third = leader.put_ok("errors/key", "three").await;

    // 400 invalid: malformed requests and limits, refused by the member that received them.
    for client in [follower, &leader] {
        let unknown_parameter = client.get("/v1/kv/errors/key?prefx=errors").await;
        unknown_parameter.expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        let not_json =
            raw_request(client, Method::PUT, "/v1/kv/errors/key", b"{nope".to_vec()).await;
        not_json.expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        let long_key = "k".repeat(5000);
        client
            .put(&long_key, "v")
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        let same_key_twice = json!({
            "success": [
                {"put": {"key": "errors/twice", "value": "a"}},
                {"put": {"key": "errors/twice", "value": "b"}}
            ]
        });
        client.post("/v1/txn", same_key_twice).await.expect_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            &[],
        );
        let too_many_ops: Vec<Value> = (0..129)
            .map(|index| json!({"put": {"key": format!("errors/op/{index}"), "value": ""}}))
            .collect();
        client
            .post("/v1/txn", json!({ "success": too_many_ops }))
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        client
            .post("/v1/compact", json!({ "revision": 0 }))
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        client
            .post(
                "/v1/members",
                json!({ "id": 9, "peer_url": "not a url", "client_url": "http://127.0.0.1:1" }),
            )
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        client
            .post("/v1/members/zero/promote", json!({}))
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    assert_eq!(
        follower.local_value("errors/twice").await,
        None,
        "a rejected txn changed nothing"
    );

    // 400 future_revision: reads above the current revision, and a compaction that the state
    // machine rejects after it went through the log.
    let far = third + 1_000_000;
    follower
        .get_key("errors/key", &format!("revision={far}"))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "future_revision", &[]);
    other_follower
        .get(&format!(
            "/v1/kv?prefix=errors/&revision={far}&consistency=serializable"
        ))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "future_revision", &[]);
    follower
        .get(&format!("/v1/hash?revision={far}"))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "future_revision", &[]);
    follower
        .post("/v1/compact", json!({ "revision": far }))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "future_revision", &[]);

    // 404 not_found: a key, a member, an endpoint.
    for client in [follower, &leader] {
        client.get_key("errors/absent", "").await.expect_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &[],
        );
        client
            .get_key("errors/absent", "consistency=serializable")
            .await
            .expect_error(StatusCode::NOT_FOUND, "not_found", &[]);
        client
            .post("/v1/members/99/promote", json!({}))
            .await
            .expect_error(StatusCode::NOT_FOUND, "not_found", &[]);
        client
            .delete("/v1/members/99")
            .await
            .expect_error(StatusCode::NOT_FOUND, "not_found", &[]);
        client
            .post("/v1/leader/transfer", json!({ "to": 99 }))
            .await
            .expect_error(StatusCode::NOT_FOUND, "not_found", &[]);
        client.get("/v1/no-such-endpoint").await.expect_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &[],
        );
    }

    // 409 conflict with `current`: preconditions are evaluated by the state machine, after the
    // follower forwarded the write, and `current` is the key as that revision saw it.
    let stale = conditional_put(
        follower,
        "errors/key",
        "four",
        ("if-match", &format!("\"{first}\"")),
    )
    .await;
    stale.expect_error(StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(stale.json["current"]["value"], "three");
    assert_eq!(stale.json["current"]["mod_revision"], third);
    assert_eq!(stale.json["current"]["version"], 3);
    let exists =
        conditional_put(other_follower, "errors/key", "four", ("if-none-match", "*")).await;
    exists.expect_error(StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(exists.json["current"]["mod_revision"], third);
    let absent = conditional_put(
        follower,
        "errors/absent",
        "x",
        ("if-match", &format!("\"{second}\"")),
    )
    .await;
    absent.expect_error(StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(absent.json["current"], Value::Null);
    let stale_delete = follower
        .send(
            Method::DELETE,
            "/v1/kv/errors/key",
            None,
            &[("if-match", &format!("\"{second}\""))],
        )
        .await;
    stale_delete.expect_error(StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(stale_delete.json["current"]["value"], "three");
    // Nothing changed, and the matching precondition succeeds through another member.
    let matching = conditional_put(
        other_follower,
        "errors/key",
        "four",
        ("if-match", &format!("\"{third}\"")),
    )
    .await;
    let fourth = matching.expect_ok("a matching If-Match").revision();
    assert_eq!(
        fourth,
        third + 1,
        "the failed preconditions took no revision"
    );

    // 410 compacted: compact through one follower, read history below it on the other.
    follower
        .post("/v1/compact", json!({ "revision": third }))
        .await
        .expect_ok("compact through a follower");
    let below = other_follower
        .get_key("errors/key", &format!("revision={first}"))
        .await;
    below.expect_error(StatusCode::GONE, "compacted", &["compact_revision"]);
    assert_eq!(below.json["compact_revision"], third);
    let range_below = leader
        .get(&format!("/v1/kv?prefix=errors/&revision={second}"))
        .await;
    range_below.expect_error(StatusCode::GONE, "compacted", &["compact_revision"]);
    assert_eq!(range_below.json["compact_revision"], third);
    // Compacting below the compact revision is rejected by the state machine on every member.
    let again = other_follower
        .post("/v1/compact", json!({ "revision": second }))
        .await;
    again.expect_error(StatusCode::GONE, "compacted", &["compact_revision"]);
    assert_eq!(again.json["compact_revision"], third);
    let at_compaction = other_follower
        .get_key("errors/key", &format!("revision={third}"))
        .await
        .expect_ok("a read at the compact revision");
    assert_eq!(at_compaction.json["kv"]["value"], "three");

    // 413 too_large: a value over --max-value-bytes, and a body over --max-body-bytes.
    let big_value = "v".repeat(MAX_VALUE_BYTES + 1);
    follower.put("errors/big", &big_value).await.expect_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        &[],
    );
    let txn_with_big_value =
        json!({"success": [{"put": {"key": "errors/big", "value": big_value}}]});
    leader
        .post("/v1/txn", txn_with_big_value)
        .await
        .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large", &[]);
    let huge_body = serde_json::to_vec(&json!({ "value": "v".repeat(MAX_BODY_BYTES) })).unwrap();
    raw_request(other_follower, Method::PUT, "/v1/kv/errors/big", huge_body)
        .await
        .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large", &[]);
    assert_eq!(leader.local_value("errors/big").await, None);

    // 504 timeout: a revision this member will not reach within the request timeout.
    let never = fourth + 1_000;
    for client in [follower, &leader] {
        let waited = client
            .get_key(
                "errors/key",
                &format!("consistency=serializable&min_revision={never}"),
            )
            .await;
        waited.expect_error(StatusCode::GATEWAY_TIMEOUT, "timeout", &[]);
    }

    // None of the refused requests changed anything: every member agrees on one state.
    let ids = cluster.ids();
    let revision = cluster.wait_for_same_revision(&ids, fourth).await;
    assert_eq!(revision, fourth, "only the accepted writes took revisions");
    cluster.assert_same_hash(&ids, revision).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_was_never_added_answers_unavailable_with_retry_after() {
    let mut lone = ProcessCluster::without_members(error_cluster_options());
    lone.start_joining_member(1).await;
    let client = lone.client(1);
    expect_unavailable_with_retry_after(&client.get("/readyz").await, "readyz");
    expect_unavailable_with_retry_after(&client.put("k", "v").await, "a write");
    expect_unavailable_with_retry_after(&client.get_key("k", "").await, "a linearizable read");
    let status = client
        .status()
        .await
        .expect("status answers without a leader");
    assert_eq!(status["leader_id"], Value::Null);
}

/// Waits until `client` reports that it knows no leader.
async fn wait_until_leaderless(client: &MemberClient) {
    let what = format!("member {} to notice it has no leader", client.id);
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        let status = client.status().await?;
        status["leader_id"].is_null().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_a_quorum_answers_unavailable_with_retry_after() {
    let mut cluster = ProcessCluster::start(3, error_cluster_options()).await;
    let written = cluster.client(1).put_ok("quorum/key", "before").await;
    let leader = cluster.leader().await;
    let survivor = *cluster
        .ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    // Make sure the survivor holds the write, then take away its leader and its quorum.
    cluster
        .client(survivor)
        .get_key(
            "quorum/key",
            &format!("consistency=serializable&min_revision={written}"),
        )
        .await
        .expect_ok("the survivor applied the write");
    for id in cluster.ids() {
        if id != survivor {
            cluster.kill(id);
        }
    }
    let client = cluster.client(survivor);
    wait_until_leaderless(&client).await;

    expect_unavailable_with_retry_after(&client.put("quorum/key", "after").await, "a write");
    expect_unavailable_with_retry_after(
        &client.get_key("quorum/key", "").await,
        "a linearizable read",
    );
    expect_unavailable_with_retry_after(&client.get("/readyz").await, "readyz");
    // What needs no leader still works: serializable reads of the local state.
    let local = client
        .get_key("quorum/key", "consistency=serializable")
        .await
        .expect_ok("a serializable read without a quorum");
    assert_eq!(local.json["kv"]["value"], "before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_a_quorum_times_out_writes_and_refuses_linearizable_reads() {
    let mut cluster = ProcessCluster::start(3, error_cluster_options()).await;
    cluster.client(1).put_ok("quorum/key", "before").await;
    let leader = cluster.leader().await;
    for id in cluster.ids() {
        if id != leader {
            cluster.kill(id);
        }
    }
    let client = cluster.client(leader);
    // The leader still leads (openraft does not step down without a quorum), so it appends the
    // write and waits for a commit that cannot come: 504, the outcome is unknown (the entry would
    // commit if the followers came back).
    client.put("quorum/key", "after").await.expect_error(
        StatusCode::GATEWAY_TIMEOUT,
        "timeout",
        &[],
    );
    // A ReadIndex round needs a quorum to confirm the leadership; without one there is no usable
    // leader: 503 with Retry-After.
    expect_unavailable_with_retry_after(
        &client.get_key("quorum/key", "").await,
        "a linearizable read on a leader without a quorum",
    );
    let local = client
        .get_key("quorum/key", "consistency=serializable")
        .await
        .expect_ok("a serializable read without a quorum");
    assert_eq!(local.json["kv"]["value"], "before");
}

/// `--max-delete-keys`: a delete (or a txn branch's deletes together) that would remove more keys
/// than the limit is refused whole with 400 `invalid`, through a follower and the leader, and
/// removes nothing, while a delete within the limit removes its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_of_more_keys_than_the_limit_is_refused_whole() {
    let options = cluster_options().with_flags(&["--max-delete-keys", "3"]);
    let cluster = ProcessCluster::start(3, options).await;
    let leader_id = cluster.leader().await;
    let follower_id = cluster.ids().into_iter().find(|id| *id != leader_id);
    let follower = cluster.client(follower_id.expect("a follower"));
    let leader = cluster.client(leader_id);
    for index in 0..5 {
        follower.put_ok(&format!("doomed/{index}"), "v").await;
    }
    let revision_before = follower.put_ok("doomed-marker", "v").await;

    for client in [&follower, &leader] {
        let refused = client.delete("/v1/kv/doomed/?prefix=true").await;
        refused.expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
        assert!(
            refused.json["error"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("max_delete_keys")),
            "the refusal names the limit: {refused:?}"
        );
        // Two deletes of two and three keys: five in all, over the limit of three.
        let split = json!({
            "success": [
                {"delete": {"key": "doomed/0", "range_end": "doomed/2"}},
                {"delete": {"key": "doomed/2", "range_end": "doomed/5"}}
            ]
        });
        client
            .post("/v1/txn", split)
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    let listed = leader.get("/v1/kv?prefix=doomed/").await.expect_ok("list");
    assert_eq!(listed.json["kvs"].as_array().map(Vec::len), Some(5));
    assert_eq!(listed.revision(), revision_before, "nothing was written");

    let three = json!({
        "success": [{"delete": {"key": "doomed/0", "range_end": "doomed/3"}}]
    });
    let within = leader.post("/v1/txn", three).await;
    let within = within.expect_ok("a delete of three keys");
    let listed = leader.get("/v1/kv?prefix=doomed/").await.expect_ok("list");
    assert_eq!(
        listed.json["kvs"].as_array().map(Vec::len),
        Some(2),
        "{within:?}"
    );
}
