//! The lease routes over a plain store (contract sections 4 and 7): the answers' shapes, the
//! lease a put carries, revoke deleting the attached keys in one revision, and the errors. Expiry
//! and keep-alive through a follower need real members: `node/bin/tests/leases.rs`.

use crate::support;

use axum::http::StatusCode;
use serde_json::json;
use support::{assert_error, Api};

#[tokio::test]
async fn grant_attach_time_to_live_list_and_revoke() {
    let api = Api::new();
    let granted = api.post("/v1/leases", json!({ "ttl": 30, "id": 7 })).await;
    assert_eq!(granted.status, StatusCode::OK);
    assert_eq!(
        (granted.json["id"].clone(), granted.json["ttl"].clone()),
        (json!(7), json!(30))
    );
    assert_eq!(granted.revision(), 1, "a grant takes no revision");
    let picked = api.post("/v1/leases", json!({ "ttl": 10 })).await;
    let picked_id = picked.json["id"].as_i64().unwrap();
    assert!(picked_id > 0 && picked_id != 7);

    for key in ["svc/a", "svc/b"] {
        let put = api
            .put(
                &format!("/v1/kv/{key}"),
                json!({ "value": "up", "lease": 7 }),
            )
            .await;
        assert_eq!(put.status, StatusCode::OK);
    }
    let read = api.get("/v1/kv/svc/a").await;
    assert_eq!(read.json["kv"]["lease"], 7);

    let ttl = api.get("/v1/leases/7?keys=true").await;
    assert_eq!(ttl.status, StatusCode::OK);
    assert_eq!(ttl.json["id"], 7);
    assert_eq!(ttl.json["granted_ttl"], 30);
    assert!(ttl.json["ttl"].as_i64().unwrap() <= 30);
    assert_eq!(ttl.json["keys"], json!(["svc/a", "svc/b"]));
    assert!(api.get("/v1/leases/7").await.json.get("keys").is_none());

    let listed = api.get("/v1/leases").await;
    let mut ids: Vec<i64> = listed.json["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lease| lease["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected = vec![7, picked_id];
    expected.sort_unstable();
    assert_eq!(ids, expected);

    let kept = api.post("/v1/leases/7/keepalive", json!({})).await;
    assert_eq!(
        (
            kept.status,
            kept.json["id"].clone(),
            kept.json["ttl"].clone()
        ),
        (StatusCode::OK, json!(7), json!(30))
    );

    let before = api.get("/v1/kv?prefix=svc/").await.revision();
    let revoked = api.delete("/v1/leases/7").await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert_eq!(
        revoked.revision(),
        before + 1,
        "both keys deleted in one revision"
    );
    assert_eq!(api.get("/v1/kv?prefix=svc/").await.json["count"], 0);
    assert_eq!(api.get("/v1/kv/svc/a").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unknown_leases_are_not_found_and_bad_input_is_invalid() {
    let api = Api::new();
    let put = api
        .put("/v1/kv/a", json!({ "value": "v", "lease": 99 }))
        .await;
    assert_error(&put, StatusCode::NOT_FOUND, "not_found", &[]);
    assert_eq!(
        api.get("/v1/kv/a").await.status,
        StatusCode::NOT_FOUND,
        "nothing written"
    );
    for answer in [
        api.get("/v1/leases/99").await,
        api.delete("/v1/leases/99").await,
        api.post("/v1/leases/99/keepalive", json!({})).await,
    ] {
        assert_error(&answer, StatusCode::NOT_FOUND, "not_found", &[]);
    }
    api.post("/v1/leases", json!({ "ttl": 5, "id": 3 })).await;
    let duplicate = api.post("/v1/leases", json!({ "ttl": 5, "id": 3 })).await;
    assert_error(&duplicate, StatusCode::BAD_REQUEST, "invalid", &[]);
    for body in [
        json!({ "ttl": -1 }),
        json!({ "ttl": 5, "id": -2 }),
        json!({ "tll": 5 }),
    ] {
        let answer = api.post("/v1/leases", body).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    let bad_id = api.get("/v1/leases/seven").await;
    assert_error(&bad_id, StatusCode::BAD_REQUEST, "invalid", &[]);
    let too_long = api
        .post("/v1/leases", json!({ "ttl": 9_000_000_001i64 }))
        .await;
    assert_error(&too_long, StatusCode::BAD_REQUEST, "invalid", &[]);
}
