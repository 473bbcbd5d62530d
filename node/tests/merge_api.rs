//! `PUT /v1/kv/{key}?merge=three-way` over HTTP against a plain store: the answers of contract
//! section 7 (200 with and without a merge, 409 with `conflicting_fields`, 410 when the base was
//! compacted, 400 for a value that is not JSON or a missing `If-Match`).

use crate::support;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use support::{assert_error, Answer, Api};

/// Stores `value` (JSON text) at `key` and answers the new mod revision.
async fn store(api: &Api, key: &str, value: Value) -> u64 {
    api.put_value(key, &value.to_string()).await
}

async fn merge_put(api: &Api, key: &str, if_match: Option<u64>, value: &str) -> Answer {
    let if_match = if_match.map(|revision| format!("\"{revision}\""));
    let headers: Vec<(&str, &str)> = if_match
        .as_deref()
        .map(|value| vec![("if-match", value)])
        .unwrap_or_default();
    let body = json!({ "value": value }).to_string();
    api.send(
        Method::PUT,
        &format!("/v1/kv/{key}?merge=three-way"),
        &headers,
        body,
    )
    .await
}

fn value_of(answer: &Answer) -> Value {
    serde_json::from_str(answer.json["kv"]["value"].as_str().expect("a text value")).unwrap()
}

#[tokio::test]
async fn at_the_read_revision_it_is_a_plain_conditional_put() {
    let api = Api::new();
    let read = store(&api, "cfg/a", json!({"replicas": 1})).await;
    let answer = merge_put(&api, "cfg/a", Some(read), r#"{"replicas":2}"#).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
    assert_eq!(answer.json["merged"], false);
    assert_eq!(answer.json["merged_fields"], json!(["/replicas"]));
    assert_eq!(value_of(&answer), json!({"replicas": 2}));
    let etag = format!("\"{}\"", answer.json["kv"]["mod_revision"]);
    assert_eq!(answer.header("etag"), Some(etag.as_str()));
}

#[tokio::test]
async fn a_change_to_other_fields_since_the_read_is_merged() {
    let api = Api::new();
    let read = store(&api, "cfg/a", json!({"replicas": 1, "image": "v1"})).await;
    store(&api, "cfg/a", json!({"replicas": 1, "image": "v2"})).await;
    let answer = merge_put(&api, "cfg/a", Some(read), r#"{"replicas":3,"image":"v1"}"#).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
    assert_eq!(answer.json["merged"], true);
    assert_eq!(answer.json["merged_fields"], json!(["/replicas"]));
    assert_eq!(value_of(&answer), json!({"replicas": 3, "image": "v2"}));
    let now = api.get("/v1/kv/cfg/a").await;
    assert_eq!(now.json["kv"], answer.json["kv"]);
}

#[tokio::test]
async fn a_change_to_the_same_field_is_a_conflict_naming_it() {
    let api = Api::new();
    let read = store(&api, "cfg/a", json!({"spec": {"replicas": 1}})).await;
    let current = store(&api, "cfg/a", json!({"spec": {"replicas": 2}})).await;
    let answer = merge_put(&api, "cfg/a", Some(read), r#"{"spec":{"replicas":3}}"#).await;
    assert_error(
        &answer,
        StatusCode::CONFLICT,
        "conflict",
        &["current", "conflicting_fields"],
    );
    assert_eq!(answer.json["conflicting_fields"], json!(["/spec/replicas"]));
    assert_eq!(answer.json["current"]["mod_revision"], current);
    let now = api.get("/v1/kv/cfg/a").await;
    assert_eq!(
        now.json["kv"]["mod_revision"], current,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_key_deleted_since_the_read_conflicts_as_a_whole() {
    let api = Api::new();
    let read = store(&api, "cfg/a", json!({"a": 1})).await;
    api.delete("/v1/kv/cfg/a").await;
    let answer = merge_put(&api, "cfg/a", Some(read), r#"{"a":2}"#).await;
    assert_error(
        &answer,
        StatusCode::CONFLICT,
        "conflict",
        &["current", "conflicting_fields"],
    );
    assert_eq!(answer.json["current"], Value::Null);
    assert_eq!(answer.json["conflicting_fields"], json!([""]));
}

#[tokio::test]
async fn a_compacted_base_is_gone() {
    let api = Api::new();
    let read = store(&api, "cfg/a", json!({"a": 1})).await;
    let latest = store(&api, "cfg/a", json!({"a": 1, "b": 1})).await;
    let compacted = api.post("/v1/compact", json!({ "revision": latest })).await;
    assert_eq!(compacted.status, StatusCode::OK);
    let answer = merge_put(&api, "cfg/a", Some(read), r#"{"a":2}"#).await;
    assert_error(
        &answer,
        StatusCode::GONE,
        "compacted",
        &["compact_revision"],
    );
    assert_eq!(answer.json["compact_revision"], latest);
}

#[tokio::test]
async fn bad_requests_are_invalid_and_write_nothing() {
    let api = Api::new();
    let read = store(&api, "cfg/a", json!({"a": 1})).await;
    for (if_match, value) in [(Some(read), "{not json"), (None, r#"{"a":2}"#)] {
        let answer = merge_put(&api, "cfg/a", if_match, value).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    let other_mode = api
        .send(
            Method::PUT,
            "/v1/kv/cfg/a?merge=two-way",
            &[("if-match", &format!("\"{read}\""))],
            json!({"value": "{}"}).to_string(),
        )
        .await;
    assert_error(&other_mode, StatusCode::BAD_REQUEST, "invalid", &[]);
    store(&api, "cfg/text", json!("placeholder")).await;
    let text = api.put_value("cfg/text", "not json").await;
    store(&api, "cfg/text", json!({"a": 1})).await;
    let base_not_json = merge_put(&api, "cfg/text", Some(text), r#"{"a":2}"#).await;
    assert_error(&base_not_json, StatusCode::BAD_REQUEST, "invalid", &[]);
    let now = api.get("/v1/kv/cfg/a").await;
    assert_eq!(now.json["kv"]["mod_revision"], read);
}
