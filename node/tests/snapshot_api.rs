//! `GET /v1/snapshot` over a plain store, in-process: the answer is a whole snapshot stream naming
//! this member, taken at the revision of its start while writes go on (a stream held half-read
//! blocks no write), and the bound on streams at once (503 past it, free again once a stream is
//! dropped).

use crate::support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, StatusCode};
use http_body_util::BodyExt;
use revkv_node::http::HttpLimits;
use revkv_storage::inspect_snapshot;
use serde_json::json;
use support::{assert_error, Api};

/// Writes `keys` keys of 1 KiB through the API, 100 per txn; returns the revision after them.
async fn fill(api: &Api, prefix: &str, keys: usize) -> u64 {
    let mut revision = 0;
    let value = "v".repeat(1024);
    for batch in 0..keys.div_ceil(100) {
        let success: Vec<_> = (batch * 100..keys.min((batch + 1) * 100))
            .map(|index| json!({ "put": { "key": format!("{prefix}{index:05}"), "value": value } }))
            .collect();
        let answer = api
            .post(
                "/v1/txn",
                json!({ "compare": [], "success": success, "failure": [] }),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
        revision = answer.revision();
    }
    revision
}

async fn read_all(body: Body) -> Vec<u8> {
    body.collect()
        .await
        .expect("the stream completes")
        .to_bytes()
        .to_vec()
}

#[tokio::test]
async fn the_backup_is_one_revision_taken_at_its_start_while_writes_go_on() {
    let api = Api::new();
    let revision = fill(&api, "before/", 3000).await;
    let response = api.open(Method::GET, "/v1/snapshot", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/octet-stream"
    );
    assert_eq!(response.headers()["x-revkv-member-id"], "1");
    let mut body = response.into_body();
    // Take the first chunk only: the export is now parked on its bounded channel, holding its
    // read transaction, and about 3 MiB are still to come.
    let first = body
        .frame()
        .await
        .expect("a first chunk")
        .expect("no error");
    let mut stream = first.into_data().expect("data").to_vec();
    let during = tokio::time::timeout(Duration::from_secs(30), fill(&api, "during/", 300))
        .await
        .expect("writes are not blocked by a backup in progress");
    assert!(during > revision);
    stream.extend(read_all(body).await);
    let summary = inspect_snapshot(&mut stream.as_slice()).expect("a whole, valid stream");
    assert_eq!(summary.current_revision, revision);
    assert_eq!(summary.live_keys, Some(3000));
    assert_eq!(summary.member_id, Some(1));
    assert!(stream.len() > 3000 * 1024);
}

#[tokio::test]
async fn backups_past_the_limit_are_unavailable_until_one_ends() {
    let api = Api::with(
        Duration::from_secs(5),
        HttpLimits {
            max_snapshot_streams: 1,
            ..HttpLimits::default()
        },
    );
    fill(&api, "k/", 2000).await;
    let first = api.open(Method::GET, "/v1/snapshot", Body::empty()).await;
    assert_eq!(first.status(), StatusCode::OK);
    let refused = api.get("/v1/snapshot").await;
    assert_error(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        &[],
    );
    assert!(refused.header("retry-after").is_some());
    drop(first);
    let again = api.open(Method::GET, "/v1/snapshot", Body::empty()).await;
    assert_eq!(again.status(), StatusCode::OK);
    let stream = read_all(again.into_body()).await;
    assert!(inspect_snapshot(&mut stream.as_slice()).is_ok());
}

#[tokio::test]
async fn the_backup_takes_no_query_parameters() {
    let api = Api::new();
    let answer = api.get("/v1/snapshot?revision=3").await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid", &[]);
}
