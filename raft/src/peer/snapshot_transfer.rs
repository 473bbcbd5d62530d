//! Sending and receiving a full raft snapshot as a stream (issue 14), so neither member holds the
//! snapshot in memory.
//!
//! The request body is a head (a 4-byte big-endian length, then the codec record of the vote and
//! the snapshot's meta) followed by the snapshot file's bytes. The sender reads the file on a
//! blocking thread in `TRANSFER_CHUNK_BYTES` chunks, at most `CHUNKS_IN_FLIGHT` queued for the
//! connection; the receiver writes the bytes to a new file under `DATA_DIR/snapshots/`, refusing
//! more than `PeerLimits::max_snapshot_bytes`, and only then hands the file to openraft to
//! install. The answer is the usual codec record of `Result<SnapshotResponse, PeerError>`. A
//! transfer cut short leaves a file that is removed at once (or at the next start); openraft
//! sends the snapshot again, whole.

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use revkv_storage::codec;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::client::{decode_reply, post_simulated, CallError, PeerClient};
use super::PeerError;
use crate::member_inner::MemberInner;
use crate::snapshot_file::SnapshotFile;
use crate::types::alias::{Snapshot, SnapshotMeta, SnapshotResponse, Vote};

/// Bytes per chunk of the body.
pub const TRANSFER_CHUNK_BYTES: usize = 256 * 1024;
/// Chunks read ahead of the connection.
const CHUNKS_IN_FLIGHT: usize = 4;
/// Largest head (vote and meta; the meta holds the membership).
const MAX_HEAD_BYTES: usize = 1024 * 1024;

type Head = (Vote, SnapshotMeta);

impl PeerClient {
    /// Streams `snapshot` to `url` and decodes the answer; the whole call within `timeout`.
    pub async fn send_snapshot(
        &self,
        url: &str,
        vote: Vote,
        snapshot: Snapshot,
        timeout: Duration,
    ) -> Result<SnapshotResponse, CallError> {
        let head = codec::encode(&(vote, snapshot.meta))
            .map_err(|error| CallError::BadAnswer(error.to_string()))?;
        let head_length = u32::try_from(head.len())
            .map_err(|_| CallError::BadAnswer("the snapshot head is too large".into()))?;
        let mut first = head_length.to_be_bytes().to_vec();
        first.extend_from_slice(&head);
        if let Some(network) = self.network.simulated_network() {
            let body = whole_body_for_simulation(first, &snapshot.snapshot)?;
            return post_simulated(network, url.to_string(), body, timeout).await;
        }
        let reader = snapshot.snapshot.reader().ok();
        let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
        sender
            .send(Ok(Bytes::from(first)))
            .await
            .map_err(|_| CallError::BadAnswer("the body closed".into()))?;
        if let Some(reader) = reader {
            // Keeps the file (and so the snapshot) alive until it is read whole.
            let file = snapshot.snapshot;
            tokio::task::spawn_blocking(move || feed(reader, sender, file));
        }
        let body = reqwest::Body::wrap(ChannelBody { receiver });
        let sent = self.http.post(url).body(body).timeout(timeout).send();
        decode_reply(sent.await, url, timeout).await
    }
}

/// The largest snapshot sent through a simulated network, which carries a body whole: a
/// simulation's stores are small, and a larger one is a mistake to report, not to buffer.
const MAX_SIMULATED_SNAPSHOT_BYTES: u64 = 256 * 1024 * 1024;

/// The head and the whole snapshot file in one body, for a simulated network (`simulated.rs`).
/// The file is read on the caller's thread: a simulation runs everything on one.
fn whole_body_for_simulation(mut body: Vec<u8>, file: &SnapshotFile) -> Result<Vec<u8>, CallError> {
    // A snapshot without data is its head alone, as `send_snapshot` sends it over HTTP.
    let Ok(reader) = file.reader() else {
        return Ok(body);
    };
    reader
        .take(MAX_SIMULATED_SNAPSHOT_BYTES + 1)
        .read_to_end(&mut body)
        .map_err(|error| CallError::BadAnswer(format!("read the snapshot: {error}")))?;
    if body.len() as u64 > MAX_SIMULATED_SNAPSHOT_BYTES {
        return Err(CallError::BadAnswer(format!(
            "a snapshot over {MAX_SIMULATED_SNAPSHOT_BYTES} bytes cannot cross a simulated network"
        )));
    }
    Ok(body)
}

/// Reads the file into the channel until it ends, the connection goes away, or reading fails
/// (then the body ends with an error and the receiver refuses the cut stream).
fn feed(mut reader: impl Read, sender: mpsc::Sender<std::io::Result<Bytes>>, _file: SnapshotFile) {
    loop {
        let mut chunk = vec![0u8; TRANSFER_CHUNK_BYTES];
        let read = match reader.read(&mut chunk) {
            Ok(0) => return,
            Ok(read) => read,
            Err(error) => {
                let _ = sender.blocking_send(Err(error));
                return;
            }
        };
        chunk.truncate(read);
        if sender.blocking_send(Ok(Bytes::from(chunk))).is_err() {
            return;
        }
    }
}

struct ChannelBody {
    receiver: mpsc::Receiver<std::io::Result<Bytes>>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.receiver
            .poll_recv(context)
            .map(|chunk| chunk.map(|bytes| bytes.map(Frame::data)))
    }
}

/// The peer route: writes the streamed snapshot to a file, then installs it.
pub(crate) async fn receive_snapshot(member: Arc<MemberInner>, body: Body) -> Response {
    let reply = match receive_to_file(&member, body).await {
        Ok((vote, meta, file)) => {
            let snapshot = Snapshot {
                meta,
                snapshot: file,
            };
            member
                .raft
                .install_full_snapshot(vote, snapshot)
                .await
                .map_err(|error| PeerError::Fatal(error.to_string()))
        }
        Err(refusal) => Err(refusal),
    };
    match codec::encode(&reply) {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn receive_to_file(
    member: &MemberInner,
    body: Body,
) -> Result<(Vote, SnapshotMeta, SnapshotFile), PeerError> {
    let refused = |what: String| PeerError::Refused(format!("snapshot transfer: {what}"));
    let max_bytes = member.config.peer_limits.max_snapshot_bytes;
    let (snapshot, file) = member
        .snapshot_files
        .create("incoming")
        .map_err(|error| refused(error.to_string()))?;
    let mut file = tokio::fs::File::from_std(file);
    let mut stream = body.into_data_stream();
    let mut head_buffer: Vec<u8> = Vec::new();
    let mut head: Option<Head> = None;
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| refused(format!("the stream broke: {error}")))?;
        let data = match head {
            Some(_) => chunk,
            None => {
                head_buffer.extend_from_slice(&chunk);
                match split_head(&head_buffer).map_err(refused)? {
                    None => continue,
                    Some((decoded, rest)) => {
                        head = Some(decoded);
                        Bytes::copy_from_slice(rest)
                    }
                }
            }
        };
        written += data.len() as u64;
        if written > max_bytes {
            return Err(refused(format!("more than {max_bytes} bytes")));
        }
        file.write_all(&data)
            .await
            .map_err(|error| refused(error.to_string()))?;
    }
    file.flush()
        .await
        .map_err(|error| refused(error.to_string()))?;
    let (vote, meta) = head.ok_or_else(|| refused("the stream ended in its head".into()))?;
    Ok((vote, meta, snapshot))
}

/// The head, once `buffer` holds it whole, and the bytes after it.
fn split_head(buffer: &[u8]) -> Result<Option<(Head, &[u8])>, String> {
    let Some(length_bytes) = buffer.get(..4) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes(length_bytes.try_into().expect("four bytes")) as usize;
    if length > MAX_HEAD_BYTES {
        return Err(format!("a head of {length} bytes"));
    }
    let Some(head_bytes) = buffer.get(4..4 + length) else {
        return Ok(None);
    };
    let head = codec::decode(head_bytes).map_err(|error| format!("bad head: {error}"))?;
    Ok(Some((head, &buffer[4 + length..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed_head() -> Vec<u8> {
        let head: Head = (Vote::new(1, 1), SnapshotMeta::default());
        let encoded = codec::encode(&head).unwrap();
        let mut framed = (encoded.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&encoded);
        framed
    }

    #[test]
    fn the_head_is_read_once_whole_whatever_the_chunking() {
        let mut stream = framed_head();
        stream.extend_from_slice(b"data");
        for cut in 0..stream.len() - 4 {
            assert!(
                split_head(&stream[..cut]).unwrap().is_none(),
                "a head cut at {cut} bytes was taken"
            );
        }
        let (_, rest) = split_head(&stream).unwrap().expect("the whole head");
        assert_eq!(rest, b"data");
    }

    #[test]
    fn an_oversized_or_undecodable_head_is_refused() {
        let huge = ((MAX_HEAD_BYTES + 1) as u32).to_be_bytes();
        assert!(split_head(&huge).is_err());
        let mut garbage = 3u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(split_head(&garbage).is_err());
    }
}
