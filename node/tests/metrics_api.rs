//! The metrics the client API records, against a plain store: conflicts counted once per `409` or
//! failed txn under the right prefix, `X-Retry-Attempt`, per-route HTTP metrics, `GET /metrics`,
//! and `PATCH /v1/kv/{key}` (merge patch, create, errors, `If-Match`, and an update that loses
//! every race until it gives up).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request as HttpRequest, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use revkv_node::http::{client_router_with_metrics, HttpLimits};
use revkv_node::{
    KvBackend, MemberInfo, MemberStatus, Metrics, NodeError, PrefixLabelConfig, ReadAnswer,
    ReadConsistency, ResponseHeader, TxnAnswer, Written,
};
use revkv_storage::{KeyHistory, PutRequest, RangeRequest, Request, StateHash, TxnRequest};
use serde_json::{json, Value};
use support::StoreBackend;
use tower::ServiceExt;

/// One answer: status, headers, and the body as text and (when it is JSON) as JSON.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    json: Value,
}

/// The router over a backend, with its metrics at hand.
struct MeteredApi {
    router: Router,
    metrics: Arc<Metrics>,
}

impl MeteredApi {
    fn over<B: KvBackend>(backend: B) -> Self {
        let metrics = Arc::new(Metrics::new(PrefixLabelConfig::default()).unwrap());
        let router =
            client_router_with_metrics(Arc::new(backend), HttpLimits::default(), metrics.clone());
        MeteredApi { router, metrics }
    }

    fn new() -> Self {
        Self::over(StoreBackend::new(Duration::from_secs(5)))
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut request = HttpRequest::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            text,
            json,
        }
    }

    async fn put(&self, key: &str, value: &str, headers: &[(&str, &str)]) -> Answer {
        let body = json!({ "value": value }).to_string();
        self.send(Method::PUT, &format!("/v1/kv/{key}"), headers, &body)
            .await
    }

    async fn patch(&self, uri: &str, headers: &[(&str, &str)], patch: Value) -> Answer {
        self.send(Method::PATCH, uri, headers, &patch.to_string())
            .await
    }

    /// The value of one sample line (`name{labels} value`) of the exposition, or 0 when absent.
    fn sample(&self, series: &str) -> f64 {
        let text = self.metrics.render().unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |value| value.parse().unwrap())
    }
}

#[tokio::test]
async fn failed_preconditions_count_one_conflict_each_under_the_key_prefix() {
    let api = MeteredApi::new();
    let revision = api.put("apps/web", "1", &[]).await.json["header"]["revision"]
        .as_u64()
        .unwrap();
    let stale = format!("\"{}\"", revision - 1);
    assert_eq!(
        api.put("apps/web", "2", &[("if-match", &stale)])
            .await
            .status,
        StatusCode::CONFLICT
    );
    let created_twice = api.put("apps/web", "3", &[("if-none-match", "*")]).await;
    assert_eq!(created_twice.status, StatusCode::CONFLICT);
    let delete = api
        .send(Method::DELETE, "/v1/kv/cfg/x", &[("if-match", "*")], "")
        .await;
    assert_eq!(delete.status, StatusCode::CONFLICT);
    // A successful conditional write is no conflict.
    let fresh = format!("\"{revision}\"");
    assert_eq!(
        api.put("apps/web", "4", &[("if-match", &fresh)])
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"put\",prefix=\"apps\",resolution=\"rejected\"}"),
        2.0
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"delete\",prefix=\"cfg\",resolution=\"rejected\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_txn_whose_compares_fail_counts_under_its_first_compare_key() {
    let api = MeteredApi::new();
    api.put("locks/a", "held", &[]).await;
    let txn = |value: &str| {
        json!({
            "compare": [
                { "key": "locks/a", "target": "value", "op": "=", "value": value },
                { "key": "other/b", "target": "version", "op": "=", "value": 0 }
            ],
            "success": [{ "put": { "key": "locks/a", "value": "mine" } }],
            "failure": []
        })
        .to_string()
    };
    let failed = api.send(Method::POST, "/v1/txn", &[], &txn("free")).await;
    assert_eq!(failed.json["succeeded"], false);
    let succeeded = api.send(Method::POST, "/v1/txn", &[], &txn("held")).await;
    assert_eq!(succeeded.json["succeeded"], true);
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"txn\",prefix=\"locks\",resolution=\"rejected\"}"),
        1.0
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"txn\",prefix=\"other\",resolution=\"rejected\"}"),
        0.0
    );
}

#[tokio::test]
async fn retry_attempts_are_counted_by_operation_and_prefix() {
    let api = MeteredApi::new();
    api.put("jobs/1", "a", &[("x-retry-attempt", "2")]).await;
    api.put("jobs/2", "a", &[("x-retry-attempt", "0")]).await;
    api.send(Method::GET, "/v1/status", &[("x-retry-attempt", "1")], "")
        .await;
    let txn = json!({
        "compare": [{ "key": "jobs/1", "target": "version", "op": ">", "value": 0 }],
        "success": [], "failure": []
    });
    api.send(
        Method::POST,
        "/v1/txn",
        &[("x-retry-attempt", "3")],
        &txn.to_string(),
    )
    .await;
    assert_eq!(
        api.sample("revkv_client_retries_total{op=\"put\",prefix=\"jobs\"}"),
        1.0
    );
    assert_eq!(
        api.sample("revkv_client_retries_total{op=\"txn\",prefix=\"jobs\"}"),
        1.0
    );
    assert_eq!(
        api.sample("revkv_client_retries_total{op=\"other\",prefix=\"none\"}"),
        1.0
    );
    assert_eq!(
        api.sample("revkv_client_retry_attempt_sum{op=\"put\"}"),
        2.0
    );
    assert_eq!(
        api.sample("revkv_client_retry_attempt_count{op=\"txn\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_malformed_retry_attempt_is_invalid() {
    let api = MeteredApi::new();
    let answer = api.put("jobs/1", "a", &[("x-retry-attempt", "soon")]).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json["error"]["code"], "invalid");
}

#[tokio::test]
async fn get_metrics_serves_the_text_format_with_requests_by_route_template() {
    let api = MeteredApi::new();
    api.put("a/b/c", "1", &[]).await;
    api.send(Method::GET, "/v1/kv/a/b/c", &[], "").await;
    let answer = api.send(Method::GET, "/metrics", &[], "").await;
    assert_eq!(answer.status, StatusCode::OK);
    let content_type = answer.headers["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/plain; version=0.0.4"));
    assert!(answer.text.contains(
        "revkv_http_requests_total{method=\"PUT\",route=\"/v1/kv/{*key}\",status=\"200\"} 1"
    ));
    assert!(
        !answer.text.contains("a/b/c"),
        "raw URIs never become labels"
    );
    assert!(answer.text.contains("# TYPE revkv_raft_term gauge"));
}

#[tokio::test]
async fn a_merge_patch_changes_only_the_fields_it_names() {
    let api = MeteredApi::new();
    let original = json!({ "spec": { "replicas": 1, "image": "web:1" }, "keep": true });
    api.put("deploy/web", &original.to_string(), &[]).await;
    let patch = json!({ "spec": { "replicas": 3, "image": null } });
    let answer = api.patch("/v1/kv/deploy/web", &[], patch).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(answer.json["attempts"], 1);
    let value: Value = serde_json::from_str(answer.json["kv"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(value, json!({ "spec": { "replicas": 3 }, "keep": true }));
    assert_eq!(answer.json["kv"]["version"], 2);
    let mod_revision = answer.json["kv"]["mod_revision"].as_u64().unwrap();
    assert_eq!(
        answer.json["header"]["revision"].as_u64().unwrap(),
        mod_revision
    );
    assert_eq!(
        answer.headers["etag"],
        format!("\"{mod_revision}\"").as_str()
    );
    let read = api.send(Method::GET, "/v1/kv/deploy/web", &[], "").await;
    assert_eq!(read.json["kv"], answer.json["kv"]);
    assert_eq!(
        api.sample("revkv_update_attempts_count{op=\"patch\",outcome=\"success\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_missing_key_is_not_found_unless_created() {
    let api = MeteredApi::new();
    let missing = api.patch("/v1/kv/new/key", &[], json!({ "a": 1 })).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let created = api
        .patch("/v1/kv/new/key?create=true", &[], json!({ "a": 1 }))
        .await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.text);
    assert_eq!(created.json["kv"]["value"], "{\"a\":1}");
    assert_eq!(created.json["kv"]["version"], 1);
    assert_eq!(
        created.json["kv"]["create_revision"],
        created.json["kv"]["mod_revision"]
    );
}

#[tokio::test]
async fn non_json_values_bodies_and_bad_parameters_are_invalid() {
    let api = MeteredApi::new();
    api.put("plain/text", "not json", &[]).await;
    let not_json_value = api.patch("/v1/kv/plain/text", &[], json!({ "a": 1 })).await;
    assert_eq!(not_json_value.status, StatusCode::BAD_REQUEST);
    api.put("doc/a", "{}", &[]).await;
    let bad_body = api
        .send(Method::PATCH, "/v1/kv/doc/a", &[], "{not json")
        .await;
    assert_eq!(bad_body.status, StatusCode::BAD_REQUEST);
    let bad_backoff = api
        .patch("/v1/kv/doc/a?backoff=forever", &[], json!({}))
        .await;
    assert_eq!(bad_backoff.status, StatusCode::BAD_REQUEST);
    let json_patch_type = [("content-type", "application/json-patch+json")];
    let wrong_type = api.patch("/v1/kv/doc/a", &json_patch_type, json!({})).await;
    assert_eq!(wrong_type.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"patch\",prefix=\"plain\",resolution=\"rejected\"}"),
        0.0
    );
}

#[tokio::test]
async fn a_patch_that_changes_nothing_writes_nothing() {
    let api = MeteredApi::new();
    let revision = api.put("doc/a", "{\"a\":1}", &[]).await.json["header"]["revision"].clone();
    let answer = api.patch("/v1/kv/doc/a", &[], json!({ "a": 1 })).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json["kv"]["mod_revision"], revision);
    assert_eq!(answer.json["header"]["revision"], revision);
}

#[tokio::test]
async fn with_if_match_one_attempt_is_made_and_a_stale_revision_is_a_conflict() {
    let api = MeteredApi::new();
    let revision = api.put("doc/a", "{\"a\":1}", &[]).await.json["header"]["revision"]
        .as_u64()
        .unwrap();
    let stale = format!("\"{}\"", revision - 1);
    let conflict = api
        .patch("/v1/kv/doc/a", &[("if-match", &stale)], json!({ "b": 2 }))
        .await;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    assert_eq!(conflict.json["error"]["code"], "conflict");
    assert_eq!(conflict.json["current"]["value"], "{\"a\":1}");
    let fresh = format!("\"{revision}\"");
    let patched = api
        .patch("/v1/kv/doc/a", &[("if-match", &fresh)], json!({ "b": 2 }))
        .await;
    assert_eq!(patched.status, StatusCode::OK);
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"patch\",prefix=\"doc\",resolution=\"rejected\"}"),
        1.0
    );
    let failed = "revkv_update_attempts_count{op=\"patch\",outcome=\"precondition_failed\"}";
    assert_eq!(api.sample(failed), 1.0);
}

#[tokio::test]
async fn an_update_that_loses_every_race_gives_up_with_a_conflict() {
    let api = MeteredApi::over(RacingBackend::new());
    api.put("hot/key", "{\"n\":0}", &[]).await;
    let answer = api
        .patch("/v1/kv/hot/key", &[], json!({ "mine": true }))
        .await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.text);
    assert!(answer.json["current"]["value"]
        .as_str()
        .unwrap()
        .contains("racer"));
    let exhausted = "revkv_update_attempts{op=\"patch\",outcome=\"exhausted\"}";
    assert_eq!(api.sample(&exhausted.replace('{', "_count{")), 1.0);
    assert_eq!(
        api.sample(&exhausted.replace('{', "_sum{")),
        5.0,
        "DefaultRetry's five attempts"
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"patch\",prefix=\"hot\",resolution=\"retried\"}"),
        4.0,
        "every attempt but the last was retried"
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"patch\",prefix=\"hot\",resolution=\"rejected\"}"),
        1.0
    );
}

/// A store where another writer always changes a key just before each txn on it: every
/// compare-and-swap of a guaranteed update loses.
struct RacingBackend {
    inner: StoreBackend,
}

impl RacingBackend {
    fn new() -> Self {
        RacingBackend {
            inner: StoreBackend::new(Duration::from_secs(5)),
        }
    }

    async fn race(&self, request: &Request) -> Result<(), NodeError> {
        let Request::Txn(txn) = request else {
            return Ok(());
        };
        let Some(compare) = txn.compare.first() else {
            return Ok(());
        };
        let put = PutRequest {
            key: compare.key.clone(),
            value: b"{\"racer\":true}".to_vec(),
            lease: 0,
            prev_kv: false,
        };
        self.inner.write(Request::Put(put)).await.map(|_| ())
    }
}

impl KvBackend for RacingBackend {
    fn member_id(&self) -> u64 {
        self.inner.member_id()
    }

    fn cluster_id(&self) -> u64 {
        self.inner.cluster_id()
    }

    fn header(&self) -> Result<ResponseHeader, NodeError> {
        self.inner.header()
    }

    async fn write(&self, request: Request) -> Result<Written, NodeError> {
        self.race(&request).await?;
        self.inner.write(request).await
    }

    async fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<ReadAnswer, NodeError> {
        self.inner.read(request, consistency).await
    }

    async fn read_txn(
        &self,
        txn: TxnRequest,
        consistency: ReadConsistency,
    ) -> Result<TxnAnswer, NodeError> {
        self.inner.read_txn(txn, consistency).await
    }

    async fn hash(&self, revision: Option<u64>) -> Result<(ResponseHeader, StateHash), NodeError> {
        self.inner.hash(revision).await
    }

    async fn key_history(
        &self,
        key: Vec<u8>,
        from_revision: Option<u64>,
        limit: u64,
        consistency: ReadConsistency,
    ) -> Result<(ResponseHeader, KeyHistory), NodeError> {
        self.inner
            .key_history(key, from_revision, limit, consistency)
            .await
    }

    async fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> Result<revkv_node::GrantedLease, NodeError> {
        self.inner.lease_grant(id, ttl_seconds).await
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<(ResponseHeader, i64), NodeError> {
        self.inner.lease_keep_alive(id).await
    }

    async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<revkv_node::LeaseTimeToLive, NodeError> {
        self.inner.lease_time_to_live(id, with_keys).await
    }

    async fn lease_ids(&self) -> Result<(ResponseHeader, Vec<i64>), NodeError> {
        self.inner.lease_ids().await
    }

    async fn status(&self) -> Result<MemberStatus, NodeError> {
        self.inner.status().await
    }

    async fn members(&self) -> Result<Vec<MemberInfo>, NodeError> {
        self.inner.members().await
    }

    async fn add_learner(
        &self,
        member: MemberInfo,
        join: revkv_node::LearnerJoin,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        self.inner.add_learner(member, join).await
    }

    async fn add_member_at(
        &self,
        peer_url: String,
        role: revkv_node::AddedMemberRole,
    ) -> Result<(MemberInfo, Vec<MemberInfo>), NodeError> {
        self.inner.add_member_at(peer_url, role).await
    }

    async fn promote(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.inner.promote(id).await
    }

    async fn update_member_peer_url(
        &self,
        id: u64,
        peer_url: String,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        self.inner.update_member_peer_url(id, peer_url).await
    }

    async fn remove_member(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.inner.remove_member(id).await
    }

    async fn transfer_leader(&self, to: u64) -> Result<(), NodeError> {
        self.inner.transfer_leader(to).await
    }

    async fn is_ready(&self) -> bool {
        self.inner.is_ready().await
    }

    fn request_timeout(&self) -> Duration {
        self.inner.request_timeout()
    }

    fn watch_hub(&self) -> &std::sync::Arc<revkv_node::watch::WatchHub> {
        self.inner.watch_hub()
    }

    fn auth_records(&self) -> std::sync::Arc<revkv_storage::auth::AuthState> {
        self.inner.auth_records()
    }

    fn alarms(&self) -> Result<Vec<revkv_storage::Alarm>, NodeError> {
        self.inner.alarms()
    }

    async fn defragment(&self) -> Result<revkv_storage::Defragmented, NodeError> {
        self.inner.defragment().await
    }

    fn backup_source(&self) -> revkv_node::BackupSource {
        self.inner.backup_source()
    }
}

#[tokio::test]
async fn three_way_merges_count_merged_and_rejected_conflicts() {
    let api = MeteredApi::new();
    let base = api.put("doc/m", "{\"a\":1,\"b\":1}", &[]).await.json["header"]["revision"]
        .as_u64()
        .unwrap();
    api.put("doc/m", "{\"a\":1,\"b\":2}", &[]).await;
    let if_match = format!("\"{base}\"");
    let merge_uri = "/v1/kv/doc/m?merge=three-way";
    let merge = |value: &'static str| {
        let body = json!({ "value": value }).to_string();
        let if_match = if_match.clone();
        let api = &api;
        async move {
            api.send(Method::PUT, merge_uri, &[("if-match", &if_match)], &body)
                .await
        }
    };
    assert_eq!(merge("{\"a\":5,\"b\":1}").await.status, StatusCode::OK);
    assert_eq!(
        merge("{\"a\":1,\"b\":7}").await.status,
        StatusCode::CONFLICT
    );
    let series = |resolution: &str| {
        format!("revkv_conflicts_total{{op=\"put\",prefix=\"doc\",resolution=\"{resolution}\"}}")
    };
    assert_eq!(api.sample(&series("merged")), 1.0);
    assert_eq!(api.sample(&series("rejected")), 1.0);
    assert_eq!(api.sample(&series("retried")), 0.0);
}
