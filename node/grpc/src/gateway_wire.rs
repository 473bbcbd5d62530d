//! What the JSON gateway's unary calls (`gateway.rs`) and its streams (`gateway_stream.rs`) both
//! need to speak to the in-process gRPC router: a JSON body read as a request message, the gRPC
//! request that carries it, gRPC's message frames, and grpc-gateway's error answer. Its own
//! module so that both gateway files depend on it and neither on the other.

use axum::body::{to_bytes, Body};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// gRPC's message frame: a compression flag byte and a big-endian length.
pub(crate) const FRAME_HEADER_BYTES: usize = 5;

/// The JSON body of a request as `Req`; an empty body is the message with every field unset.
pub(crate) async fn request_of<Req: Message + Default + DeserializeOwned>(
    body: Body,
    max_request_bytes: usize,
) -> Result<Req, tonic::Status> {
    let bytes = to_bytes(body, max_request_bytes)
        .await
        .map_err(|error| tonic::Status::invalid_argument(error.to_string()))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Req::default());
    }
    serde_json::from_slice(&bytes)
        .map_err(|error| tonic::Status::invalid_argument(error.to_string()))
}

/// The in-process gRPC request for `method` with `body` (gRPC frames), carrying the gateway
/// request's `Authorization` as the `token` etcd's gRPC API takes.
pub(crate) fn grpc_request(
    method: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Request<Body>, tonic::Status> {
    let mut grpc_request = Request::post(method)
        .header(CONTENT_TYPE, "application/grpc")
        .header("te", "trailers");
    if let Some(token) = headers.get(AUTHORIZATION) {
        grpc_request = grpc_request.header("token", token);
    }
    grpc_request
        .body(body)
        .map_err(|error| tonic::Status::internal(error.to_string()))
}

/// `message` in one gRPC frame, uncompressed.
pub(crate) fn framed(message: &impl Message) -> Vec<u8> {
    let encoded = message.encode_to_vec();
    let length = u32::try_from(encoded.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + encoded.len());
    frame.push(0);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&encoded);
    frame
}

/// The first whole message of `buffer`, taken out of it; None while it holds less than one.
pub(crate) fn take_frame(buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    let header = buffer.get(..FRAME_HEADER_BYTES)?;
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if buffer.len() < FRAME_HEADER_BYTES + length {
        return None;
    }
    let message = buffer[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + length].to_vec();
    buffer.drain(..FRAME_HEADER_BYTES + length);
    Some(message)
}

/// The HTTP status grpc-gateway gives each gRPC code (v2's `runtime.HTTPStatusFromCode`, which
/// etcd's gateway uses from 3.6 on).
pub(crate) fn http_status_of(code: tonic::Code) -> StatusCode {
    use tonic::Code;
    match code {
        Code::Ok => StatusCode::OK,
        // Client Closed Request, nginx's code, which grpc-gateway v2 gives a canceled call
        // (etcd 3.5's v1 said 408).
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::REQUEST_TIMEOUT),
        // FailedPrecondition is 400 from etcd 3.5 on (grpc-gateway 1.16); 3.4's said 412.
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// grpc-gateway's answer to a failed unary call: [`error_body`] with the code's HTTP status.
pub(crate) fn error_response(status: &tonic::Status) -> Response {
    (
        http_status_of(status.code()),
        [(CONTENT_TYPE, "application/json")],
        error_body(status),
    )
        .into_response()
}

/// grpc-gateway v2's error body, as etcd answers from 3.6 on: the gRPC status as JSON,
/// `{"code", "message"}` (its `details` list is empty, so left out, as etcd's protojson leaves
/// out every empty field). etcd 3.4's and 3.5's grpc-gateway v1 also repeated the message as
/// `error`; a client reads `message` on both.
pub(crate) fn error_body(status: &tonic::Status) -> String {
    serde_json::to_string(&GatewayError::of(status)).unwrap_or_default()
}

/// The gRPC status as grpc-gateway v2 writes it, `{"code", "message"}`, in its order; also the
/// `error` of a stream's error line (`gateway_stream.rs`).
#[derive(Serialize)]
pub(crate) struct GatewayError<'m> {
    code: i32,
    message: &'m str,
}

impl<'m> GatewayError<'m> {
    pub(crate) fn of(status: &'m tonic::Status) -> GatewayError<'m> {
        GatewayError {
            code: status.code() as i32,
            message: status.message(),
        }
    }
}
