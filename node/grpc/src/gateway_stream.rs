//! The JSON gateway's two bidirectional streams, `POST /v3/watch` and `POST /v3/lease/keepalive`:
//! the request body is a sequence of JSON requests (`{"create_request": ...}` one after another),
//! the answer a line `{"result": ...}` per gRPC message, each sent as it comes, as etcd's
//! grpc-gateway streams them. As for unary calls, the messages go through the gated gRPC router
//! in-process; the gRPC request stream stays open after the HTTP body ends (a `curl -d` watch
//! keeps watching, as on etcd) and ends when the HTTP client goes away.

use std::collections::VecDeque;

use axum::body::{Body, Bytes};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::StreamExt;
use http_body_util::BodyStream;
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::ServiceExt;

use crate::gateway::{error_response, framed, take_frame, FRAME_HEADER_BYTES};

/// One streaming call: the JSON requests of `body` as `Req` messages to the gRPC method at
/// `method`, its `Resp` messages back as `{"result": ...}` lines.
pub async fn stream<Req, Resp>(
    grpc: Router,
    method: &'static str,
    max_message_bytes: usize,
    headers: HeaderMap,
    body: Body,
) -> Response
where
    Req: Message + Default + DeserializeOwned + Send + 'static,
    Resp: Message + Default + Serialize + Send + 'static,
{
    // A request that is not JSON of `Req` is answered with an error line, after which the
    // answer ends (the gRPC side then sees the client go away).
    let (bad_request, bad_requests) = tokio::sync::mpsc::channel(1);
    let requests = json_requests::<Req>(body, max_message_bytes, bad_request)
        .chain(futures_util::stream::pending())
        .map(Ok::<Bytes, std::io::Error>);
    let mut grpc_request = Request::post(method)
        .header(CONTENT_TYPE, "application/grpc")
        .header("te", "trailers");
    if let Some(token) = headers.get(AUTHORIZATION) {
        grpc_request = grpc_request.header("token", token);
    }
    let grpc_request = match grpc_request.body(Body::from_stream(requests)) {
        Ok(request) => request,
        Err(error) => return error_response(&tonic::Status::internal(error.to_string())),
    };
    let Ok(answer) = grpc.oneshot(grpc_request).await;
    let (parts, body) = answer.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&parts.headers) {
        if status.code() != tonic::Code::Ok {
            return error_response(&status);
        }
    }
    let lines = result_lines::<Resp>(body, max_message_bytes, bad_requests);
    (
        [(CONTENT_TYPE, "application/json")],
        Body::from_stream(lines),
    )
        .into_response()
}

/// The JSON values of `body`, one after another, each as a gRPC frame. A value that does not
/// parse, or a request past `max_message_bytes`, ends the stream and is reported on `bad`.
fn json_requests<Req>(
    body: Body,
    max_message_bytes: usize,
    bad: tokio::sync::mpsc::Sender<String>,
) -> impl futures_util::Stream<Item = Bytes>
where
    Req: Message + DeserializeOwned + Send + 'static,
{
    let state = (body.into_data_stream(), Vec::new(), VecDeque::new(), false);
    futures_util::stream::unfold(
        state,
        move |(mut chunks, mut buffer, mut ready, mut ended)| {
            let bad = bad.clone();
            async move {
                loop {
                    if let Some(frame) = ready.pop_front() {
                        return Some((frame, (chunks, buffer, ready, ended)));
                    }
                    if ended {
                        return None;
                    }
                    let refusal = match chunks.next().await {
                        Some(Ok(chunk)) if buffer.len() + chunk.len() <= max_message_bytes => {
                            buffer.extend_from_slice(&chunk);
                            parse_complete::<Req>(&mut buffer, &mut ready).err()
                        }
                        Some(Ok(_)) => Some(format!("a request is over {max_message_bytes} bytes")),
                        // A broken body or its end: nothing more to parse.
                        _ => {
                            ended = true;
                            None
                        }
                    };
                    if let Some(refusal) = refusal {
                        ended = true;
                        let _ = bad.try_send(refusal);
                    }
                }
            }
        },
    )
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
    bad_requests: tokio::sync::mpsc::Receiver<String>,
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
                    let status = tonic::Status::invalid_argument(refusal);
                    return Some((Ok(refusal_line(&status)), (frames, buffer, bad, true)));
                }
                if let Some(message) = take_frame(&mut buffer) {
                    let line = match Resp::decode(message.as_slice()) {
                        Ok(response) => result_line(&response),
                        Err(error) => error_line(&tonic::Status::internal(error.to_string())),
                    };
                    return Some((Ok(line), (frames, buffer, bad, false)));
                }
                let next = tokio::select! {
                    frame = frames.next() => frame,
                    Some(refusal) = bad.recv() => {
                        let status = tonic::Status::invalid_argument(refusal);
                        return Some((Ok(refusal_line(&status)), (frames, buffer, bad, true)));
                    }
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
                            let status = tonic::Status::from_header_map(trailers)
                                .filter(|status| status.code() != tonic::Code::Ok)?;
                            return Some((Ok(error_line(&status)), (frames, buffer, bad, true)));
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
    let error = serde_json::json!({
        "error": status.message(), "code": status.code() as i32, "message": status.message()
    });
    let mut text = error.to_string().into_bytes();
    text.push(b'\n');
    Bytes::from(text)
}

/// grpc-gateway's error line inside a stream.
fn error_line(status: &tonic::Status) -> Bytes {
    let error = serde_json::json!({
        "error": { "grpc_code": status.code() as i32, "message": status.message() }
    });
    let mut text = error.to_string().into_bytes();
    text.push(b'\n');
    Bytes::from(text)
}
