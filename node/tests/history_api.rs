//! `GET /v1/kv/{key}?history=true` against a plain store: versions and tombstones oldest first,
//! pages joined by the continue token, 410 below the compact revision, 400 for bad parameters.

use crate::support;

use axum::http::StatusCode;
use serde_json::json;
use support::{assert_error, Api};

#[tokio::test]
async fn versions_and_tombstones_come_oldest_first_in_pages() {
    let api = Api::new();
    let first = api.put_value("cfg/a", "v1").await;
    api.put_value("cfg/other", "x").await;
    let second = api.put_value("cfg/a", "v2").await;
    let deleted = api.delete("/v1/kv/cfg/a").await.revision();
    let third = api.put_value("cfg/a", "v3").await;

    let page = api.get("/v1/kv/cfg/a?history=true&limit=2").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.json);
    assert_eq!(page.json["more"], true);
    let versions = page.json["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["type"], "PUT");
    assert_eq!(versions[0]["kv"]["value"], "v1");
    assert_eq!(versions[0]["kv"]["mod_revision"], first);
    assert_eq!(versions[1]["kv"]["mod_revision"], second);
    assert_eq!(versions[1]["kv"]["version"], 2);

    let token = page.json["continue"].as_str().unwrap();
    let next = api
        .get(&format!(
            "/v1/kv/cfg/a?history=true&limit=2&continue={token}"
        ))
        .await;
    assert_eq!(next.json["more"], false);
    assert!(next.json.get("continue").is_none());
    let versions = next.json["versions"].as_array().unwrap();
    assert_eq!(versions[0]["type"], "DELETE");
    assert_eq!(versions[0]["kv"]["mod_revision"], deleted);
    assert_eq!(versions[1]["kv"]["value"], "v3");
    assert_eq!(versions[1]["kv"]["mod_revision"], third);

    let from = api
        .get(&format!(
            "/v1/kv/cfg/a?history=true&from_revision={deleted}"
        ))
        .await;
    assert_eq!(from.json["versions"].as_array().unwrap().len(), 2);
    let none = api.get("/v1/kv/cfg/none?history=true").await;
    assert_eq!(none.status, StatusCode::OK);
    assert_eq!(none.json["versions"], json!([]));
}

#[tokio::test]
async fn compacted_history_is_gone_and_bad_parameters_are_invalid() {
    let api = Api::new();
    let first = api.put_value("cfg/a", "v1").await;
    let latest = api.put_value("cfg/a", "v2").await;
    api.post("/v1/compact", json!({ "revision": latest })).await;
    let gone = api
        .get(&format!("/v1/kv/cfg/a?history=true&from_revision={first}"))
        .await;
    assert_error(&gone, StatusCode::GONE, "compacted", &["compact_revision"]);
    let kept = api.get("/v1/kv/cfg/a?history=true").await;
    assert_eq!(kept.status, StatusCode::OK, "{}", kept.json);
    for bad in [
        "/v1/kv/cfg/a?history=true&limit=0",
        "/v1/kv/cfg/a?history=true&continue=abc",
        "/v1/kv/cfg/a?history=true&continue=3&from_revision=3",
        "/v1/kv/cfg/a?history=true&revision=3",
    ] {
        assert_error(&api.get(bad).await, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
}
