//! AppendEntries over one long-lived connection per replication stream, instead of one HTTP
//! request per call (etcd's rafthttp streams do the same).
//!
//! Why: a single client's write waits for one AppendEntries round trip to a follower, and every
//! write sends each follower a second one carrying the commit index. As HTTP requests through
//! reqwest and axum, each call paid a connection-task hand-off on the caller, an HTTP request
//! parsed and routed on the receiver, and their allocations: about 115 µs of a 530 µs write
//! (docs/BENCHMARKS.md, "Where a single client's write waits").
//!
//! How: the caller opens the stream with an HTTP/1.1 upgrade (`POST /raft/append-stream`,
//! `Upgrade: revkv-append-stream`) on the peer listener, so the stream has the listener's TLS and
//! client-certificate checks and needs no port of its own. After the `101` each call is one frame
//! each way, in order: a big-endian `u32` length, then a codec record (the
//! `AppendEntriesRequest`; the answer is `Result<AppendEntriesResponse, PeerError>`, as over HTTP).
//! The caller's task writes and reads the frames itself. A call that fails, times out or is
//! cancelled drops the connection (its state is unknown); the next call opens a new one. A member
//! that does not know the path (an older build) answers 404, and the caller falls back to HTTP.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use revkv_storage::codec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::member_inner::MemberInner;
use crate::peer::client::{classify_answer_error, classify_unanswered, CallError, PeerClient};
use crate::peer::{paths, PeerError};
use crate::types::TypeConfig;
use crate::write_path_trace::{self, Stage};

/// The `Upgrade` protocol name of the append stream.
pub const PROTOCOL: &str = "revkv-append-stream";

/// The most append streams a member serves at once. A leader opens about two per follower (its
/// replication and its heartbeats); more are refused with 503 until some close, so callers that
/// never close cannot pile up connections the listener's own limits no longer count once upgraded.
pub const MAX_OPEN_STREAMS: usize = 64;

/// How many append streams a member serves now.
#[derive(Debug, Default)]
pub struct OpenStreams(AtomicUsize);

impl OpenStreams {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts one more stream, unless `MAX_OPEN_STREAMS` are open; the guard counts it out.
    fn admit(self: &Arc<Self>) -> Option<OpenStreamGuard> {
        let admitted = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < MAX_OPEN_STREAMS).then_some(open + 1)
            })
            .is_ok();
        admitted.then(|| OpenStreamGuard(self.clone()))
    }
}

struct OpenStreamGuard(Arc<OpenStreams>);

impl Drop for OpenStreamGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A receiver closes a stream that sent no call for this long (its caller is gone without a word,
/// or idle: openraft's heartbeats keep a live one busy).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends one frame (`codec::encode_frame`) in one write.
async fn send_frame(writer: &mut (impl AsyncWrite + Unpin), frame: &[u8]) -> io::Result<()> {
    writer.write_all(frame).await?;
    writer.flush().await
}

/// Reads one frame's record, refusing a length over `max_bytes`. The buffer grows as bytes
/// arrive, so a length alone cannot make the reader allocate it.
async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    max_bytes: usize,
) -> io::Result<Vec<u8>> {
    let length = reader.read_u32().await? as usize;
    if length > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {length} bytes is over the limit of {max_bytes}"),
        ));
    }
    let mut record = Vec::with_capacity(length.min(64 * 1024));
    let read = reader.take(length as u64).read_to_end(&mut record).await?;
    if read != length {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the stream ended {read} bytes into a frame of {length}"),
        ));
    }
    Ok(record)
}

/// The caller's end of one stream, and the peer URL it was opened to.
pub(super) struct AppendStream {
    pub(super) peer_url: String,
    /// Reached only through `&mut self` (`Mutex::get_mut`, no locking): the mutex makes the
    /// connection `Sync`, which openraft requires of a network object.
    io: std::sync::Mutex<reqwest::Upgraded>,
}

/// Why a call over the stream did not answer.
pub(super) enum StreamCallError {
    /// The peer does not serve the stream (404): use HTTP for this peer from now on.
    NotServed,
    Call(CallError),
}

impl AppendStream {
    /// Opens a stream to `peer_url` through the shared client (its pool, TLS and timeouts).
    pub(super) async fn open(
        client: &PeerClient,
        peer_url: &str,
        timeout: Duration,
    ) -> Result<AppendStream, StreamCallError> {
        let url = format!("{}{}", peer_url.trim_end_matches('/'), paths::APPEND_STREAM);
        let sent = client
            .http
            .post(&url)
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, PROTOCOL)
            .timeout(timeout)
            .send()
            .await;
        let response =
            sent.map_err(|error| StreamCallError::Call(classify_unanswered(error, timeout)))?;
        match response.status() {
            StatusCode::SWITCHING_PROTOCOLS => {}
            StatusCode::NOT_FOUND => return Err(StreamCallError::NotServed),
            other => {
                return Err(StreamCallError::Call(CallError::BadAnswer(format!(
                    "{url} answered {other} to the stream upgrade"
                ))))
            }
        }
        let io = response
            .upgrade()
            .await
            .map_err(|error| StreamCallError::Call(classify_answer_error(error, timeout)))?;
        Ok(AppendStream {
            peer_url: peer_url.to_string(),
            io: std::sync::Mutex::new(io),
        })
    }

    /// Sends one request and reads its answer. On any error the caller must drop the stream.
    pub(super) async fn call(
        &mut self,
        request: &AppendEntriesRequest<TypeConfig>,
        max_reply_bytes: usize,
    ) -> Result<AppendEntriesResponse<TypeConfig>, CallError> {
        let frame = codec::encode_frame(request)
            .map_err(|error| CallError::BadAnswer(error.to_string()))?;
        let unreachable = |error: io::Error| CallError::Unreachable(error.to_string());
        let io = self
            .io
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        send_frame(io, &frame).await.map_err(unreachable)?;
        let answer = read_frame(io, max_reply_bytes).await.map_err(unreachable)?;
        let reply: Result<AppendEntriesResponse<TypeConfig>, PeerError> =
            codec::decode(&answer).map_err(|error| CallError::BadAnswer(error.to_string()))?;
        Ok(reply?)
    }
}

/// `POST /raft/append-stream`: answers `101` and serves the upgraded connection on a task of its
/// own. The task holds the member weakly, so an open stream does not keep a stopped member alive.
pub(super) async fn accept(
    State(member): State<Arc<MemberInner>>,
    mut request: Request,
) -> Response {
    let asks_for_stream = request
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|protocol| protocol == PROTOCOL);
    if !asks_for_stream {
        return (
            StatusCode::BAD_REQUEST,
            format!("Upgrade: {PROTOCOL} is required"),
        )
            .into_response();
    }
    let Some(upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return (
            StatusCode::BAD_REQUEST,
            "this connection cannot be upgraded",
        )
            .into_response();
    };
    let Some(guard) = member.append_streams.admit() else {
        let refusal = format!("{MAX_OPEN_STREAMS} append streams are open already");
        return (StatusCode::SERVICE_UNAVAILABLE, refusal).into_response();
    };
    let max_frame_bytes = member.config.peer_limits.max_body_bytes;
    let member = Arc::downgrade(&member);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => serve(member, TokioIo::new(upgraded), max_frame_bytes).await,
            Err(error) => tracing::debug!(%error, "append stream upgrade failed"),
        }
        drop(guard);
    });
    (
        StatusCode::SWITCHING_PROTOCOLS,
        [
            (header::CONNECTION, HeaderValue::from_static("upgrade")),
            (header::UPGRADE, HeaderValue::from_static(PROTOCOL)),
        ],
    )
        .into_response()
}

/// Answers calls in order until the caller closes the stream, stays idle for `IDLE_TIMEOUT`,
/// sends a bad frame, or the member stops.
async fn serve(
    member: Weak<MemberInner>,
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    max_frame_bytes: usize,
) {
    loop {
        let frame =
            match tokio::time::timeout(IDLE_TIMEOUT, read_frame(&mut io, max_frame_bytes)).await {
                Ok(Ok(frame)) => frame,
                Ok(Err(_)) | Err(_) => return,
            };
        let Some(member) = member.upgrade() else {
            return;
        };
        let Ok(request) = codec::decode::<AppendEntriesRequest<TypeConfig>>(&frame) else {
            tracing::debug!("undecodable append on a peer stream; closing it");
            return;
        };
        let last_index = request.entries.last().map(|entry| entry.log_id.index);
        if let Some(index) = last_index {
            write_path_trace::mark(Stage::Received, index);
        }
        let reply = member
            .raft
            .append_entries(request)
            .await
            .map_err(|error| PeerError::Fatal(error.to_string()));
        if let Some(index) = last_index {
            write_path_trace::mark(Stage::Answered, index);
        }
        drop(member);
        let Ok(frame) = codec::encode_frame(&reply) else {
            return;
        };
        if send_frame(&mut io, &frame).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_an_oversized_length_is_refused_before_reading_it() {
        let (mut writer, mut reader) = tokio::io::duplex(1024);
        let send = |value: &str| codec::encode_frame(&value.to_string()).unwrap();
        send_frame(&mut writer, &send("first")).await.unwrap();
        send_frame(&mut writer, &send("")).await.unwrap();
        let received = |record: Vec<u8>| codec::decode::<String>(&record).unwrap();
        assert_eq!(
            received(read_frame(&mut reader, 16).await.unwrap()),
            "first"
        );
        assert_eq!(received(read_frame(&mut reader, 16).await.unwrap()), "");
        send_frame(&mut writer, &send("seventeen bytes.."))
            .await
            .unwrap();
        let refused = read_frame(&mut reader, 16).await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
        let (_, mut closed) = tokio::io::duplex(8);
        assert!(read_frame(&mut closed, 16).await.is_err());
        drop(writer);
        let (mut short_writer, mut short_reader) = tokio::io::duplex(64);
        short_writer.write_all(&10u32.to_be_bytes()).await.unwrap();
        short_writer.write_all(b"four").await.unwrap();
        drop(short_writer);
        let cut = read_frame(&mut short_reader, 16).await.unwrap_err();
        assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// A member without the stream's path (an older build) answers 404: the caller is told to use
    /// HTTP, not handed an error that would fail every append.
    #[tokio::test]
    async fn a_peer_without_the_stream_is_reported_as_not_serving_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
        let client = PeerClient::new(Duration::from_secs(1), None, None);
        let opened = AppendStream::open(&client, &url, Duration::from_secs(5)).await;
        assert!(matches!(opened, Err(StreamCallError::NotServed)));
    }
}
