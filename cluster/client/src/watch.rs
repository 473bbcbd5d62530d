//! Watches that survive member loss: `GET /v1/watch` (API.md section 5) read as NDJSON, reopened on
//! another member from where the stream stopped, so the caller sees one unbroken, ordered stream.
//!
//! The [`Watcher`] remembers the position to resume from: after an `EVENTS` message of revision R
//! or a `BOOKMARK` of revision R (every matching event up to R was sent), it is R + 1; before any,
//! it is the requested `start_revision`, or the `CREATED` revision + 1 (a watch without a start
//! revision starts after the member's revision at creation). When the stream breaks (connection
//! lost, the member stopped, the stream ended without `CANCELED`, or silence longer than three
//! progress intervals when bookmarks were asked for), the watcher reopens with
//! `start_revision = position` on the next member. Events at or below the last delivered revision
//! are dropped, so nothing is delivered twice.
//!
//! A watch below the compact revision (410, or `CANCELED` with `compact_revision`) ends with
//! [`ClientError::Compacted`]: the caller must list again and watch from the list's revision + 1
//! (the [`Informer`](super::Informer) does this). Reopening is bounded: after
//! [`MOST_CONSECUTIVE_REOPENS`] failed attempts in a row, the last error is returned.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::backoff::Backoff;
use super::error::ClientError;
use super::kv::{query_value, with_query};
use super::transport::Call;
use super::types::KeyValue;
use super::{Client, DEFAULT_FAILOVER_BACKOFF};

/// Reopen attempts in a row (without a message in between) before a watch gives up.
pub const MOST_CONSECUTIVE_REOPENS: u32 = 20;

/// The longest NDJSON line accepted (a revision's events; a txn may change many keys).
pub const LONGEST_WATCH_LINE_BYTES: usize = 64 * 1024 * 1024;

/// What to watch and from where.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchRequest {
    pub key: String,
    /// Every key under `key`.
    pub prefix: bool,
    pub range_end: Option<String>,
    /// The first revision to send events of (default: the member's current revision + 1).
    pub start_revision: Option<u64>,
    pub prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
    /// Ask for a bookmark this often; also lets the watcher notice a silent, dead connection.
    pub progress_notify: Option<Duration>,
}

impl WatchRequest {
    pub fn key(key: impl Into<String>) -> Self {
        WatchRequest {
            key: key.into(),
            ..WatchRequest::default()
        }
    }

    pub fn prefix(prefix: impl Into<String>) -> Self {
        WatchRequest {
            prefix: true,
            ..WatchRequest::key(prefix)
        }
    }

    pub fn from_revision(mut self, revision: u64) -> Self {
        self.start_revision = Some(revision);
        self
    }

    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }

    pub fn with_progress_notify(mut self, interval: Duration) -> Self {
        self.progress_notify = Some(interval);
        self
    }

    /// The request path for a stream that starts at `start_revision`.
    pub fn path_and_query(&self, start_revision: Option<u64>) -> String {
        let mut pairs = vec![("key", self.key.clone())];
        if self.prefix {
            pairs.push(("prefix", "true".to_string()));
        }
        if let Some(range_end) = &self.range_end {
            pairs.push(("range_end", range_end.clone()));
        }
        if let Some(revision) = start_revision {
            pairs.push(("start_revision", revision.to_string()));
        }
        if self.prev_kv {
            pairs.push(("prev_kv", "true".to_string()));
        }
        let filters: Vec<&str> = [(self.no_put, "noput"), (self.no_delete, "nodelete")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| *name)
            .collect();
        if !filters.is_empty() {
            pairs.push(("filter", filters.join(",")));
        }
        if let Some(interval) = self.progress_notify {
            pairs.push((
                "progress_notify_ms",
                interval.as_millis().max(1).to_string(),
            ));
        }
        with_query("/v1/watch".to_string(), &pairs)
    }
}

/// Whether an event wrote or removed its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventKind {
    Put,
    Delete,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub kv: KeyValue,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_kv: Option<KeyValue>,
}

/// One NDJSON line of a watch stream, as the member writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "UPPERCASE")]
pub enum WatchMessage {
    Created {
        #[serde(default)]
        watch_id: Value,
        revision: u64,
    },
    Events {
        revision: u64,
        events: Vec<WatchEvent>,
    },
    Bookmark {
        revision: u64,
    },
    Canceled {
        #[serde(default)]
        reason: String,
        #[serde(default)]
        compact_revision: Option<u64>,
        #[serde(default)]
        last_revision: Option<u64>,
    },
}

/// What a [`Watcher`] hands the caller: the events of one revision, or a bookmark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "UPPERCASE")]
pub enum WatchUpdate {
    Events {
        revision: u64,
        events: Vec<WatchEvent>,
    },
    Bookmark {
        revision: u64,
    },
}

/// An open stream on one member, with the bytes of a line not yet complete.
struct OpenStream {
    response: reqwest::Response,
    endpoint: String,
    pending: Vec<u8>,
}

/// A resuming watch; [`Watcher::next`] gives its updates in revision order.
pub struct Watcher {
    client: Client,
    request: WatchRequest,
    /// Where a reopened stream starts; None until known.
    resume_from: Option<u64>,
    /// The highest revision delivered (events or bookmark).
    delivered_through: u64,
    stream: Option<OpenStream>,
    /// The id the member gave the open stream (`CREATED`), for [`Watcher::request_progress`].
    watch_id: Option<String>,
    consecutive_reopens: u32,
    reopen_backoff: Backoff,
    finished: bool,
}

impl Client {
    /// Starts a resuming watch. Nothing is sent until the first [`Watcher::next`].
    pub fn watch(&self, request: WatchRequest) -> Watcher {
        Watcher {
            client: self.clone(),
            resume_from: request.start_revision,
            request,
            delivered_through: 0,
            stream: None,
            watch_id: None,
            consecutive_reopens: 0,
            reopen_backoff: DEFAULT_FAILOVER_BACKOFF,
            finished: false,
        }
    }
}

/// Why a stream stopped being readable.
enum StreamEnd {
    /// Broken (lost, ended early, silent, or canceled for a reason that allows resuming).
    Broken(String),
    /// Ended for good with this error.
    Final(ClientError),
}

impl Watcher {
    /// The next update, or None after the watch ended with an error it already returned.
    /// Waits as long as it takes for a change (with bookmarks asked for, at most one interval).
    pub async fn next(&mut self) -> Option<Result<WatchUpdate, ClientError>> {
        while !self.finished {
            if self.stream.is_none() {
                if let Err(error) = self.reopen().await {
                    return self.fail(error);
                }
                continue;
            }
            match self.next_message().await {
                Ok(message) => {
                    if let Some(update) = self.handle(message) {
                        return Some(update);
                    }
                }
                Err(StreamEnd::Final(error)) => return self.fail(error),
                Err(StreamEnd::Broken(reason)) => self.drop_stream(&reason),
            }
        }
        None
    }

    /// The revision the watch would resume from now (None before the first `CREATED`).
    pub fn resume_revision(&self) -> Option<u64> {
        self.resume_from
    }

    /// Asks the member serving the open stream for a bookmark now
    /// (`POST /v1/watch/{watch_id}/progress`); it arrives through [`Watcher::next`]. Fails when no
    /// stream is open.
    pub async fn request_progress(&self) -> Result<(), ClientError> {
        let (Some(stream), Some(watch_id)) = (&self.stream, &self.watch_id) else {
            return Err(ClientError::Invalid {
                message: "the watch has no open stream to ask".into(),
            });
        };
        let member = self.client.for_member(&stream.endpoint)?;
        let path = format!("/v1/watch/{}/progress", query_value(watch_id));
        let call = Call::write(reqwest::Method::POST, path, None);
        member
            .transport
            .execute(&call, member.timeout())
            .await
            .map(|_| ())
    }

    fn fail(&mut self, error: ClientError) -> Option<Result<WatchUpdate, ClientError>> {
        self.finished = true;
        self.stream = None;
        Some(Err(error))
    }

    fn drop_stream(&mut self, _reason: &str) {
        if let Some(stream) = self.stream.take() {
            self.client.transport.avoid(&stream.endpoint);
        }
        self.watch_id = None;
    }

    /// Opens the stream again (after a bounded, growing delay if it failed before).
    async fn reopen(&mut self) -> Result<(), ClientError> {
        if self.consecutive_reopens > 0 {
            let delay = self.reopen_backoff.step();
            self.client.transport.sleeper.sleep(delay).await;
        }
        self.consecutive_reopens += 1;
        let call = Call::read(self.request.path_and_query(self.resume_from));
        match self
            .client
            .transport
            .open_stream(&call, self.client.timeout())
            .await
        {
            Ok((response, endpoint)) => {
                self.stream = Some(OpenStream {
                    response,
                    endpoint,
                    pending: Vec::new(),
                });
                Ok(())
            }
            Err(error @ ClientError::Compacted { .. }) => Err(error),
            Err(error) if self.consecutive_reopens >= MOST_CONSECUTIVE_REOPENS => Err(error),
            Err(error) if is_transient(&error) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Applies one message to the position; returns what the caller should see of it.
    fn handle(&mut self, message: WatchMessage) -> Option<Result<WatchUpdate, ClientError>> {
        match message {
            WatchMessage::Created { revision, watch_id } => {
                self.resume_from.get_or_insert(revision + 1);
                self.watch_id = Some(match watch_id {
                    Value::String(text) => text,
                    other => other.to_string(),
                });
                None
            }
            WatchMessage::Events { revision, events } => {
                self.consecutive_reopens = 0;
                self.reopen_backoff = DEFAULT_FAILOVER_BACKOFF;
                if revision <= self.delivered_through {
                    return None;
                }
                self.delivered_through = revision;
                self.resume_from = Some(revision + 1);
                Some(Ok(WatchUpdate::Events { revision, events }))
            }
            WatchMessage::Bookmark { revision } => {
                self.consecutive_reopens = 0;
                self.delivered_through = self.delivered_through.max(revision);
                self.resume_from = Some(self.resume_from.unwrap_or(0).max(revision + 1));
                Some(Ok(WatchUpdate::Bookmark { revision }))
            }
            WatchMessage::Canceled {
                compact_revision: Some(compact_revision),
                reason,
                ..
            } => {
                self.finished = true;
                Some(Err(ClientError::Compacted {
                    compact_revision,
                    message: reason,
                }))
            }
            WatchMessage::Canceled { reason, .. } => {
                self.drop_stream(&reason);
                None
            }
        }
    }

    /// Reads the next complete line of the open stream and parses it.
    async fn next_message(&mut self) -> Result<WatchMessage, StreamEnd> {
        let silence_limit = self.request.progress_notify.map(|interval| interval * 3);
        let stream = self.stream.as_mut().expect("a stream is open");
        loop {
            if let Some(line) = take_line(&mut stream.pending) {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line).map_err(|error| {
                    StreamEnd::Final(ClientError::UnreadableAnswer {
                        message: format!("watch line from {}: {error}", stream.endpoint),
                    })
                });
            }
            if stream.pending.len() > LONGEST_WATCH_LINE_BYTES {
                return Err(StreamEnd::Final(ClientError::TooLarge {
                    message: "a watch message is over the line limit".into(),
                }));
            }
            let chunk = match silence_limit {
                Some(limit) => tokio::time::timeout(limit, stream.response.chunk())
                    .await
                    .map_err(|_| {
                        StreamEnd::Broken("no message for three progress intervals".into())
                    })?,
                None => stream.response.chunk().await,
            };
            match chunk {
                Ok(Some(bytes)) => stream.pending.extend_from_slice(&bytes),
                Ok(None) => return Err(StreamEnd::Broken("the stream ended".into())),
                Err(error) => return Err(StreamEnd::Broken(error.to_string())),
            }
        }
    }
}

/// Errors after which reopening on another member may help.
fn is_transient(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Unavailable { .. } | ClientError::Timeout { .. }
    )
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
    fn lines_are_split_on_newlines_keeping_the_incomplete_rest() {
        let mut pending = b"{\"a\":1}\n{\"b\"".to_vec();
        assert_eq!(take_line(&mut pending), Some(b"{\"a\":1}".to_vec()));
        assert_eq!(take_line(&mut pending), None);
        assert_eq!(pending, b"{\"b\"");
    }

    #[test]
    fn messages_parse_from_the_api_shapes() {
        let created: WatchMessage =
            serde_json::from_str(r#"{"type": "CREATED", "watch_id": "7", "revision": 3}"#).unwrap();
        assert!(matches!(created, WatchMessage::Created { revision: 3, .. }));
        let events: WatchMessage = serde_json::from_str(
            r#"{"type": "EVENTS", "revision": 4, "events": [{"type": "DELETE",
                "kv": {"key": "k", "value": "", "create_revision": 0, "mod_revision": 4,
                "version": 0, "lease": 0}}]}"#,
        )
        .unwrap();
        let WatchMessage::Events { events, .. } = events else {
            panic!("not events");
        };
        assert_eq!(events[0].kind, EventKind::Delete);
        let canceled: WatchMessage = serde_json::from_str(
            r#"{"type": "CANCELED", "reason": "compacted", "compact_revision": 9}"#,
        )
        .unwrap();
        assert!(matches!(
            canceled,
            WatchMessage::Canceled {
                compact_revision: Some(9),
                ..
            }
        ));
    }

    #[test]
    fn the_request_path_carries_the_options() {
        let mut request = WatchRequest::prefix("app/")
            .from_revision(5)
            .with_prev_kv()
            .with_progress_notify(Duration::from_millis(250));
        request.no_put = true;
        assert_eq!(
            request.path_and_query(Some(9)),
            "/v1/watch?key=app%2F&prefix=true&start_revision=9&prev_kv=true&filter=noput\
             &progress_notify_ms=250"
        );
    }
}
