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
//!
//! This file has the protocol's frames, the caller's end and the count of streams a member serves;
//! the receiving end is `append_stream_server.rs`, so that the caller's end, which the peer
//! client uses, names nothing of the member.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, StatusCode};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use revkv_storage::codec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::peer::call_error::{classify_answer_error, classify_unanswered, CallError};
use crate::peer::{paths, PeerError};
use crate::types::TypeConfig;

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
    pub(super) fn admit(self: &Arc<Self>) -> Option<OpenStreamGuard> {
        let admitted = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < MAX_OPEN_STREAMS).then_some(open + 1)
            })
            .is_ok();
        admitted.then(|| OpenStreamGuard(self.clone()))
    }
}

pub(super) struct OpenStreamGuard(Arc<OpenStreams>);

impl Drop for OpenStreamGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sends one frame (`codec::encode_frame`) in one write.
pub(super) async fn send_frame(
    writer: &mut (impl AsyncWrite + Unpin),
    frame: &[u8],
) -> io::Result<()> {
    writer.write_all(frame).await?;
    writer.flush().await
}

/// Reads one frame's record, refusing a length over `max_bytes`. The buffer grows as bytes
/// arrive, so a length alone cannot make the reader allocate it.
pub(super) async fn read_frame(
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
    /// Opens a stream to `peer_url` through the peer client's HTTP client (its pool, TLS and
    /// timeouts).
    pub(super) async fn open(
        http: &reqwest::Client,
        peer_url: &str,
        timeout: Duration,
    ) -> Result<AppendStream, StreamCallError> {
        let url = format!("{}{}", peer_url.trim_end_matches('/'), paths::APPEND_STREAM);
        let sent = http
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::client::PeerClient;

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
        let opened = AppendStream::open(&client.http, &url, Duration::from_secs(5)).await;
        assert!(matches!(opened, Err(StreamCallError::NotServed)));
    }
}
