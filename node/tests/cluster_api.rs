//! Member-wide routes: status, compaction, the replica hash, membership, leader transfer, and the
//! health and readiness probes.

use crate::support;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;
use support::{assert_error, member, Api, MEMBER_ID, RAFT_TERM};

#[tokio::test]
async fn status_reports_the_member_with_a_header() {
    let api = Api::new();
    let revision = api.put_value("k", "v").await;
    let status = api.get("/v1/status").await;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(
        status.json["header"],
        json!({ "revision": revision, "member_id": MEMBER_ID, "raft_term": RAFT_TERM })
    );
    assert_eq!(status.json["member_id"], MEMBER_ID);
    assert_eq!(status.json["leader_id"], MEMBER_ID);
    assert_eq!(status.json["revision"], revision);
    assert_eq!(status.json["compact_revision"], 0);
    assert_eq!(status.json["applied_index"], 1);
    assert_eq!(status.json["role"], "leader");
    assert!(status.json["state_db_bytes"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn compaction_is_answered_once_and_refuses_old_and_future_revisions() {
    let api = Api::new();
    api.put_value("k", "1").await;
    let latest = api.put_value("k", "2").await;
    let compacted = api.post("/v1/compact", json!({ "revision": latest })).await;
    assert_eq!(compacted.status, StatusCode::OK);
    assert_eq!(compacted.revision(), latest, "compaction takes no revision");
    assert_eq!(api.get("/v1/status").await.json["compact_revision"], latest);

    let again = api.post("/v1/compact", json!({ "revision": latest })).await;
    assert_error(&again, StatusCode::GONE, "compacted", &["compact_revision"]);
    assert_eq!(again.json["compact_revision"], latest);
    let future = api
        .post("/v1/compact", json!({ "revision": latest + 10 }))
        .await;
    assert_error(&future, StatusCode::BAD_REQUEST, "future_revision", &[]);
    let zero = api.post("/v1/compact", json!({ "revision": 0 })).await;
    assert_error(&zero, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn the_hash_is_stable_for_a_revision_and_moves_with_writes() {
    let api = Api::new();
    let first = api.put_value("k", "1").await;
    let at_first = api.get("/v1/hash").await;
    assert_eq!(at_first.status, StatusCode::OK);
    assert_eq!(at_first.json["revision"], first);
    assert_eq!(at_first.json["compact_revision"], 0);
    assert!(at_first.json["hash"].is_u64());

    api.put_value("k", "2").await;
    let later = api.get("/v1/hash").await;
    assert_ne!(later.json["hash"], at_first.json["hash"]);
    let replayed = api.get(&format!("/v1/hash?revision={first}")).await;
    assert_eq!(replayed.json["hash"], at_first.json["hash"]);
    assert_eq!(
        replayed.revision(),
        first + 1,
        "the header is the current revision"
    );
}

#[tokio::test]
async fn members_can_be_listed_added_promoted_and_removed() {
    let api = Api::new();
    let listed = api.get("/v1/members").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.json["members"], json!([member(MEMBER_ID, false)]));
    assert_eq!(listed.json["header"]["member_id"], MEMBER_ID);

    let new_member = json!({ "id": 2, "peer_url": "http://127.0.0.2:2380",
                             "client_url": "http://127.0.0.2:2379" });
    let added = api.post("/v1/members", new_member).await;
    assert_eq!(added.status, StatusCode::OK, "{:?}", added.json);
    assert_eq!(added.json["members"][1], json!(member(2, true)));
    let with_grpc = json!({ "id": 3, "peer_url": "http://127.0.0.3:2380",
                            "client_url": "http://127.0.0.3:2379",
                            "grpc_url": "http://127.0.0.3:2479" });
    let added = api.post("/v1/members", with_grpc).await;
    assert_eq!(added.status, StatusCode::OK, "{:?}", added.json);
    assert_eq!(
        added.json["members"][2]["grpc_url"],
        "http://127.0.0.3:2479"
    );
    assert_eq!(api.delete("/v1/members/3").await.status, StatusCode::OK);

    let promoted = api.post("/v1/members/2/promote", json!(null)).await;
    assert_eq!(promoted.status, StatusCode::OK);
    assert_eq!(promoted.json["members"][1]["is_learner"], false);

    let removed = api.delete("/v1/members/2").await;
    assert_eq!(removed.status, StatusCode::OK);
    assert_eq!(removed.json["members"], json!([member(MEMBER_ID, false)]));

    let unknown = api.delete("/v1/members/2").await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "not_found", &[]);
    let unknown = api.post("/v1/members/9/promote", json!(null)).await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "not_found", &[]);
}

#[tokio::test]
async fn bad_member_requests_are_invalid() {
    let api = Api::new();
    let bad_bodies = [
        json!({ "id": 0, "peer_url": "http://a:1", "client_url": "http://a:2" }),
        json!({ "id": 2, "peer_url": "a:1", "client_url": "http://a:2" }),
        json!({ "id": 2, "peer_url": "http://a:1" }),
        json!({ "id": 2, "peer_url": "http://a:1", "client_url": "http://a:2",
                "grpc_url": "http://a b:3" }),
        json!({ "id": 2, "peer_url": "http://a:1", "client_url": "http://a:2",
                "grpc_url": "a:3" }),
    ];
    for body in bad_bodies {
        let answer = api.post("/v1/members", body).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    for uri in ["/v1/members/abc", "/v1/members/0", "/v1/members/-1"] {
        let answer = api.delete(uri).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
}

#[tokio::test]
async fn leadership_can_be_transferred_to_a_known_voter_only() {
    let api = Api::new();
    let moved = api
        .post("/v1/leader/transfer", json!({ "to": MEMBER_ID }))
        .await;
    assert_eq!(moved.status, StatusCode::OK);
    assert_eq!(moved.json["header"]["member_id"], MEMBER_ID);
    let unknown = api.post("/v1/leader/transfer", json!({ "to": 42 })).await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "not_found", &[]);
    let malformed = api.post("/v1/leader/transfer", json!({ "id": 1 })).await;
    assert_error(&malformed, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn health_is_always_true_and_readiness_follows_the_backend() {
    let api = Api::new();
    let health = api.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json, json!({ "health": true }));
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.json, json!({ "ready": true }));

    api.backend.set_ready(false);
    let not_ready = api.get("/readyz").await;
    assert_error(
        &not_ready,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        &[],
    );
    assert_eq!(not_ready.header("retry-after"), Some("1"));
    let health = api.send(Method::GET, "/healthz", &[], Body::empty()).await;
    assert_eq!(
        health.status,
        StatusCode::OK,
        "an unready member is still healthy"
    );
}
