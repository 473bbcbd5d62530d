//! What the tests of etcd's JSON gateway share: the fields they drop before comparing answers
//! with etcd's, base64 as the gateway takes keys, and reading a gateway stream's lines.
// Each test binary uses a different part.
#![allow(dead_code)]

use reqwest::StatusCode;
use serde_json::Value;

/// Fields that name the member, cluster or process rather than the data, dropped wherever they
/// occur. (So is the `version` of a `Status` answer: `normalized` says why.)
pub const DROPPED_FIELDS: &[&str] = &[
    "cluster_id",
    "member_id",
    "raft_term",
    "TTL",
    // The storage version etcd 3.6 and 3.7 report in `Status`: the reported release's, which
    // revkv names only when it reports 3.6 or later (node/grpc/src/etcd_version.rs).
    "storageVersion",
    "dbSize",
    "dbSizeInUse",
    "leader",
    "raftIndex",
    "raftTerm",
    "raftAppliedIndex",
    "members",
    // Each system's own token for the same user.
    "token",
];

/// base64 of `text`, as the gateway takes keys and values.
pub fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Drops `DROPPED_FIELDS` wherever they occur, and the `version` of a `Status` answer (the one
/// object with a `raftIndex`): the release each server reports as its own (revkv 3.5.13). Any
/// other `version`, a key's, is compared.
pub fn normalized(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let is_status = map.contains_key("raftIndex");
            Value::Object(
                map.into_iter()
                    .filter(|(key, _)| {
                        let dropped = DROPPED_FIELDS.contains(&key.as_str());
                        let reported_release = is_status && key == "version";
                        !(dropped || reported_release)
                    })
                    .map(|(key, value)| (key, normalized(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        other => other,
    }
}

/// How long a stream may take to deliver the lines a test waits for.
pub const STREAM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Opens a stream at `path` with `body` and collects `{"result": ...}` lines (normalized) until
/// `enough` says so or the deadline passes; `while_open` runs once the answer has begun.
pub async fn stream_lines(
    base: &str,
    path: &str,
    body: String,
    enough: impl Fn(&[Value]) -> bool,
    while_open: impl std::future::Future<Output = ()>,
) -> Vec<Value> {
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{base}{path}"))
        .body(body)
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(answer.status(), StatusCode::OK, "{path}");
    collect_lines(answer, path, enough, while_open).await
}

/// As [`stream_lines`], on a stream already open (`answer`, from `path`).
pub async fn collect_lines(
    mut answer: reqwest::Response,
    path: &str,
    enough: impl Fn(&[Value]) -> bool,
    while_open: impl std::future::Future<Output = ()>,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + STREAM_DEADLINE;
    let mut while_open = Some(Box::pin(while_open));
    let (mut pending, mut lines) = (Vec::new(), Vec::new());
    while !enough(&lines) {
        let chunk = tokio::time::timeout_at(deadline, answer.chunk())
            .await
            .unwrap_or_else(|_| panic!("{path}: only {lines:?} before the deadline"))
            .expect("the stream reads")
            .unwrap_or_else(|| panic!("{path} ended after {lines:?}"));
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let json: Value = serde_json::from_slice(&line).expect("a JSON line");
            lines.push(normalized(json));
        }
        if let Some(action) = while_open.take() {
            action.await;
        }
    }
    lines
}

/// Every event of a watch's lines, in order, whatever responses they came in.
pub fn events_of(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .flat_map(|line| {
            line["result"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

pub async fn post(base: &str, path: &str, body: Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body.to_string())
        .send()
        .await
        .expect("an answer");
    assert!(answer.status().is_success(), "{path} {body}");
}
