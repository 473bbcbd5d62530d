//! One connection of the streaming keep-alive (`POST /v1/leases/keepalive`): renewal lines
//! `{"id": N}` go out on the request body, answer lines come back in order, one per renewal:
//! `{"header", "id", "ttl"}`, `{"id", "error": {"code", "message"}}` for a failed renewal, or
//! `{"error": {...}}` without an id when the member ends the stream (a bad line, or idle).
//! The [`LeaseKeeper`](super::LeaseKeeper) decides what to renew and what an answer means.

use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::mpsc::error::TrySendError;

use super::error::ClientError;
use super::transport::DuplexStream;
use super::Client;

/// The streaming keep-alive's path.
pub const KEEPALIVE_STREAM_PATH: &str = "/v1/leases/keepalive";

/// The longest answer line accepted (an answer is about 100 bytes).
pub const LONGEST_KEEPALIVE_LINE_BYTES: usize = 64 * 1024;

/// One answer line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepAliveAnswer {
    /// The lease was renewed to `ttl_seconds`.
    Renewed { id: i64, ttl_seconds: i64 },
    /// This renewal failed with the contract's `code` (`not_found`: the lease is gone).
    Failed {
        id: i64,
        code: String,
        message: String,
    },
    /// The member ends the stream (`invalid` line, idle `timeout`); nothing more will come.
    Ended { code: String, message: String },
}

/// Whether renewal lines could be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    Sent,
    /// The request body's buffer is full: the member reads no faster. Try again later.
    Full,
    /// The request is over (the connection is gone).
    Closed,
}

/// An open streaming keep-alive on one member.
pub struct KeepAliveStream {
    duplex: DuplexStream,
    pending: Vec<u8>,
}

#[derive(Deserialize)]
struct AnswerJson {
    #[serde(default)]
    id: Option<i64>,
    #[serde(default)]
    ttl: Option<i64>,
    #[serde(default)]
    error: Option<ErrorJson>,
}

#[derive(Deserialize)]
struct ErrorJson {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl KeepAliveStream {
    /// Opens a stream on the member the client prefers (failing over as for a read); `timeout`
    /// bounds getting the answer's head. `buffered_chunks` bounds the request body's queue.
    pub async fn open(
        client: &Client,
        buffered_chunks: usize,
        timeout: std::time::Duration,
    ) -> Result<KeepAliveStream, ClientError> {
        let duplex = client
            .transport
            .open_duplex(KEEPALIVE_STREAM_PATH, buffered_chunks, timeout)
            .await?;
        Ok(KeepAliveStream {
            duplex,
            pending: Vec::new(),
        })
    }

    /// The member this stream is open on.
    pub fn endpoint(&self) -> &str {
        &self.duplex.endpoint
    }

    /// Queues one renewal line per id, as one chunk.
    pub fn try_send(&self, ids: &[i64]) -> SendOutcome {
        let lines: String = ids.iter().map(|id| format!("{{\"id\":{id}}}\n")).collect();
        match self.duplex.sender.try_send(Bytes::from(lines)) {
            Ok(()) => SendOutcome::Sent,
            Err(TrySendError::Full(_)) => SendOutcome::Full,
            Err(TrySendError::Closed(_)) => SendOutcome::Closed,
        }
    }

    /// The next answer line, or why the stream cannot be read any more. Cancel-safe: bytes read
    /// stay in the stream until their line is complete.
    pub async fn next_answer(&mut self) -> Result<KeepAliveAnswer, String> {
        loop {
            if let Some(end) = self.pending.iter().position(|byte| *byte == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return parse_answer_line(&line);
            }
            if self.pending.len() > LONGEST_KEEPALIVE_LINE_BYTES {
                return Err("a keep-alive answer line is over the limit".into());
            }
            match self.duplex.response.chunk().await {
                Ok(Some(bytes)) => self.pending.extend_from_slice(&bytes),
                Ok(None) => return Err("the member ended the keep-alive stream".into()),
                Err(error) => return Err(format!("the keep-alive stream broke: {error}")),
            }
        }
    }
}

/// One answer line, or why it is not one.
pub fn parse_answer_line(line: &[u8]) -> Result<KeepAliveAnswer, String> {
    let answer: AnswerJson = serde_json::from_slice(line)
        .map_err(|error| format!("unreadable keep-alive answer line: {error}"))?;
    match (answer.id, answer.ttl, answer.error) {
        (Some(id), _, Some(error)) => Ok(KeepAliveAnswer::Failed {
            id,
            code: error.code,
            message: error.message,
        }),
        (None, _, Some(error)) => Ok(KeepAliveAnswer::Ended {
            code: error.code,
            message: error.message,
        }),
        (Some(id), Some(ttl_seconds), None) => Ok(KeepAliveAnswer::Renewed { id, ttl_seconds }),
        _ => Err("a keep-alive answer line without id and ttl or error".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_lines_parse_to_renewals_failures_and_endings() {
        let renewed =
            br#"{"header": {"revision": 3, "member_id": 1, "raft_term": 2}, "id": 7, "ttl": 5}"#;
        assert_eq!(
            parse_answer_line(renewed),
            Ok(KeepAliveAnswer::Renewed {
                id: 7,
                ttl_seconds: 5
            })
        );
        let failed = br#"{"id": 9, "error": {"code": "not_found", "message": "lease 9"}}"#;
        assert!(matches!(
            parse_answer_line(failed),
            Ok(KeepAliveAnswer::Failed { id: 9, ref code, .. }) if code == "not_found"
        ));
        let ended = br#"{"error": {"code": "timeout", "message": "idle"}}"#;
        assert!(matches!(
            parse_answer_line(ended),
            Ok(KeepAliveAnswer::Ended { ref code, .. }) if code == "timeout"
        ));
        assert!(parse_answer_line(br#"{"id": 4}"#).is_err());
        assert!(parse_answer_line(b"nonsense").is_err());
    }
}
