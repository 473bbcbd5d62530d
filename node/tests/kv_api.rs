//! Single-key reads and writes through `/v1/kv/{key}`: revisions, versions, ETags, preconditions,
//! prefix deletes, and binary keys and values with `encoding=base64`.

use crate::support;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;
use support::{assert_error, Api, MEMBER_ID, RAFT_TERM};

#[tokio::test]
async fn put_get_delete_round_trip_tracks_revisions_and_versions() {
    let api = Api::new();
    let created = api.put("/v1/kv/a", json!({ "value": "one" })).await;
    assert_eq!(created.status, StatusCode::OK);
    assert_eq!(
        created.json,
        json!({ "header": { "revision": 2, "member_id": MEMBER_ID, "raft_term": RAFT_TERM } })
    );
    assert_eq!(created.header("etag"), Some("\"2\""));

    let read = api.get("/v1/kv/a").await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.header("etag"), Some("\"2\""));
    assert_eq!(
        read.json["kv"],
        json!({ "key": "a", "value": "one", "create_revision": 2, "mod_revision": 2,
                "version": 1, "lease": 0 })
    );

    let updated = api
        .put("/v1/kv/a?prev_kv=true", json!({ "value": "two" }))
        .await;
    assert_eq!(updated.revision(), 3);
    assert_eq!(updated.json["prev_kv"]["value"], "one");
    assert_eq!(updated.header("etag"), Some("\"3\""));
    let read = api.get("/v1/kv/a").await;
    assert_eq!(read.json["kv"]["version"], 2);
    assert_eq!(read.json["kv"]["create_revision"], 2);
    assert_eq!(read.json["kv"]["mod_revision"], 3);

    let deleted = api.delete("/v1/kv/a?prev_kv=true").await;
    assert_eq!(deleted.status, StatusCode::OK);
    assert_eq!(deleted.revision(), 4);
    assert_eq!(deleted.json["deleted"], 1);
    assert_eq!(deleted.json["prev_kvs"][0]["value"], "two");
    assert_error(
        &api.get("/v1/kv/a").await,
        StatusCode::NOT_FOUND,
        "not_found",
        &[],
    );

    // Deleting nothing changes nothing, so the revision stays.
    let nothing = api.delete("/v1/kv/a").await;
    assert_eq!(nothing.json["deleted"], 0);
    assert_eq!(nothing.revision(), 4);
    assert!(
        nothing.json.get("prev_kvs").is_none(),
        "prev_kvs only when asked"
    );

    // Re-creating starts a new life: new create revision, version 1.
    api.put_value("a", "three").await;
    let read = api.get("/v1/kv/a").await;
    assert_eq!(read.json["kv"]["create_revision"], 5);
    assert_eq!(read.json["kv"]["version"], 1);
}

#[tokio::test]
async fn path_keys_are_percent_decoded_and_may_hold_slashes() {
    let api = Api::new();
    api.put_value("dir/sub%20key%3F", "v").await;
    let read = api.get("/v1/kv/dir/sub%20key%3F").await;
    assert_eq!(read.json["kv"]["key"], "dir/sub key?");
    let listed = api.get("/v1/kv?prefix=dir%2F").await;
    assert_eq!(listed.json["kvs"][0]["key"], "dir/sub key?");
}

#[tokio::test]
async fn the_put_lease_is_stored_and_reported() {
    let api = Api::new();
    let granted = api.post("/v1/leases", json!({ "ttl": 30, "id": 7 })).await;
    assert_eq!(granted.status, StatusCode::OK);
    let put = api
        .put("/v1/kv/leased", json!({ "value": "v", "lease": 7 }))
        .await;
    assert_eq!(put.status, StatusCode::OK);
    assert_eq!(api.get("/v1/kv/leased").await.json["kv"]["lease"], 7);
}

#[tokio::test]
async fn if_match_writes_only_at_the_expected_revision() {
    let api = Api::new();
    let first = api.put_value("k", "v1").await;
    let quoted = format!("\"{first}\"");
    let matched = api
        .send(
            Method::PUT,
            "/v1/kv/k",
            &[("if-match", &quoted)],
            r#"{"value":"v2"}"#,
        )
        .await;
    assert_eq!(matched.status, StatusCode::OK);
    let second = matched.revision();
    assert_eq!(
        matched.header("etag"),
        Some(format!("\"{second}\"").as_str())
    );

    // The same (now stale) revision conflicts, reports the key now, and writes nothing.
    let stale = api
        .send(
            Method::PUT,
            "/v1/kv/k",
            &[("if-match", &quoted)],
            r#"{"value":"v3"}"#,
        )
        .await;
    assert_error(&stale, StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(stale.json["current"]["value"], "v2");
    assert_eq!(stale.json["current"]["mod_revision"], second);
    assert_eq!(api.get("/v1/kv/k").await.revision(), second);

    // The quotes are optional.
    let unquoted = api
        .send(
            Method::PUT,
            "/v1/kv/k",
            &[("if-match", &second.to_string())],
            r#"{"value":"v3"}"#,
        )
        .await;
    assert_eq!(unquoted.status, StatusCode::OK);
}

#[tokio::test]
async fn if_match_on_an_absent_key_conflicts_with_a_null_current() {
    let api = Api::new();
    let answer = api
        .send(
            Method::PUT,
            "/v1/kv/missing",
            &[("if-match", "\"7\"")],
            r#"{"value":"v"}"#,
        )
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "conflict", &["current"]);
    assert!(answer.json["current"].is_null());
    let star = api
        .send(
            Method::PUT,
            "/v1/kv/missing",
            &[("if-match", "*")],
            r#"{"value":"v"}"#,
        )
        .await;
    assert_error(&star, StatusCode::CONFLICT, "conflict", &["current"]);
    api.put_value("missing", "now here").await;
    let star = api
        .send(
            Method::PUT,
            "/v1/kv/missing",
            &[("if-match", "*")],
            r#"{"value":"v"}"#,
        )
        .await;
    assert_eq!(star.status, StatusCode::OK);
}

#[tokio::test]
async fn if_none_match_star_creates_only_once() {
    let api = Api::new();
    let headers = [("if-none-match", "*")];
    let created = api
        .send(Method::PUT, "/v1/kv/once", &headers, r#"{"value":"first"}"#)
        .await;
    assert_eq!(created.status, StatusCode::OK);
    let again = api
        .send(
            Method::PUT,
            "/v1/kv/once",
            &headers,
            r#"{"value":"second"}"#,
        )
        .await;
    assert_error(&again, StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(again.json["current"]["value"], "first");
    assert_eq!(api.get("/v1/kv/once").await.json["kv"]["value"], "first");
}

#[tokio::test]
async fn delete_honours_if_match_and_prev_kv() {
    let api = Api::new();
    let revision = api.put_value("d", "v").await;
    let stale = api
        .send(
            Method::DELETE,
            "/v1/kv/d",
            &[("if-match", "\"1\"")],
            Body::empty(),
        )
        .await;
    assert_error(&stale, StatusCode::CONFLICT, "conflict", &["current"]);
    assert_eq!(stale.json["current"]["mod_revision"], revision);

    let tag = format!("\"{revision}\"");
    let deleted = api
        .send(
            Method::DELETE,
            "/v1/kv/d?prev_kv=true",
            &[("if-match", &tag)],
            Body::empty(),
        )
        .await;
    assert_eq!(deleted.status, StatusCode::OK);
    assert_eq!(deleted.json["deleted"], 1);
    assert_eq!(deleted.json["prev_kvs"][0]["key"], "d");
}

#[tokio::test]
async fn delete_with_prefix_removes_every_key_under_the_path_at_one_revision() {
    let api = Api::new();
    for key in ["app/1", "app/2", "app/3", "apple", "b"] {
        api.put_value(key, "v").await;
    }
    let deleted = api.delete("/v1/kv/app/?prefix=true&prev_kv=true").await;
    assert_eq!(deleted.status, StatusCode::OK);
    assert_eq!(deleted.json["deleted"], 3);
    assert_eq!(deleted.json["prev_kvs"].as_array().unwrap().len(), 3);
    assert_eq!(
        deleted.revision(),
        7,
        "five puts from revision 1, then one delete"
    );
    let left = api.get("/v1/kv?prefix=").await;
    let keys: Vec<&str> = left.json["kvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| kv["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["apple", "b"]);

    let guarded = api
        .send(
            Method::DELETE,
            "/v1/kv/a?prefix=true",
            &[("if-match", "\"2\"")],
            Body::empty(),
        )
        .await;
    assert_error(&guarded, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn binary_keys_and_values_round_trip_with_base64() {
    let api = Api::new();
    // Key bytes ff 00 2f are "/wAv" in standard base64: the slash must survive the path.
    let put = api
        .put("/v1/kv//wAv?encoding=base64", json!({ "value": "gP8=" }))
        .await;
    assert_eq!(put.status, StatusCode::OK, "{:?}", put.json);
    for uri in [
        "/v1/kv//wAv?encoding=base64",
        "/v1/kv/%2FwAv?encoding=base64",
    ] {
        let read = api.get(uri).await;
        assert_eq!(read.status, StatusCode::OK);
        assert_eq!(read.json["kv"]["key"], "/wAv");
        assert_eq!(read.json["kv"]["value"], "gP8=");
    }
    let listed = api.get("/v1/kv?prefix=&encoding=base64").await;
    assert_eq!(listed.json["kvs"][0]["key"], "/wAv");

    // Raw percent-encoded bytes name the same key, but the answer cannot be UTF-8 text.
    let as_text = api.get("/v1/kv/%FF%00%2F").await;
    assert_error(&as_text, StatusCode::BAD_REQUEST, "invalid", &[]);
    assert!(as_text.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("encoding=base64"));
    let listed_as_text = api.get("/v1/kv?prefix=").await;
    assert_error(&listed_as_text, StatusCode::BAD_REQUEST, "invalid", &[]);
}

#[tokio::test]
async fn a_write_answer_falls_back_to_marked_base64_for_binary_data() {
    let api = Api::new();
    // "Ymlu" is "bin"; "gP8=" is the bytes 80 ff, which are not UTF-8.
    api.put("/v1/kv/Ymlu?encoding=base64", json!({ "value": "gP8=" }))
        .await;
    // The overwrite happens whatever the old value was, so its answer must not fail: the old
    // key-value comes back in base64, marked as such.
    let overwrite = api
        .put("/v1/kv/bin?prev_kv=true", json!({ "value": "text" }))
        .await;
    assert_eq!(overwrite.status, StatusCode::OK);
    assert_eq!(
        overwrite.json["prev_kv"],
        json!({ "key": "Ymlu", "value": "gP8=", "create_revision": 2, "mod_revision": 2,
                "version": 1, "lease": 0, "encoding": "base64" })
    );
    assert_eq!(api.get("/v1/kv/bin").await.json["kv"]["value"], "text");
}
