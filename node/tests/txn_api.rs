//! `POST /v1/txn`: both branches, every op kind and its answer shape, every compare target and
//! operator, base64 txns, and malformed txns.

use crate::support;

use axum::http::StatusCode;
use serde_json::json;
use support::{assert_error, Api};

#[tokio::test]
async fn a_txn_whose_compares_hold_runs_success_at_one_revision() {
    let api = Api::new();
    let revision = api.put_value("cfg/a", "1").await;
    api.put_value("old", "x").await;
    let txn = json!({
        "compare": [{ "key": "cfg/a", "target": "mod_revision", "op": "=", "value": revision }],
        "success": [
            { "put": { "key": "cfg/a", "value": "2", "prev_kv": true } },
            { "put": { "key": "cfg/b", "value": "3" } },
            { "delete": { "key": "old", "prev_kv": true } },
            { "get": { "key": "cfg/", "prefix": true } }
        ],
        "failure": [{ "get": { "key": "cfg/a" } }]
    });
    let answer = api.post("/v1/txn", txn).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json);
    assert_eq!(answer.json["succeeded"], true);
    assert_eq!(answer.revision(), 4, "the whole branch takes one revision");
    let responses = answer.json["responses"].as_array().unwrap();
    assert_eq!(responses[0]["put"]["prev_kv"]["value"], "1");
    assert_eq!(responses[1], json!({ "put": {} }));
    assert_eq!(responses[2]["delete"]["deleted"], 1);
    assert_eq!(responses[2]["delete"]["prev_kvs"][0]["value"], "x");
    let get = &responses[3]["get"];
    assert_eq!(get["count"], 2);
    assert_eq!(get["more"], false);
    assert_eq!(
        get["kvs"][0]["value"], "2",
        "a get sees the earlier ops of its branch"
    );
    assert_eq!(get["kvs"][1]["mod_revision"], 4);
}

#[tokio::test]
async fn a_txn_whose_compare_fails_runs_failure_and_still_answers_200() {
    let api = Api::new();
    let revision = api.put_value("k", "actual").await;
    let txn = json!({
        "compare": [{ "key": "k", "target": "value", "op": "=", "value": "expected" }],
        "success": [{ "put": { "key": "k", "value": "new" } }],
        "failure": [
            { "get": { "key": "k" } },
            { "delete": { "key": "nothing" } }
        ]
    });
    let answer = api.post("/v1/txn", txn).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json["succeeded"], false);
    assert_eq!(
        answer.revision(),
        revision,
        "nothing changed, so no new revision"
    );
    assert_eq!(
        answer.json["responses"][0]["get"]["kvs"][0]["value"],
        "actual"
    );
    assert_eq!(
        answer.json["responses"][1],
        json!({ "delete": { "deleted": 0 } })
    );
    assert_eq!(api.get("/v1/kv/k").await.json["kv"]["value"], "actual");
}

#[tokio::test]
async fn every_compare_target_and_operator_is_understood() {
    let api = Api::new();
    let revision = api.put_value("k", "b").await;
    let holding = [
        json!({ "key": "k", "target": "value", "op": ">", "value": "a" }),
        json!({ "key": "k", "target": "value", "op": "<", "value": "c" }),
        json!({ "key": "k", "target": "value", "op": "!=", "value": "x" }),
        json!({ "key": "k", "target": "version", "op": "=", "value": 1 }),
        json!({ "key": "k", "target": "create_revision", "op": "=", "value": revision }),
        json!({ "key": "k", "target": "mod_revision", "op": "<", "value": revision + 1 }),
        json!({ "key": "k", "target": "lease", "op": "=", "value": 0 }),
        json!({ "key": "absent", "target": "create_revision", "op": "=", "value": 0 }),
    ];
    for compare in holding {
        let txn = json!({ "compare": [compare.clone()], "success": [], "failure": [] });
        let answer = api.post("/v1/txn", txn).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{compare}: {:?}",
            answer.json
        );
        assert_eq!(answer.json["succeeded"], true, "{compare}");
    }
    let failing = json!({ "key": "absent", "target": "value", "op": "!=", "value": "x" });
    let answer = api.post("/v1/txn", json!({ "compare": [failing] })).await;
    assert_eq!(
        answer.json["succeeded"], false,
        "a value compare on a missing key fails"
    );
}

#[tokio::test]
async fn base64_txns_carry_binary_keys_values_and_compare_values() {
    let api = Api::new();
    // "/w==" is the byte ff, "AAE=" the bytes 00 01.
    let txn = json!({
        "compare": [{ "key": "/w==", "target": "version", "op": "=", "value": 0 }],
        "success": [
            { "put": { "key": "/w==", "value": "AAE=" } },
            { "get": { "key": "/w==" } }
        ]
    });
    let answer = api.post("/v1/txn?encoding=base64", txn).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json);
    let kv = &answer.json["responses"][1]["get"]["kvs"][0];
    assert_eq!(kv["key"], "/w==");
    assert_eq!(kv["value"], "AAE=");
    assert!(
        kv.get("encoding").is_none(),
        "asked-for base64 is not marked"
    );

    let compare_value = json!({
        "compare": [{ "key": "/w==", "target": "value", "op": "=", "value": "AAE=" }],
        "success": [{ "delete": { "key": "/w==", "prev_kv": true } }]
    });
    let answer = api.post("/v1/txn?encoding=base64", compare_value).await;
    assert_eq!(answer.json["succeeded"], true);
    assert_eq!(
        answer.json["responses"][0]["delete"]["prev_kvs"][0]["value"],
        "AAE="
    );
}

#[tokio::test]
async fn malformed_txns_are_invalid_and_change_nothing() {
    let api = Api::new();
    let malformed = [
        json!({ "success": [{ "put": { "key": "a", "value": "1" } },
                            { "put": { "key": "a", "value": "2" } }] }),
        json!({ "success": [{ "delete": { "key": "a", "prefix": true } },
                            { "put": { "key": "ab", "value": "2" } }] }),
        json!({ "compare": [{ "key": "a", "target": "version", "op": "=", "value": "1" }] }),
        json!({ "compare": [{ "key": "a", "target": "value", "op": "=", "value": 1 }] }),
        json!({ "compare": [{ "key": "a", "target": "size", "op": "=", "value": 1 }] }),
        json!({ "compare": [{ "key": "a", "target": "version", "op": "==", "value": 1 }] }),
        json!({ "success": [{ "upsert": { "key": "a", "value": "1" } }] }),
        json!({ "success": [{ "put": { "key": "a", "value": "1", "ttl": 5 } }] }),
        json!({ "success": [{ "get": { "key": "a", "prefix": true, "range_end": "b" } }] }),
        json!({ "success": [{ "put": { "key": "", "value": "1" } }] }),
        json!({ "sucess": [] }),
    ];
    for txn in malformed {
        let answer = api.post("/v1/txn", txn.clone()).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    }
    let bad_base64 = json!({ "success": [{ "put": { "key": "!!", "value": "" } }] });
    let answer = api.post("/v1/txn?encoding=base64", bad_base64).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
    assert!(answer.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("success[0].key"));
    assert_eq!(api.get("/v1/kv?prefix=").await.revision(), 1);
}
