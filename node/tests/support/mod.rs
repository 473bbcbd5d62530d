//! Shared parts of the HTTP API tests: the `StoreBackend` (in `store_backend`) and `Api`, which
//! drives the real router in-process and decodes each answer.
#![allow(dead_code)]

mod store_backend;

// Each test binary compiles this module and uses a different subset of it.
#[allow(unused_imports)]
pub use store_backend::{member, StoreBackend, MEMBER_ID, RAFT_TERM};

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request as HttpRequest, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use revkv_node::http::{
    client_router, client_router_with_lease_stream, HttpLimits, LeaseStreamLimits,
};
use serde_json::Value;
use tower::ServiceExt;

/// One decoded answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON (`Value::Null` for an empty body).
    pub json: Value,
}

impl Answer {
    /// The `error.code` of an error body.
    pub fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    /// `header.revision`.
    pub fn revision(&self) -> u64 {
        self.json["header"]["revision"]
            .as_u64()
            .expect("header.revision")
    }
}

/// The router over a `StoreBackend`, called in-process.
pub struct Api {
    pub backend: Arc<StoreBackend>,
    router: Router,
}

impl Api {
    pub fn new() -> Self {
        Self::with(Duration::from_secs(5), HttpLimits::default())
    }

    /// A router with its own bounds on the streaming keep-alive.
    pub fn with_lease_stream(lease_stream: LeaseStreamLimits) -> Self {
        let backend = Arc::new(StoreBackend::new(Duration::from_secs(5)));
        let router = client_router_with_lease_stream(
            Arc::clone(&backend),
            HttpLimits::default(),
            lease_stream,
        );
        Api { backend, router }
    }

    pub fn with(request_timeout: Duration, limits: HttpLimits) -> Self {
        let backend = Arc::new(StoreBackend::new(request_timeout));
        let router = client_router(Arc::clone(&backend), limits);
        Api { backend, router }
    }

    /// Sends one request with optional extra headers and body.
    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> Answer {
        let mut request = HttpRequest::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.into()).expect("a valid request");
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let json = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes)
                .unwrap_or_else(|error| panic!("{uri} answered non-JSON ({error}): {bytes:?}")),
        };
        Answer {
            status,
            headers,
            json,
        }
    }

    /// Sends one request and hands back the answer with its body unread (streams).
    pub async fn open(&self, method: Method, uri: &str, body: Body) -> axum::response::Response {
        let request = HttpRequest::builder()
            .method(method)
            .uri(uri)
            .body(body)
            .expect("a valid request");
        self.router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible")
    }

    pub async fn get(&self, uri: &str) -> Answer {
        self.send(Method::GET, uri, &[], Body::empty()).await
    }

    pub async fn put(&self, uri: &str, body: Value) -> Answer {
        self.send(Method::PUT, uri, &[], body.to_string()).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> Answer {
        self.send(Method::POST, uri, &[], body.to_string()).await
    }

    pub async fn delete(&self, uri: &str) -> Answer {
        self.send(Method::DELETE, uri, &[], Body::empty()).await
    }

    /// Stores `value` under the (URL-safe) `key`, asserting success; returns the new revision.
    pub async fn put_value(&self, key: &str, value: &str) -> u64 {
        let answer = self
            .put(
                &format!("/v1/kv/{key}"),
                serde_json::json!({ "value": value }),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json);
        answer.revision()
    }
}

/// Asserts an error answer has the status, the code, a non-empty message, and exactly the given
/// extra top-level fields beside `error`.
pub fn assert_error(answer: &Answer, status: StatusCode, code: &str, extra_fields: &[&str]) {
    assert_eq!(answer.status, status, "{:?}", answer.json);
    let body = answer.json.as_object().expect("an error body is an object");
    let error = body["error"].as_object().expect("error is an object");
    assert_eq!(error.len(), 2, "error has only code and message: {error:?}");
    assert_eq!(error["code"], code);
    assert!(
        !error["message"].as_str().expect("message").is_empty(),
        "message is set"
    );
    let mut fields: Vec<&str> = body.keys().map(String::as_str).collect();
    fields.sort_unstable();
    let mut expected: Vec<&str> = extra_fields.iter().copied().chain(["error"]).collect();
    expected.sort_unstable();
    assert_eq!(fields, expected, "top-level fields of {:?}", answer.json);
}
