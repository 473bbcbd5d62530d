//! Watch streams that live through the faults: each reads one stream (NDJSON) from a member,
//! records every message into the current segment, and when the stream ends (the member died, was
//! cut off, or canceled it) resumes on another member from the last revision it covered + 1, as
//! the contract says a client should. The segments go to the watch checker; the recording
//! watcher's segments also become the history every checker compares against.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::check::watch::{Message, Segment, WatchSpec};
use super::members::SharedEndpoints;

/// How long a stream may stay silent before the watcher gives up on it and resumes elsewhere
/// (well above the bookmark interval every harness watch asks for).
const SILENCE_TIMEOUT: Duration = Duration::from_secs(5);
/// The bookmark interval every harness watch asks for.
pub const PROGRESS_NOTIFY_MS: u64 = 250;
/// How long to wait before reopening after a failed open.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);
/// The largest line a watch stream may send before the watcher treats it as broken.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// What one watcher recorded, shared with the harness while it runs.
#[derive(Default)]
pub struct WatchRecord {
    pub segments: Vec<Segment>,
    /// A violation noticed while reading (a malformed message, a compaction cancel).
    pub problems: Vec<String>,
    /// When the first event of each revision arrived (the lease checker's upper bound on when
    /// that revision happened).
    pub first_seen: BTreeMap<u64, Instant>,
}

impl WatchRecord {
    /// The revision through which the segments are complete.
    pub fn covered_through(&self) -> u64 {
        self.segments
            .iter()
            .map(Segment::covered_through)
            .max()
            .unwrap_or(0)
    }
}

/// One watcher: `spec` from `start_revision`, over `endpoints` (member id, client URL).
pub struct Watcher {
    pub name: String,
    pub spec: WatchSpec,
    pub record: Arc<Mutex<WatchRecord>>,
}

impl Watcher {
    pub fn new(name: String, spec: WatchSpec) -> Watcher {
        Watcher {
            name,
            spec,
            record: Arc::new(Mutex::new(WatchRecord::default())),
        }
    }

    pub fn covered_through(&self) -> u64 {
        self.record
            .lock()
            .expect("watch record lock")
            .covered_through()
    }
}

/// Runs a watcher until `stop` turns true, starting at `start_revision` on the member at
/// `first_endpoint` and moving to the next endpoint each time a stream ends.
pub async fn run_watcher(
    spec: WatchSpec,
    record: Arc<Mutex<WatchRecord>>,
    endpoints: SharedEndpoints,
    first_endpoint: usize,
    start_revision: u64,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("a plain HTTP client always builds");
    let mut endpoint = first_endpoint;
    let mut next_start = start_revision;
    while !*stop.borrow() {
        let member_url = {
            let endpoints = endpoints.read().expect("endpoints lock");
            endpoints[endpoint % endpoints.len()].1.clone()
        };
        let url = format!(
            "{member_url}{}",
            spec.path_and_query(next_start, PROGRESS_NOTIFY_MS)
        );
        endpoint += 1;
        let segment = Segment {
            start: next_start,
            messages: Vec::new(),
        };
        read_stream(&http, &url, segment, &record, stop.clone()).await;
        let covered = record.lock().expect("watch record lock").covered_through();
        next_start = covered.max(next_start - 1) + 1;
        if !*stop.borrow() {
            tokio::time::sleep(REOPEN_PAUSE).await;
        }
    }
}

/// Reads one stream into `segment` (kept in `record` as it grows) until it ends, breaks, falls
/// silent, or the harness stops. How it ended does not matter: the next stream resumes from what
/// the record covers.
async fn read_stream(
    http: &reqwest::Client,
    url: &str,
    segment: Segment,
    record: &Arc<Mutex<WatchRecord>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Ok(mut answer) = http.get(url).send().await else {
        return;
    };
    if !answer.status().is_success() {
        if answer.status().as_u16() == 410 {
            let body = answer.text().await.unwrap_or_default();
            record_problem(record, format!("opening {url} answered 410: {body}"));
        }
        return;
    }
    let index = {
        let mut shared = record.lock().expect("watch record lock");
        shared.segments.push(segment);
        shared.segments.len() - 1
    };
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            chunk = tokio::time::timeout(SILENCE_TIMEOUT, answer.chunk()) => chunk,
            _ = stop.changed() => return,
        };
        let Ok(Ok(Some(bytes))) = chunk else {
            return;
        };
        pending.extend_from_slice(&bytes);
        if pending.len() > MAX_LINE_BYTES {
            record_problem(
                record,
                format!("a line of over {MAX_LINE_BYTES} bytes from {url}"),
            );
            return;
        }
        while let Some(newline) = pending.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=newline).collect();
            if take_line(&line, url, index, record) == StreamOver::Yes {
                return;
            }
        }
    }
}

#[derive(PartialEq)]
enum StreamOver {
    Yes,
    No,
}

/// Records one NDJSON line; a CANCELED or malformed message ends the stream.
fn take_line(line: &[u8], url: &str, index: usize, record: &Arc<Mutex<WatchRecord>>) -> StreamOver {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return StreamOver::No;
    }
    let parsed = serde_json::from_str::<serde_json::Value>(text)
        .map_err(|error| error.to_string())
        .and_then(|value| Message::from_json(&value));
    let message = match parsed {
        Ok(message) => message,
        Err(error) => {
            record_problem(
                record,
                format!("a malformed message from {url}: {error}: {text}"),
            );
            return StreamOver::Yes;
        }
    };
    let over = match &message {
        Message::Canceled { reason, .. } => {
            if reason == "compacted" {
                record_problem(
                    record,
                    format!("{url} was canceled by a compaction the harness kept below it: {text}"),
                );
            }
            StreamOver::Yes
        }
        _ => StreamOver::No,
    };
    let mut shared = record.lock().expect("watch record lock");
    if let Message::Events { revision, .. } = &message {
        shared
            .first_seen
            .entry(*revision)
            .or_insert_with(Instant::now);
    }
    shared.segments[index].messages.push(message);
    over
}

fn record_problem(record: &Arc<Mutex<WatchRecord>>, problem: String) {
    record
        .lock()
        .expect("watch record lock")
        .problems
        .push(problem);
}

/// Waits until every watcher has covered `revision`, or `timeout` passes; returns the names of
/// those that did not.
pub async fn wait_for_coverage(
    watchers: &[Watcher],
    revision: u64,
    timeout: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let behind: Vec<String> = watchers
            .iter()
            .filter(|watcher| watcher.covered_through() < revision)
            .map(|watcher| format!("{} (through {})", watcher.name, watcher.covered_through()))
            .collect();
        if behind.is_empty() || Instant::now() >= deadline {
            return behind;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
