//! `GET /v1/watch` (contract section 5) as newline-delimited JSON, or as Server-Sent Events when the
//! client sends `Accept: text/event-stream` (each message's `id` is its revision, and
//! `Last-Event-ID` resumes after it); and `POST /v1/watch/{watch_id}/progress`, which asks that
//! stream for a bookmark now.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use revkv_storage::EventKind;
use serde::Serialize;

use super::auth_gate::CheckedState;
use super::error::ApiError;
use super::keys::{key_range, TextEncoding};
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::{kv_json_after_write, KvJson};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::{Missing, NodeError};
use crate::watch::{EventFilter, WatchMessage, WatchRequest};

/// The most messages one write of an NDJSON watch stream carries: the messages already waiting
/// are written together (the history a watch catches up on leaves in one piece), up to this many.
const MAX_MESSAGES_PER_WRITE: usize = 1000;

/// How often an idle Server-Sent Events stream sends a comment line, so proxies keep it open.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/watch", get(open_watch::<B>))
        .route("/v1/watch/{watch_id}/progress", post(request_progress::<B>))
}

/// One stream message on the wire.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "UPPERCASE")]
enum MessageJson {
    Created {
        watch_id: String,
        revision: u64,
    },
    Events {
        revision: u64,
        events: Vec<EventJson>,
    },
    Bookmark {
        revision: u64,
    },
    Canceled {
        reason: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        compact_revision: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_revision: Option<u64>,
    },
}

#[derive(Serialize, utoipa::ToSchema)]
struct EventJson {
    #[serde(rename = "type")]
    kind: &'static str,
    kv: KvJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    prev_kv: Option<KvJson>,
}

/// A message as JSON. Keys and values that are not UTF-8 fall back to base64, marked on their
/// object, because a stream cannot refuse an event it has already committed to send.
fn message_json(message: &WatchMessage, encoding: TextEncoding) -> MessageJson {
    match message {
        WatchMessage::Created { watch_id, revision } => MessageJson::Created {
            watch_id: watch_id.to_string(),
            revision: *revision,
        },
        WatchMessage::Events(events) => MessageJson::Events {
            revision: events.revision,
            events: events
                .events()
                .map(|event| EventJson {
                    kind: match event.kind {
                        EventKind::Put => "PUT",
                        EventKind::Delete => "DELETE",
                    },
                    kv: kv_json_after_write(event.kv, encoding),
                    prev_kv: event.prev_kv.map(|kv| kv_json_after_write(kv, encoding)),
                })
                .collect(),
        },
        WatchMessage::Bookmark { revision } => MessageJson::Bookmark {
            revision: *revision,
        },
        WatchMessage::Canceled(cancellation) => MessageJson::Canceled {
            reason: cancellation.reason.as_str(),
            compact_revision: cancellation.compact_revision,
            last_revision: cancellation.last_revision,
        },
    }
}

/// `GET /v1/watch?key=K[&prefix=true|&range_end=E][&start_revision=R][&prev_kv=true]
/// [&filter=noput,nodelete][&progress_notify_ms=N][&encoding=base64]`.
#[utoipa::path(
    get,
    path = "/v1/watch",
    tag = "watch",
    summary = "Watch a key or a range: a stream of CREATED, EVENTS, BOOKMARK and CANCELED messages",
    params(
        super::openapi_shapes::EncodingQuery,
        ("key" = String, Query, description = "The key, or the start of the range"),
        ("prefix" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Watch every key under key"),
        ("range_end" = Option<String>, Query, description = "The end of the range, exclusive"),
        ("start_revision" = Option<u64>, Query, description = "The first revision to send (default: the current one + 1)"),
        ("prev_kv" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Send each event's previous key-value"),
        ("filter" = Option<String>, Query, description = "Comma-separated: noput, nodelete"),
        ("progress_notify_ms" = Option<u64>, Query, description = "Send a BOOKMARK at this period when idle"),
        ("Accept" = Option<String>, Header, description = "`text/event-stream` for Server-Sent Events"),
        ("Last-Event-ID" = Option<String>, Header, description = "With Server-Sent Events: resume after this revision"),
    ),
    responses(
        (status = 200, description = "The stream: one JSON message per line (or per Server-Sent Event)",
            content((MessageJson = "application/x-ndjson"), (String = "text/event-stream"))),
        (status = "4XX", description = "Refused: invalid, compacted, future_revision", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn open_watch<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    headers: HeaderMap,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = QueryParams::parse(raw_query.as_deref())?;
    let encoding = query.take_encoding()?;
    let mut request = watch_request(&mut query, encoding)?;
    query.finish()?;
    let server_sent_events = wants_server_sent_events(&headers);
    if server_sent_events {
        if let Some(last_event_id) = last_event_id(&headers)? {
            let resume = last_event_id.checked_add(1).ok_or_else(|| {
                NodeError::Invalid("Last-Event-ID is past the last possible revision".into())
            })?;
            request.start_revision = Some(resume);
        }
    }
    state.backend.authorize_watch(&request.filter.range)?;
    let watch = state.backend.watch_hub().open(request)?;
    if server_sent_events {
        let messages = watch.into_stream();
        let events =
            messages.map(move |message| Ok::<_, Infallible>(sse_event(&message, encoding)));
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE))
            .into_response());
    }
    let lines = watch
        .into_ready_groups(MAX_MESSAGES_PER_WRITE)
        .map(move |group| Ok::<_, Infallible>(json_lines(&group, encoding)));
    let content_type = HeaderValue::from_static("application/x-ndjson");
    Ok((
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(lines),
    )
        .into_response())
}

/// Parses the watch parameters (everything but `encoding`).
fn watch_request(
    query: &mut QueryParams,
    encoding: TextEncoding,
) -> Result<WatchRequest, NodeError> {
    let key = query
        .take_bytes("key")
        .ok_or_else(|| NodeError::Invalid("a watch needs key=K".into()))?;
    let key = encoding.decode("key", &key)?;
    let range_end = query
        .take_bytes("range_end")
        .map(|end| encoding.decode("range_end", &end))
        .transpose()?;
    let prefix = query.take_flag("prefix")?;
    let range = key_range(key, range_end, prefix)?;
    let (no_put, no_delete) = parse_filter(query.take_text("filter")?.as_deref())?;
    let progress_interval = query
        .take_u64("progress_notify_ms")?
        .map(Duration::from_millis);
    Ok(WatchRequest {
        filter: EventFilter {
            range,
            no_put,
            no_delete,
        },
        start_revision: query.take_u64("start_revision")?,
        prev_kv: query.take_flag("prev_kv")?,
        progress_interval,
    })
}

/// `filter=noput,nodelete` (either or both).
fn parse_filter(text: Option<&str>) -> Result<(bool, bool), NodeError> {
    let (mut no_put, mut no_delete) = (false, false);
    for name in text
        .unwrap_or_default()
        .split(',')
        .filter(|name| !name.is_empty())
    {
        match name {
            "noput" => no_put = true,
            "nodelete" => no_delete = true,
            other => {
                return Err(NodeError::Invalid(format!(
                    "filter must list noput and/or nodelete, not {other:?}"
                )))
            }
        }
    }
    Ok((no_put, no_delete))
}

fn wants_server_sent_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
}

/// The revision in a `Last-Event-ID` header, if one was sent.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, NodeError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    text.parse::<u64>().map(Some).map_err(|_| {
        NodeError::Invalid(format!(
            "Last-Event-ID must be a revision this member sent, not {text:?}"
        ))
    })
}

/// A group of messages as NDJSON lines, written to the client in one piece: one line per message,
/// as the contract has it.
fn json_lines(group: &[WatchMessage], encoding: TextEncoding) -> Bytes {
    let mut lines = Vec::new();
    for message in group {
        serde_json::to_writer(&mut lines, &message_json(message, encoding))
            .expect("watch messages always serialize");
        lines.push(b'\n');
    }
    Bytes::from(lines)
}

fn sse_event(message: &WatchMessage, encoding: TextEncoding) -> SseEvent {
    let data = serde_json::to_string(&message_json(message, encoding))
        .expect("watch messages always serialize");
    let event = SseEvent::default().data(data);
    match message {
        // The CREATED message carries the id the stream resumes from if it breaks before any
        // event: one before its start.
        WatchMessage::Created { .. } => event,
        other => match other.resume_revision() {
            Some(revision) => event.id(revision.to_string()),
            None => event,
        },
    }
}

#[derive(Serialize, utoipa::ToSchema)]
struct ProgressAnswer {
    header: ResponseHeader,
    watch_id: String,
    /// The bookmark the stream receives reaches at least this revision.
    revision: u64,
}

/// `POST /v1/watch/{watch_id}/progress`.
#[utoipa::path(
    post,
    path = "/v1/watch/{watch_id}/progress",
    tag = "watch",
    summary = "Ask a watch stream on this member for a bookmark now",
    params(("watch_id" = String, Path, description = "The id of the stream's CREATED message")),
    responses(
        (status = 200, description = "The stream will send a BOOKMARK at or past revision", body = ProgressAnswer),
        (status = "4XX", description = "not_found: no such watch on this member", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn request_progress<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Path(watch_id): Path<String>,
) -> Result<Response, ApiError> {
    let id: u64 = watch_id.parse().map_err(|_| {
        NodeError::NotFound(Missing::Other(format!(
            "no watch {watch_id:?} on this member"
        )))
    })?;
    let revision = state.backend.watch_hub().request_progress(id)?;
    let header = state.backend.header()?;
    let answer = ProgressAnswer {
        header,
        watch_id,
        revision,
    };
    Ok(Json(answer).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_unknown_names_are_refused() {
        assert_eq!(parse_filter(None).unwrap(), (false, false));
        assert_eq!(parse_filter(Some("noput")).unwrap(), (true, false));
        assert_eq!(parse_filter(Some("noput,nodelete")).unwrap(), (true, true));
        assert!(parse_filter(Some("nothing")).is_err());
    }

    #[test]
    fn canceled_messages_name_their_reason_and_revisions() {
        let message = WatchMessage::Canceled(crate::watch::Cancellation {
            reason: crate::watch::CancelReason::SlowConsumer,
            compact_revision: None,
            last_revision: Some(41),
        });
        let line = json_lines(&[message], TextEncoding::Utf8);
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"type\":\"CANCELED\",\"reason\":\"slow_consumer\",\"last_revision\":41}\n"
        );
    }
}
