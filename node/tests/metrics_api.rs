//! The metrics the client API records, against a plain store: conflicts counted once per `409` or
//! failed txn under the right prefix, `X-Retry-Attempt`, per-route HTTP metrics, `GET /metrics`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request as HttpRequest, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use revkv_node::http::{client_router_with_metrics, HttpLimits};
use revkv_node::{KvBackend, Metrics, PrefixLabelConfig};
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
        api.sample("revkv_conflicts_total{op=\"put\",prefix=\"apps\"}"),
        2.0
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"delete\",prefix=\"cfg\"}"),
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
        api.sample("revkv_conflicts_total{op=\"txn\",prefix=\"locks\"}"),
        1.0
    );
    assert_eq!(
        api.sample("revkv_conflicts_total{op=\"txn\",prefix=\"other\"}"),
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
