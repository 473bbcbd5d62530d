//! Every error code this API can produce, each from a real request, with the exact body shape
//! `{"error": {"code", "message"}, ...extra}` and the right status (contract section 3).

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use revkv_node::http::HttpLimits;
use serde_json::json;
use support::{assert_error, Api};

#[tokio::test]
async fn malformed_bodies_are_invalid() {
    let api = Api::new();
    for body in [
        "{",
        "",
        "[]",
        r#"{"value": 5}"#,
        r#"{"value": "v", "extra": 1}"#,
    ] {
        let answer = api.send(Method::PUT, "/v1/kv/k", &[], body).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    let answer = api.send(Method::POST, "/v1/txn", &[], "{not json").await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    let answer = api
        .send(Method::POST, "/v1/compact", &[], r#"{"revision": -3}"#)
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn an_empty_key_is_invalid_for_every_method() {
    let api = Api::new();
    let put = api.put("/v1/kv/", json!({ "value": "v" })).await;
    assert_error(&put, StatusCode::BAD_REQUEST, "invalid", &[]);
    let get = api.get("/v1/kv/").await;
    assert_error(&get, StatusCode::BAD_REQUEST, "invalid", &[]);
    let delete = api.delete("/v1/kv/?prefix=true").await;
    assert_error(&delete, StatusCode::BAD_REQUEST, "invalid", &[]);
    let range = api.get("/v1/kv?key=").await;
    assert_error(&range, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn bad_query_parameters_are_invalid() {
    let api = Api::new();
    for uri in [
        "/v1/kv/k?consistency=eventual",
        "/v1/kv/k?revision=abc",
        "/v1/kv/k?revision=-1",
        "/v1/kv/k?revision=0",
        "/v1/kv/k?encoding=hex",
        "/v1/kv/k?prefx=true",
        "/v1/kv/k?revision=1&revision=2",
        "/v1/kv/!!?encoding=base64",
        "/v1/kv?prefix=a&key=b",
        "/v1/kv?range_end=b",
        "/v1/kv",
        "/v1/kv?prefix=a&limit=0",
        "/v1/kv?prefix=a&keys_only=maybe",
        "/v1/kv?prefix=a&continue=garbage",
        "/v1/hash?revision=x",
        "/v1/status?verbose=true",
    ] {
        let answer = api.get(uri).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
}

#[tokio::test]
async fn bad_preconditions_are_invalid() {
    let api = Api::new();
    for headers in [
        vec![("if-match", "W/\"1\"")],
        vec![("if-match", "\"1\", \"2\"")],
        vec![("if-match", "soon")],
        vec![("if-none-match", "\"3\"")],
        vec![("if-match", "1"), ("if-none-match", "*")],
    ] {
        let answer = api
            .send(Method::PUT, "/v1/kv/k", &headers, r#"{"value":"v"}"#)
            .await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_too_large_as_json() {
    let api = Api::with(
        Duration::from_secs(5),
        HttpLimits {
            max_body_bytes: 1024,
            ..HttpLimits::default()
        },
    );
    let value = "x".repeat(2048);
    let answer = api.put("/v1/kv/k", json!({ "value": value })).await;
    assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "too_large", &[]);
    let answer = api
        .post(
            "/v1/txn",
            json!({ "success": [{ "put": { "key": "k", "value": value } }] }),
        )
        .await;
    assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "too_large", &[]);
}

#[tokio::test]
async fn a_value_over_the_store_limit_is_too_large_even_in_a_body_under_the_limit() {
    let api = Api::new();
    let value = "x".repeat(1024 * 1024 + 1);
    let answer = api.put("/v1/kv/k", json!({ "value": value })).await;
    assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "too_large", &[]);
    assert_error(
        &api.get("/v1/kv/k").await,
        StatusCode::NOT_FOUND,
        "not_found",
        &[],
    );
}

#[tokio::test]
async fn a_key_over_the_store_limit_is_invalid() {
    let api = Api::new();
    let key = "k".repeat(4097);
    let answer = api
        .put(&format!("/v1/kv/{key}"), json!({ "value": "v" }))
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn missing_keys_members_and_routes_are_not_found() {
    let api = Api::new();
    assert_error(
        &api.get("/v1/kv/none").await,
        StatusCode::NOT_FOUND,
        "not_found",
        &[],
    );
    let member = api.delete("/v1/members/77").await;
    assert_error(&member, StatusCode::NOT_FOUND, "not_found", &[]);
    let route = api.get("/v2/kv/none").await;
    assert_error(&route, StatusCode::NOT_FOUND, "not_found", &[]);
}

#[tokio::test]
async fn an_unsupported_method_is_invalid_as_json() {
    let api = Api::new();
    let answer = api
        .send(Method::POST, "/v1/kv/k", &[], r#"{"value":"v"}"#)
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn a_failed_precondition_is_a_conflict_carrying_current() {
    let api = Api::new();
    api.put_value("k", "v").await;
    let answer = api
        .send(
            Method::PUT,
            "/v1/kv/k",
            &[("if-none-match", "*")],
            r#"{"value":"w"}"#,
        )
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(
        answer.json["current"],
        json!({ "key": "k", "value": "v", "create_revision": 2, "mod_revision": 2,
                "version": 1, "lease": 0 })
    );
}

#[tokio::test]
async fn a_conflict_current_follows_the_requested_encoding() {
    let api = Api::new();
    api.put_value("k", "v").await;
    let answer = api
        .send(
            Method::PUT,
            "/v1/kv/aw==?encoding=base64",
            &[("if-match", "\"99\"")],
            r#"{"value":"dw=="}"#,
        )
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(answer.json["current"]["key"], "aw==");
    assert_eq!(answer.json["current"]["value"], "dg==");
}

#[tokio::test]
async fn compacted_and_future_revisions_have_their_own_codes() {
    let api = Api::new();
    api.put_value("k", "1").await;
    let second = api.put_value("k", "2").await;
    api.post("/v1/compact", json!({ "revision": second })).await;
    let gone = api.get("/v1/kv/k?revision=2").await;
    assert_error(&gone, StatusCode::GONE, "compacted", &["compact_revision"]);
    assert_eq!(gone.json["compact_revision"], second);
    let future = api.get("/v1/kv?prefix=k&revision=1000").await;
    assert_error(&future, StatusCode::BAD_REQUEST, "future_revision", &[]);
    let future_hash = api.get("/v1/hash?revision=1000").await;
    assert_error(
        &future_hash,
        StatusCode::BAD_REQUEST,
        "future_revision",
        &[],
    );
}

#[tokio::test]
async fn an_unready_member_is_unavailable_with_retry_after() {
    let api = Api::new();
    api.backend.set_ready(false);
    let answer = api.get("/readyz").await;
    assert_error(&answer, StatusCode::SERVICE_UNAVAILABLE, "unavailable", &[]);
    let seconds: u64 = answer.header("retry-after").unwrap().parse().unwrap();
    assert!(seconds >= 1);
}

#[tokio::test]
async fn a_min_revision_never_reached_times_out() {
    let api = Api::with(Duration::from_millis(100), HttpLimits::default());
    let answer = api
        .get("/v1/kv/k?consistency=serializable&min_revision=50")
        .await;
    assert_error(&answer, StatusCode::GATEWAY_TIMEOUT, "timeout", &[]);
}

#[tokio::test]
async fn a_min_revision_reached_while_waiting_is_served() {
    let api = Arc::new(Api::new());
    let waiting = {
        let api = Arc::clone(&api);
        tokio::spawn(async move {
            api.get("/v1/kv/k?consistency=serializable&min_revision=2")
                .await
        })
    };
    // Write only once the read is really waiting, so the test covers the wait and not a race.
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.backend.waiting_readers() == 0 {
        assert!(Instant::now() < deadline, "the read never started waiting");
        tokio::task::yield_now().await;
    }
    api.put_value("k", "v").await;
    let answer = waiting.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json["kv"]["value"], "v");
}
