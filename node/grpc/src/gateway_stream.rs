//! The JSON gateway's streams. The two bidirectional ones, `POST /v3/watch` and
//! `POST /v3/lease/keepalive`: the request body is a sequence of JSON requests
//! (`{"create_request": ...}` one after another), the answer a line `{"result": ...}` per gRPC
//! message, each sent as it comes, as etcd's grpc-gateway streams them. As for unary calls, the
//! messages go through the gated gRPC router in-process. When the HTTP body ends, the gRPC call's
//! sending side closes, as etcd's grpc-gateway closes it, and each service then does what it
//! does with a client that half-closes: the keep-alive ends its stream (`curl -d '{"ID": N}'`
//! gets one answer line and the end), the watch keeps watching (a `curl -d` watch goes on until
//! the client goes away). The one server stream, `POST /v3/maintenance/snapshot`, takes one JSON request and
//! answers the same `{"result": ...}` lines (the snapshot in base64 pieces).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::StreamExt;
use http_body_util::BodyStream;
use prost::Message;
use revkv_raft::clock::Instant;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::gateway_wire::{
    error_response, framed, grpc_request, http_status_of, request_of, take_frame, GatewayError,
    FRAME_HEADER_BYTES,
};

/// What bounds the gateway's streams, shared by all of them on a member.
#[derive(Clone)]
pub(crate) struct StreamLimits {
    /// One permit per stream open now.
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) max_streams: usize,
    /// The largest request or answer message.
    pub(crate) max_message_bytes: usize,
}

impl StreamLimits {
    /// A permit for one more stream, or the status that refuses it.
    fn admit(&self) -> Result<OwnedSemaphorePermit, tonic::Status> {
        self.permits.clone().try_acquire_owned().map_err(|_| {
            tonic::Status::resource_exhausted(format!(
                "too many gateway streams on this member (at most {})",
                self.max_streams
            ))
        })
    }
}

/// One streaming call: the JSON requests of `body` as `Req` messages to the gRPC method at
/// `method`, its `Resp` messages back as `{"result": ...}` lines. With `idle_timeout`, a stream
/// that receives no request for that long ends with an error line.
pub(crate) async fn stream<Req, Resp>(
    grpc: Router,
    method: &'static str,
    limits: StreamLimits,
    idle_timeout: Option<Duration>,
    headers: HeaderMap,
    body: Body,
) -> Response
where
    Req: Message + Default + DeserializeOwned + Send + 'static,
    Resp: Message + Default + Serialize + Send + 'static,
{
    let permit = match limits.admit() {
        Ok(permit) => permit,
        Err(refusal) => return error_response(&refusal),
    };
    // A request that is not JSON of `Req`, or none in time, is answered with an error line,
    // after which the answer ends (the gRPC side then sees the client go away).
    let (bad_request, bad_requests) = tokio::sync::mpsc::channel(1);
    let reading = RequestReading {
        max_message_bytes: limits.max_message_bytes,
        idle_timeout,
        bad: bad_request,
    };
    let requests = reading
        .json_requests::<Req>(body)
        .map(Ok::<Bytes, std::io::Error>);
    let max = limits.max_message_bytes;
    match grpc_request(method, &headers, Body::from_stream(requests)) {
        Ok(request) => answer_lines::<Resp>(grpc, request, max, bad_requests, permit).await,
        Err(status) => error_response(&status),
    }
}

/// One server-streaming call: the JSON body as one `Req` to the gRPC method at `method`, its
/// `Resp` messages back as `{"result": ...}` lines.
pub(crate) async fn server_stream<Req, Resp>(
    grpc: Router,
    method: &'static str,
    limits: StreamLimits,
    headers: HeaderMap,
    body: Body,
) -> Response
where
    Req: Message + Default + DeserializeOwned,
    Resp: Message + Default + Serialize + Send + 'static,
{
    let permit = match limits.admit() {
        Ok(permit) => permit,
        Err(refusal) => return error_response(&refusal),
    };
    let max = limits.max_message_bytes;
    let request = match request_of::<Req>(body, max).await {
        Ok(request) => request,
        Err(status) => return error_response(&status),
    };
    // Nothing is refused once the one request parsed: a channel whose sender is already gone.
    let (_, no_bad_requests) = tokio::sync::mpsc::channel(1);
    match grpc_request(method, &headers, Body::from(framed(&request))) {
        Ok(request) => answer_lines::<Resp>(grpc, request, max, no_bad_requests, permit).await,
        Err(status) => error_response(&status),
    }
}

/// Sends `request` through `grpc`; an error status before any message is answered with the
/// code's HTTP status and one error line (as grpc-gateway v2 answers it, from etcd 3.6 on),
/// otherwise the answer streams as lines, holding the stream's `permit` until it ends.
async fn answer_lines<Resp>(
    grpc: Router,
    request: Request<Body>,
    max_message_bytes: usize,
    bad_requests: tokio::sync::mpsc::Receiver<tonic::Status>,
    permit: OwnedSemaphorePermit,
) -> Response
where
    Resp: Message + Default + Serialize + Send + 'static,
{
    let Ok(answer) = grpc.oneshot(request).await;
    let (parts, body) = answer.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&parts.headers) {
        if status.code() != tonic::Code::Ok {
            let content_type = [(CONTENT_TYPE, "application/json")];
            return (
                http_status_of(status.code()),
                content_type,
                error_line(&status),
            )
                .into_response();
        }
    }
    let lines = result_lines::<Resp>(body, max_message_bytes, bad_requests).map(move |line| {
        // Moved in so that it is released when the answer's body is dropped.
        let _held = &permit;
        line
    });
    (
        [(CONTENT_TYPE, "application/json")],
        Body::from_stream(lines),
    )
        .into_response()
}

/// How a stream's request body is read.
struct RequestReading {
    max_message_bytes: usize,
    /// With a limit, the stream ends when no request came for this long.
    idle_timeout: Option<Duration>,
    /// Where the reason the requests ended early goes (a line to the client).
    bad: tokio::sync::mpsc::Sender<tonic::Status>,
}

/// Where reading a stream's requests stands.
struct ReadingState {
    body: BodyDataStream,
    /// The bytes of a request not yet whole.
    buffer: Vec<u8>,
    /// Requests parsed and not yet handed to the gRPC call.
    ready: VecDeque<Bytes>,
    /// The body ended: the requests end once `ready` is sent.
    body_ended: bool,
    /// A request was refused (or none came in time): the stream ends once `ready` is sent.
    refused: bool,
    /// When the idle timeout runs out, if there is one.
    deadline: Option<Instant>,
}

impl RequestReading {
    /// The JSON values of `body`, one after another, each as a gRPC frame, ending with the body
    /// (the gRPC call's sending side closes; the call itself lives on as its service decides)
    /// or, with an idle timeout, when no request came for that long. A value that does not parse, a request past
    /// `max_message_bytes` or the idle timeout ends the stream and is reported on `bad`.
    fn json_requests<Req>(self, body: Body) -> impl futures_util::Stream<Item = Bytes>
    where
        Req: Message + DeserializeOwned + Send + 'static,
    {
        let state = ReadingState {
            body: body.into_data_stream(),
            buffer: Vec::new(),
            ready: VecDeque::new(),
            body_ended: false,
            refused: false,
            deadline: self.next_deadline(),
        };
        let reading = Arc::new(self);
        futures_util::stream::unfold(state, move |state| {
            let reading = reading.clone();
            async move { reading.next_request::<Req>(state).await }
        })
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.idle_timeout.map(|idle| Instant::now() + idle)
    }

    async fn next_request<Req: Message + DeserializeOwned>(
        &self,
        mut state: ReadingState,
    ) -> Option<(Bytes, ReadingState)> {
        loop {
            if let Some(frame) = state.ready.pop_front() {
                state.deadline = self.next_deadline();
                return Some((frame, state));
            }
            if state.refused || state.body_ended {
                return None;
            }
            let Some(chunk) = self.next_chunk(&mut state).await else {
                let idle = self.idle_timeout.unwrap_or_default().as_millis();
                let _ = self.bad.try_send(tonic::Status::deadline_exceeded(format!(
                    "no request for {idle} ms; open a new stream"
                )));
                return None;
            };
            let refusal = match chunk {
                Some(Ok(chunk)) if state.buffer.len() + chunk.len() <= self.max_message_bytes => {
                    state.buffer.extend_from_slice(&chunk);
                    parse_complete::<Req>(&mut state.buffer, &mut state.ready).err()
                }
                Some(Ok(_)) => Some(format!(
                    "a request is over {} bytes",
                    self.max_message_bytes
                )),
                // A broken body or its end: nothing more to parse; the requests end.
                _ => {
                    state.body_ended = true;
                    None
                }
            };
            if let Some(refusal) = refusal {
                let _ = self.bad.try_send(tonic::Status::invalid_argument(refusal));
                state.refused = true;
            }
        }
    }

    /// The body's next chunk; `None` when the idle timeout ran out first.
    async fn next_chunk(
        &self,
        state: &mut ReadingState,
    ) -> Option<Option<Result<Bytes, axum::Error>>> {
        let next = state.body.next();
        match state.deadline {
            Some(deadline) => revkv_raft::clock::timeout_at(deadline, next).await.ok(),
            None => Some(next.await),
        }
    }
}

/// Moves every complete JSON value at the front of `buffer` into `ready` as a frame; the parse
/// error when the buffer holds something that is not JSON of `Req`.
fn parse_complete<Req: Message + DeserializeOwned>(
    buffer: &mut Vec<u8>,
    ready: &mut VecDeque<Bytes>,
) -> Result<(), String> {
    let mut values = serde_json::Deserializer::from_slice(buffer).into_iter::<Req>();
    let mut consumed = 0;
    let outcome = loop {
        match values.next() {
            Some(Ok(request)) => {
                ready.push_back(Bytes::from(framed(&request)));
                consumed = values.byte_offset();
            }
            Some(Err(error)) if error.is_eof() => break Ok(()),
            Some(Err(error)) => break Err(error.to_string()),
            None => break Ok(()),
        }
    };
    buffer.drain(..consumed);
    outcome
}

/// A `{"result": ...}` line per gRPC message of `body`, and an `{"error": ...}` line when the
/// call ends with an error status.
fn result_lines<Resp>(
    body: Body,
    max_message_bytes: usize,
    bad_requests: tokio::sync::mpsc::Receiver<tonic::Status>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>>
where
    Resp: Message + Default + Serialize + Send + 'static,
{
    let state = (BodyStream::new(body), Vec::new(), bad_requests, false);
    futures_util::stream::unfold(
        state,
        move |(mut frames, mut buffer, mut bad, ended)| async move {
            if ended {
                return None;
            }
            loop {
                if let Ok(refusal) = bad.try_recv() {
                    return Some((Ok(refusal_line(&refusal)), (frames, buffer, bad, true)));
                }
                if let Some(message) = take_frame(&mut buffer) {
                    let line = match Resp::decode(message.as_slice()) {
                        Ok(response) => result_line(&response),
                        Err(error) => error_line(&tonic::Status::internal(error.to_string())),
                    };
                    return Some((Ok(line), (frames, buffer, bad, false)));
                }
                // A refusal goes first: the request stream ends right after it, and the end of
                // the gRPC answer that follows must not hide it.
                let next = tokio::select! {
                    biased;
                    Some(refusal) = bad.recv() => {
                        return Some((Ok(refusal_line(&refusal)), (frames, buffer, bad, true)));
                    }
                    frame = frames.next() => frame,
                };
                match next {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            if buffer.len() + data.len() > max_message_bytes + FRAME_HEADER_BYTES {
                                let status = tonic::Status::resource_exhausted("answer too large");
                                return Some((
                                    Ok(error_line(&status)),
                                    (frames, buffer, bad, true),
                                ));
                            }
                            buffer.extend_from_slice(data);
                        } else if let Some(trailers) = frame.trailers_ref() {
                            let line = match tonic::Status::from_header_map(trailers)
                                .filter(|status| status.code() != tonic::Code::Ok)
                            {
                                Some(status) => error_line(&status),
                                None => refusal_line(&bad.try_recv().ok()?),
                            };
                            return Some((Ok(line), (frames, buffer, bad, true)));
                        }
                    }
                    _ => return None,
                }
            }
        },
    )
}

fn result_line(response: &impl Serialize) -> Bytes {
    #[derive(Serialize)]
    struct ResultLine<'r, T> {
        result: &'r T,
    }
    let mut text = serde_json::to_vec(&ResultLine { result: response }).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}

/// A request the gateway could not read, as etcd's gateway answers one: the unary error shape.
fn refusal_line(status: &tonic::Status) -> Bytes {
    let mut text = crate::gateway_wire::error_body(status).into_bytes();
    text.push(b'\n');
    Bytes::from(text)
}

/// grpc-gateway v2's error line inside a stream, `{"error": {"code", "message"}}`.
fn error_line(status: &tonic::Status) -> Bytes {
    #[derive(Serialize)]
    struct ErrorLine<'m> {
        error: GatewayError<'m>,
    }
    let line = ErrorLine {
        error: GatewayError::of(status),
    };
    let mut text = serde_json::to_vec(&line).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}
