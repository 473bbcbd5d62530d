//! The space quota and its alarm over a plain store: a state file past the quota raises NOSPACE
//! (once), writes that would grow the store answer 507 `no_space` while reads, deletes, compaction
//! and defragmentation still work, and clearing the alarm lets writes in again. The same through
//! real members: `node/bin/tests/space_quota.rs`.

use crate::support;

use std::time::Duration;

use axum::http::StatusCode;
use revkv_node::space_quota::{check_once, SpaceQuota};
use serde_json::json;
use support::{assert_error, Api, MEMBER_ID};

fn quota(quota_bytes: u64) -> SpaceQuota {
    SpaceQuota {
        quota_bytes,
        check_interval: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn past_the_quota_writes_are_refused_until_the_alarm_is_cleared() {
    let api = Api::new();
    api.put_value("kept", "1").await;
    assert!(!check_once(&*api.backend, quota(u64::MAX)).await.unwrap());
    assert_eq!(api.get("/v1/alarms").await.json["alarms"], json!([]));

    assert!(check_once(&*api.backend, quota(1)).await.unwrap(), "raised");
    assert!(!check_once(&*api.backend, quota(1)).await.unwrap(), "once");
    let listed = api.get("/v1/alarms").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(
        listed.json["alarms"],
        json!([{ "member_id": MEMBER_ID, "alarm": "NOSPACE" }])
    );

    let refused = api.put("/v1/kv/new", json!({ "value": "2" })).await;
    assert_error(&refused, StatusCode::INSUFFICIENT_STORAGE, "no_space", &[]);
    let lease = api.post("/v1/leases", json!({ "ttl": 30 })).await;
    assert_error(&lease, StatusCode::INSUFFICIENT_STORAGE, "no_space", &[]);
    let txn = json!({ "compare": [], "success": [{ "put": { "key": "t", "value": "v" } }] });
    let refused_txn = api.post("/v1/txn", txn).await;
    assert_error(
        &refused_txn,
        StatusCode::INSUFFICIENT_STORAGE,
        "no_space",
        &[],
    );
    assert_eq!(api.get("/v1/kv/kept").await.status, StatusCode::OK);
    assert_eq!(api.delete("/v1/kv/kept").await.status, StatusCode::OK);
    let revision = api.get("/v1/status").await.json["revision"]
        .as_u64()
        .unwrap();
    let compacted = api
        .post("/v1/compact", json!({ "revision": revision }))
        .await;
    assert_eq!(compacted.status, StatusCode::OK);
    let defragmented = api.post("/v1/defragment", json!({})).await;
    assert_eq!(
        defragmented.status,
        StatusCode::OK,
        "{:?}",
        defragmented.json
    );
    assert!(defragmented.json["file_bytes_after"].as_u64().unwrap() > 0);

    let disarmed = api.delete("/v1/alarms").await;
    assert_eq!(disarmed.status, StatusCode::OK);
    assert_eq!(
        disarmed.json["disarmed"],
        json!([{ "member_id": MEMBER_ID, "alarm": "NOSPACE" }])
    );
    assert_eq!(disarmed.json["alarms"], json!([]));
    assert_eq!(
        api.put("/v1/kv/new", json!({ "value": "2" })).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn clearing_alarms_of_another_member_leaves_the_raised_one() {
    let api = Api::new();
    check_once(&*api.backend, quota(1)).await.unwrap();
    let other = api
        .delete(&format!("/v1/alarms?member_id={}", MEMBER_ID + 1))
        .await;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(other.json["disarmed"], json!([]));
    assert_eq!(other.json["alarms"].as_array().unwrap().len(), 1);
    let unknown = api.get("/v1/alarms?verbose=true").await;
    assert_error(&unknown, StatusCode::BAD_REQUEST, "invalid", &[]);
}
