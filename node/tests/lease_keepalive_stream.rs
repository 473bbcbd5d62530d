//! The streaming keep-alive `POST /v1/leases/keepalive` over a plain store, in-process: one
//! answer line per request line in order, `not_found` for a lease that is gone without ending the
//! stream, a malformed or over-long line ending it with `invalid`, the idle timeout, answers that
//! flow before the request body ends, and the bound on open streams.

use crate::support;

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Method, StatusCode};
use http_body_util::BodyExt;
use revkv_node::http::LeaseStreamLimits;
use serde_json::{json, Value};
use support::Api;
use tokio::sync::mpsc;

const STREAM: &str = "/v1/leases/keepalive";

/// A request body fed line by line from the test, and the sender that feeds it.
fn fed_body() -> (mpsc::Sender<Bytes>, Body) {
    let (sender, receiver) = mpsc::channel::<Bytes>(16);
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let bytes = receiver.recv().await?;
        Some((Ok::<_, std::io::Error>(bytes), receiver))
    });
    (sender, Body::from_stream(stream))
}

/// Reads answer lines from a streamed body, keeping the part of a line not yet complete.
struct AnswerLines {
    body: Body,
    pending: Vec<u8>,
}

impl AnswerLines {
    fn new(body: Body) -> Self {
        AnswerLines {
            body,
            pending: Vec::new(),
        }
    }

    /// The next line as JSON, or None when the stream ended. Bounded by a deadline so a stream
    /// that neither answers nor ends fails the test instead of hanging it.
    async fn next(&mut self) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(end) = self.pending.iter().position(|byte| *byte == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).expect("an answer line is JSON"));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("an answer line or the end of the stream within 10 s");
            match frame {
                None => {
                    assert!(self.pending.is_empty(), "the stream ended inside a line");
                    return None;
                }
                Some(frame) => {
                    if let Ok(data) = frame.expect("the answer stream is readable").into_data() {
                        self.pending.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

async fn open_stream(api: &Api, body: Body) -> AnswerLines {
    let response = api.open(Method::POST, STREAM, body).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/x-ndjson",
        "the answer is newline-delimited JSON"
    );
    AnswerLines::new(response.into_body())
}

fn assert_renewed(line: &Value, id: i64, ttl: i64) {
    assert_eq!(
        (line["id"].as_i64(), line["ttl"].as_i64()),
        (Some(id), Some(ttl)),
        "{line}"
    );
    assert!(line["header"]["revision"].is_u64(), "a header: {line}");
    assert!(line.get("error").is_none(), "{line}");
}

fn assert_error_line(line: &Value, id: Option<i64>, code: &str) {
    assert_eq!(line["error"]["code"], code, "{line}");
    assert!(
        !line["error"]["message"].as_str().unwrap().is_empty(),
        "{line}"
    );
    assert_eq!(line.get("id").and_then(Value::as_i64), id, "{line}");
    assert!(line.get("ttl").is_none(), "{line}");
}

#[tokio::test]
async fn answers_each_line_in_order_and_a_bad_line_ends_the_stream() {
    let api = Api::new();
    api.post("/v1/leases", json!({ "ttl": 30, "id": 7 })).await;
    api.post("/v1/leases", json!({ "ttl": 12, "id": 8 })).await;
    let body = "{\"id\": 7}\n\n{\"id\": 99}\n{\"id\":8}\nnot json\n{\"id\": 7}\n";
    let mut answers = open_stream(&api, Body::from(body)).await;
    assert_renewed(&answers.next().await.unwrap(), 7, 30);
    assert_error_line(&answers.next().await.unwrap(), Some(99), "not_found");
    assert_renewed(&answers.next().await.unwrap(), 8, 12);
    assert_error_line(&answers.next().await.unwrap(), None, "invalid");
    assert_eq!(
        answers.next().await,
        None,
        "nothing is answered after a bad line"
    );
}

#[tokio::test]
async fn answers_flow_while_the_request_is_still_open_and_a_revoked_lease_is_not_found() {
    let api = Api::new();
    api.post("/v1/leases", json!({ "ttl": 20, "id": 5 })).await;
    let (sender, body) = fed_body();
    let mut answers = open_stream(&api, body).await;
    for _ in 0..3 {
        sender.send(Bytes::from("{\"id\": 5}\n")).await.unwrap();
        assert_renewed(&answers.next().await.unwrap(), 5, 20);
    }
    assert_eq!(api.delete("/v1/leases/5").await.status, StatusCode::OK);
    // A line split across two chunks is one line.
    sender.send(Bytes::from("{\"id\"")).await.unwrap();
    sender.send(Bytes::from(": 5}\n")).await.unwrap();
    assert_error_line(&answers.next().await.unwrap(), Some(5), "not_found");
    api.post("/v1/leases", json!({ "ttl": 9, "id": 6 })).await;
    // The stream went on after the error; a last line without a newline still counts.
    sender.send(Bytes::from("{\"id\": 6}")).await.unwrap();
    drop(sender);
    assert_renewed(&answers.next().await.unwrap(), 6, 9);
    assert_eq!(
        answers.next().await,
        None,
        "the end of the request ends the answer"
    );
}

#[tokio::test]
async fn an_over_long_line_and_an_idle_stream_end_with_an_error_line() {
    let api = Api::with_lease_stream(LeaseStreamLimits {
        max_line_bytes: 32,
        idle_timeout: Duration::from_millis(300),
        ..LeaseStreamLimits::default()
    });
    let long_line = format!("{{\"id\": {}}}\n", "1".repeat(40));
    let mut answers = open_stream(&api, Body::from(long_line)).await;
    assert_error_line(&answers.next().await.unwrap(), None, "invalid");
    assert_eq!(answers.next().await, None);

    let (sender, body) = fed_body();
    let mut answers = open_stream(&api, body).await;
    assert_error_line(&answers.next().await.unwrap(), None, "timeout");
    assert_eq!(answers.next().await, None, "an idle stream ends");
    drop(sender);
}

#[tokio::test]
async fn streams_beyond_the_limit_are_unavailable_until_one_ends() {
    let api = Api::with_lease_stream(LeaseStreamLimits {
        max_streams: 1,
        ..LeaseStreamLimits::default()
    });
    api.post("/v1/leases", json!({ "ttl": 20, "id": 4 })).await;
    let (sender, body) = fed_body();
    let mut first = open_stream(&api, body).await;
    let refused = api.send(Method::POST, STREAM, &[], "{\"id\": 4}\n").await;
    support::assert_error(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        &[],
    );
    drop(sender);
    assert_eq!(first.next().await, None);
    drop(first);
    let mut second = open_stream(&api, Body::from("{\"id\": 4}\n")).await;
    assert_renewed(&second.next().await.unwrap(), 4, 20);
}
