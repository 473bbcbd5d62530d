//! `POST /v1/leases/keepalive`: the streaming keep-alive, so a client holding many leases pays
//! one long request rather than one request per renewal (etcd's `LeaseKeepAlive` stream).
//!
//! Wire format, both ways newline-delimited JSON (`application/x-ndjson`):
//! - The request body is a stream of lines `{"id": N}`, one renewal each (blank lines are skipped).
//! - The answer (status 200, sent at once) has one line per request line, in request order:
//!   `{"header": {...}, "id": N, "ttl": T}` (renewed to the granted TTL `T`), or
//!   `{"id": N, "error": {"code", "message"}}` when that renewal failed (`not_found` for a lease
//!   that is gone; `unavailable`, `timeout`, ... as the contract's codes). The stream continues.
//! - A line that is not `{"id": N}` with N a positive whole number, or longer than the line
//!   limit, is answered `{"error": {"code": "invalid", "message"}}` (no `id`), and the stream
//!   ends. So does an idle stream (no request line within the idle timeout) with code `timeout`.
//!   A client that ends its request body gets the answers still owed, then the end of the stream.
//!
//! Every renewal goes through `KvBackend::lease_keep_alive`, so a follower forwards it to the
//! leader exactly as the single keep-alive does. Bounds (`LeaseStreamLimits`): the line length,
//! the renewals in flight per stream (no request line is read while that many are running), the
//! idle timeout, and the number of streams open on the member.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use revkv_raft::clock::Instant;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;

use super::error::{error_code, ApiError};
use super::query::QueryParams;
use super::state::{ApiState, LeaseStreamLimits};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;

/// How long a client refused for too many open streams is asked to wait.
const STREAMS_FULL_RETRY_AFTER: Duration = Duration::from_secs(1);

/// One request line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewalRequest {
    id: i64,
}

/// One successful answer line: `{header, id, ttl}`, as the single keep-alive answers.
#[derive(Serialize)]
struct RenewalAnswer {
    header: ResponseHeader,
    id: i64,
    ttl: i64,
}

/// What the request body yields next.
enum RequestItem {
    /// Renew this lease.
    Renew(i64),
    /// Answer this error without an id, then end the stream.
    Stop(NodeError),
}

/// Splits the request body into lines, bounded in length and in the time between lines.
struct RequestLines {
    body: BodyDataStream,
    pending: Vec<u8>,
    limits: LeaseStreamLimits,
    /// When the stream ends unless another request line arrives.
    idle_deadline: Instant,
    /// The client ended its request body: no more bytes will come.
    body_ended: bool,
    finished: bool,
    /// Held as long as the stream is open: it counts against `max_streams`.
    _permit: OwnedSemaphorePermit,
}

/// `POST /v1/leases/keepalive`: see the module comment for the wire format.
#[utoipa::path(
    post,
    path = "/v1/leases/keepalive",
    tag = "lease",
    summary = "Keep leases alive over one stream: one request line in, one answer line out",
    request_body(content = String, content_type = "application/x-ndjson", description = "One `{\"id\": N}` per line"),
    responses(
        (status = 200, description = "One `{header, id, ttl}` or `{id, error}` line per request line", content_type = "application/x-ndjson", body = String),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable: too many streams", body = super::openapi_shapes::ErrorBody),
    )
)]
pub(super) async fn keep_alive_stream<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let permit = Arc::clone(&state.lease_streams)
        .try_acquire_owned()
        .map_err(|_| NodeError::Unavailable {
            reason: format!(
                "this member already serves {} keep-alive streams; try another member",
                state.lease_stream.max_streams
            ),
            retry_after: STREAMS_FULL_RETRY_AFTER,
        })?;
    let limits = state.lease_stream.clone();
    let max_in_flight = limits.max_renewals_in_flight.max(1);
    let lines = RequestLines {
        body: body.into_data_stream(),
        pending: Vec::new(),
        idle_deadline: Instant::now() + limits.idle_timeout,
        limits,
        body_ended: false,
        finished: false,
        _permit: permit,
    };
    let items = futures_util::stream::unfold(lines, |mut lines| async move {
        let item = lines.next_item().await?;
        Some((item, lines))
    });
    let backend = state.backend;
    let answers = items
        .map(move |item| answer_line(Arc::clone(&backend), item))
        .buffered(max_in_flight)
        .map(Ok::<_, Infallible>);
    let content_type = HeaderValue::from_static("application/x-ndjson");
    Ok((
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(answers),
    )
        .into_response())
}

/// The answer line of one request item.
async fn answer_line<B: KvBackend>(backend: Arc<B>, item: RequestItem) -> Bytes {
    match item {
        RequestItem::Renew(id) => match backend.lease_keep_alive(id).await {
            Ok((header, ttl)) => json_line(&RenewalAnswer { header, id, ttl }),
            Err(error) => json_line(&json!({ "id": id, "error": error_json(&error) })),
        },
        RequestItem::Stop(error) => json_line(&json!({ "error": error_json(&error) })),
    }
}

fn error_json(error: &NodeError) -> serde_json::Value {
    json!({ "code": error_code(error), "message": error.to_string() })
}

fn json_line(value: &impl Serialize) -> Bytes {
    let mut line = serde_json::to_vec(value).expect("answer lines always serialise");
    line.push(b'\n');
    Bytes::from(line)
}

impl RequestLines {
    /// The next renewal, the error that ends the stream, or None once the stream is over.
    async fn next_item(&mut self) -> Option<RequestItem> {
        if self.finished {
            return None;
        }
        let item = self.read_item().await;
        if !matches!(item, Some(RequestItem::Renew(_))) {
            self.finished = true;
        }
        item
    }

    async fn read_item(&mut self) -> Option<RequestItem> {
        loop {
            if let Some(line) = take_line(&mut self.pending) {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                self.idle_deadline = Instant::now() + self.limits.idle_timeout;
                return Some(parse_line(&line));
            }
            if self.body_ended {
                return self.last_unterminated_line();
            }
            if self.pending.len() > self.limits.max_line_bytes {
                return Some(RequestItem::Stop(NodeError::Invalid(format!(
                    "a keep-alive line is over the limit of {} bytes",
                    self.limits.max_line_bytes
                ))));
            }
            match revkv_raft::clock::timeout_at(self.idle_deadline, self.body.next()).await {
                Err(_) => {
                    return Some(RequestItem::Stop(NodeError::Timeout(format!(
                        "no keep-alive request for {:?}; the stream ends",
                        self.limits.idle_timeout
                    ))))
                }
                Ok(Some(Ok(bytes))) => self.pending.extend_from_slice(&bytes),
                // The client ended its requests: a last line without a newline still counts.
                Ok(None) => self.body_ended = true,
                // The connection broke: nobody is left to answer.
                Ok(Some(Err(_))) => return None,
            }
        }
    }

    fn last_unterminated_line(&mut self) -> Option<RequestItem> {
        let line = std::mem::take(&mut self.pending);
        (!line.iter().all(u8::is_ascii_whitespace)).then(|| parse_line(&line))
    }
}

/// A request line as an item: a renewal, or the `invalid` error that ends the stream.
fn parse_line(line: &[u8]) -> RequestItem {
    match serde_json::from_slice::<RenewalRequest>(line) {
        Ok(RenewalRequest { id }) if id > 0 => RequestItem::Renew(id),
        Ok(RenewalRequest { id }) => RequestItem::Stop(NodeError::Invalid(format!(
            "a lease id must be positive, not {id}"
        ))),
        Err(error) => RequestItem::Stop(NodeError::Invalid(format!(
            "a keep-alive line must be {{\"id\": N}}: {error}"
        ))),
    }
}

/// Removes and returns the first complete line (without its newline) from `pending`.
fn take_line(pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    let end = pending.iter().position(|byte| *byte == b'\n')?;
    let mut line: Vec<u8> = pending.drain(..=end).collect();
    line.pop();
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_to_renewals_or_to_the_error_that_ends_the_stream() {
        assert!(matches!(parse_line(br#"{"id": 7}"#), RequestItem::Renew(7)));
        for bad in [
            &br#"{"id": 0}"#[..],
            br#"{"id": -3}"#,
            br#"{"id": "7"}"#,
            br#"{"id": 7, "ttl": 5}"#,
            b"7",
        ] {
            assert!(
                matches!(parse_line(bad), RequestItem::Stop(NodeError::Invalid(_))),
                "{:?} must be invalid",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_line_is_taken_only_once_it_is_complete() {
        let mut pending = b"{\"id\":1}\n{\"id\"".to_vec();
        assert_eq!(take_line(&mut pending), Some(b"{\"id\":1}".to_vec()));
        assert_eq!(take_line(&mut pending), None);
        assert_eq!(pending, b"{\"id\"");
    }
}
