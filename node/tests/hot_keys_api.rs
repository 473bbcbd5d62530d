//! `GET /v1/conflicts?top=N` against a plain store: conflicts and client retries on exact keys,
//! hottest first, and bad `top` values refused.

use crate::support;

use axum::http::{Method, StatusCode};
use serde_json::json;
use support::{assert_error, Api};

/// A PUT under `If-Match: "1"` on a key that is not at revision 1: one conflict.
async fn stale_put(api: &Api, key: &str, retry_attempt: &str) {
    let answer = api
        .send(
            Method::PUT,
            &format!("/v1/kv/{key}"),
            &[("if-match", "\"1\""), ("x-retry-attempt", retry_attempt)],
            json!({"value": "v"}).to_string(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.json);
}

#[tokio::test]
async fn the_hottest_keys_come_first_with_their_conflicts_and_retries() {
    let api = Api::new();
    api.put_value("cfg/hot", "v").await;
    api.put_value("cfg/cold", "v").await;
    stale_put(&api, "cfg/hot", "0").await;
    stale_put(&api, "cfg/hot", "1").await;
    stale_put(&api, "cfg/hot", "2").await;
    stale_put(&api, "cfg/cold", "0").await;
    let answer = api.get("/v1/conflicts?top=1").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
    assert_eq!(answer.json["window_seconds"], 300);
    let keys = answer.json["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["key"], "cfg/hot");
    assert_eq!(keys[0]["conflicts"], 3);
    assert_eq!(keys[0]["retries"], 2);
    assert!(keys[0]["last_revision"].as_u64().unwrap() >= 3);
    let both = api.get("/v1/conflicts").await;
    assert_eq!(both.json["keys"].as_array().unwrap().len(), 2);
    for bad in [
        "/v1/conflicts?top=0",
        "/v1/conflicts?top=100000",
        "/v1/conflicts?topp=1",
    ] {
        assert_error(&api.get(bad).await, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
}
