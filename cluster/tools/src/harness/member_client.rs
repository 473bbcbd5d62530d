//! Raw HTTP against one member, for tests that check the API's exact answers (status, headers,
//! JSON bodies, contract error bodies) rather than go through the typed client.

use std::fmt::Display;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::waiting::wait_until;
use revkv_client::ClientTls;

/// The longest any single HTTP call may take before the test gives up on it (well above every
/// member-side timeout the tests configure, so a member's own 503/504 always arrives first).
const HTTP_CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// One decoded HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON (`Value::Null` when it is empty or not JSON).
    pub json: Value,
}

impl Answer {
    /// `error.code` of an error body, or "" when there is none.
    pub fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    /// `header.revision`; fails the test if the answer has none.
    pub fn revision(&self) -> u64 {
        self.json["header"]["revision"]
            .as_u64()
            .unwrap_or_else(|| panic!("no header.revision in {self:?}"))
    }

    /// A response header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// Fails the test unless the status is 200 OK; returns the answer for chaining.
    pub fn expect_ok(self, context: impl Display) -> Self {
        assert_eq!(
            self.status,
            StatusCode::OK,
            "{context}: expected 200, got {} {}",
            self.status,
            self.json
        );
        self
    }

    /// Fails the test unless this is a contract error body (section 3) with this status and code:
    /// `{"error": {"code", "message"}}`, a non-empty message, and every named extra field present.
    pub fn expect_error(&self, status: StatusCode, code: &str, extra_fields: &[&str]) {
        assert_eq!(
            self.status, status,
            "expected {status} {code}, got {} {}",
            self.status, self.json
        );
        assert_eq!(self.error_code(), code, "error code of {}", self.json);
        let message = self.json["error"]["message"].as_str().unwrap_or("");
        assert!(
            !message.is_empty(),
            "an error carries a message: {}",
            self.json
        );
        for field in extra_fields {
            assert!(
                self.json.get(*field).is_some(),
                "the {code} body carries {field}: {}",
                self.json
            );
        }
    }
}

/// An HTTP client bound to one member's client URL. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemberClient {
    pub id: u64,
    pub base_url: String,
    http: reqwest::Client,
}

impl MemberClient {
    pub fn new(id: u64, base_url: String) -> Self {
        Self::with_tls(id, base_url, &ClientTls::default())
    }

    /// A client that trusts the CA of `tls` and presents its client certificate, if any.
    pub fn with_tls(id: u64, base_url: String, tls: &ClientTls) -> Self {
        // No connection pooling: members are killed and restarted under the tests, and a pooled
        // connection to a dead process would turn into a spurious error on the next request.
        let builder = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(HTTP_CALL_TIMEOUT);
        let http = tls
            .configure(builder)
            .expect("the harness's TLS files load")
            .build()
            .expect("an HTTP client builds");
        MemberClient { id, base_url, http }
    }

    /// Sends one request; `Err` only when there is no HTTP answer at all (refused, reset, timeout).
    pub async fn try_send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, reqwest::Error> {
        let url = format!("{}{}", self.base_url, path_and_query);
        let mut request = self.http.request(method, url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            headers,
            json,
        })
    }

    /// Sends one request and fails the test if the member does not answer at all.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let body = body.map(|json| serde_json::to_vec(&json).expect("JSON encodes"));
        let described = format!("{method} {path_and_query} on member {}", self.id);
        self.try_send(method, path_and_query, body, headers)
            .await
            .unwrap_or_else(|error| panic!("{described}: no answer: {error}"))
    }

    pub async fn get(&self, path_and_query: &str) -> Answer {
        self.send(Method::GET, path_and_query, None, &[]).await
    }

    pub async fn post(&self, path_and_query: &str, body: Value) -> Answer {
        self.send(Method::POST, path_and_query, Some(body), &[])
            .await
    }

    pub async fn delete(&self, path_and_query: &str) -> Answer {
        self.send(Method::DELETE, path_and_query, None, &[]).await
    }

    /// `PUT /v1/kv/{key}` with `{"value": value}` (keys here are plain URL-safe text).
    pub async fn put(&self, key: &str, value: &str) -> Answer {
        let body = json!({ "value": value });
        self.send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &[])
            .await
    }

    /// Puts and returns the revision of the write; fails the test on anything but 200.
    pub async fn put_ok(&self, key: &str, value: &str) -> u64 {
        self.put(key, value)
            .await
            .expect_ok(format_args!("put {key} through member {}", self.id))
            .revision()
    }

    /// Puts, retrying while the cluster is between leaders (no answer, 503, or 504; a 504's
    /// write may or may not have happened, and repeating a put of the same value is harmless),
    /// until `timeout`. Returns the revision of the write that was acknowledged.
    pub async fn put_retrying(&self, key: &str, value: &str, timeout: Duration) -> u64 {
        let body = serde_json::to_vec(&json!({ "value": value })).expect("JSON encodes");
        let path = format!("/v1/kv/{key}");
        let what = format!("put {key} through member {} to be acknowledged", self.id);
        wait_until(what, timeout, async || {
            match self
                .try_send(Method::PUT, &path, Some(body.clone()), &[])
                .await
            {
                Ok(answer) if answer.status == StatusCode::OK => Some(answer.revision()),
                Ok(answer)
                    if answer.status == StatusCode::SERVICE_UNAVAILABLE
                        || answer.status == StatusCode::GATEWAY_TIMEOUT =>
                {
                    None
                }
                Ok(answer) => panic!(
                    "put {key} through member {}: {} {}",
                    self.id, answer.status, answer.json
                ),
                Err(_) => None,
            }
        })
        .await
    }

    /// `GET /v1/kv/{key}` with an optional query (without the `?`).
    pub async fn get_key(&self, key: &str, query: &str) -> Answer {
        let separator = if query.is_empty() { "" } else { "?" };
        self.get(&format!("/v1/kv/{key}{separator}{query}")).await
    }

    /// The key's value (a serializable read, local to this member), or `None` if absent.
    pub async fn local_value(&self, key: &str) -> Option<String> {
        let answer = self.get_key(key, "consistency=serializable").await;
        match answer.status {
            StatusCode::OK => Some(answer.json["kv"]["value"].as_str()?.to_string()),
            StatusCode::NOT_FOUND => None,
            _ => panic!("reading {key} on member {}: {answer:?}", self.id),
        }
    }

    /// `GET /v1/status`, or `None` when the member does not answer 200.
    /// The member's `GET /metrics` text (empty when it does not answer).
    pub async fn metrics_text(&self) -> String {
        let url = format!("{}/metrics", self.base_url);
        match self.http.get(url).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    pub async fn status(&self) -> Option<Value> {
        let answer = self
            .try_send(Method::GET, "/v1/status", None, &[])
            .await
            .ok()?;
        (answer.status == StatusCode::OK).then_some(answer.json)
    }

    /// True when `GET /readyz` answers 200.
    pub async fn is_ready(&self) -> bool {
        matches!(
            self.try_send(Method::GET, "/readyz", None, &[]).await,
            Ok(answer) if answer.status == StatusCode::OK
        )
    }

    /// True when the process answers HTTP at all (`GET /healthz`).
    pub async fn is_up(&self) -> bool {
        matches!(
            self.try_send(Method::GET, "/healthz", None, &[]).await,
            Ok(answer) if answer.status == StatusCode::OK
        )
    }

    /// `GET /v1/hash?revision=R`: `(hash, revision, compact_revision)`.
    pub async fn hash_at(&self, revision: u64) -> (u64, u64, u64) {
        let answer = self
            .get(&format!("/v1/hash?revision={revision}"))
            .await
            .expect_ok(format_args!("hash at {revision} on member {}", self.id));
        let field = |name: &str| answer.json[name].as_u64().expect("a hash field");
        (field("hash"), field("revision"), field("compact_revision"))
    }
}
