//! The watch workload's watchers: `--watchers` streams on the run's prefix, opened (and confirmed
//! created) before the writers start, each timing every event it receives.
//!
//! Every value the writers send starts with a stamp: the microseconds since this process's
//! [`stamp_epoch`], as 20 decimal digits. A watcher takes the stamp out of each event's value, so
//! an event's latency is the time from sending its write to this watcher having parsed it; writers
//! and watchers share the process's clock, so no clock skew enters.
//!
//! - revkv: `GET /v1/watch?key=P&prefix=true`, NDJSON (`shared/spec/API.md` section 5); ready on
//!   `CREATED`.
//! - etcd (v3 JSON gateway): `POST /v3/watch` with `{"create_request": {"key", "range_end"}}`, one
//!   JSON object per line, each `{"result": {...}}`; ready on `"created": true`.
//!
//! After the writers finish, the watchers get until every acknowledged write's event has reached
//! every watcher, or a drain limit, whichever comes first; events still missing are reported.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hdrhistogram::Histogram;
use reqwest::header::CONTENT_TYPE;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::driver::{endpoint_for_client, new_latency_histogram};
use super::target::{json_bytes, TargetKind};

/// Digits of a value's stamp.
pub const STAMP_DIGITS: usize = 20;

/// How long the watchers may take after the writers finished to receive the last events.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The longest line a watcher accepts (one revision's events; the writers write one key each).
pub const LONGEST_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The instant stamps count from: the first time any stamp is asked for in this process.
pub fn stamp_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn micros_since_epoch() -> u64 {
    u64::try_from(stamp_epoch().elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A value of at least `size` (and at least [`STAMP_DIGITS`]) printable bytes that starts with
/// the current stamp.
pub fn stamped_value(size: usize) -> Arc<[u8]> {
    let mut value = format!("{:0width$}", micros_since_epoch(), width = STAMP_DIGITS).into_bytes();
    value.extend((value.len()..size).map(|position| b'a' + (position % 26) as u8));
    value.into()
}

/// The stamp a value starts with.
pub fn stamp_of(value: &[u8]) -> Option<u64> {
    let digits = value.get(..STAMP_DIGITS)?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// What one line of a watch stream says.
#[derive(Debug, PartialEq, Eq)]
pub enum WatchLine {
    /// The watch exists: events of later writes will come.
    Created,
    /// The values of the events it carries.
    Values(Vec<Vec<u8>>),
    /// Anything else (bookmarks, headers, progress).
    Other,
}

/// Reads one line of `target`'s watch stream.
pub fn parse_watch_line(target: TargetKind, line: &[u8]) -> Result<WatchLine, String> {
    let document: Value =
        serde_json::from_slice(line).map_err(|error| format!("unreadable watch line: {error}"))?;
    match target {
        TargetKind::Revkv => Ok(revkv_watch_line(&document)),
        TargetKind::Etcd => etcd_watch_line(&document),
    }
}

fn revkv_watch_line(document: &Value) -> WatchLine {
    match document["type"].as_str() {
        Some("CREATED") => WatchLine::Created,
        Some("EVENTS") => WatchLine::Values(
            events_of(document)
                .filter_map(|event| event["kv"]["value"].as_str())
                .map(|value| value.as_bytes().to_vec())
                .collect(),
        ),
        _ => WatchLine::Other,
    }
}

fn etcd_watch_line(document: &Value) -> Result<WatchLine, String> {
    let result = &document["result"];
    if result.is_null() {
        return Err(format!("etcd watch error: {document}"));
    }
    if result["created"].as_bool() == Some(true) {
        return Ok(WatchLine::Created);
    }
    let values = events_of(result)
        .filter_map(|event| event["kv"]["value"].as_str())
        .filter_map(|value| BASE64.decode(value).ok())
        .collect::<Vec<_>>();
    Ok(if values.is_empty() {
        WatchLine::Other
    } else {
        WatchLine::Values(values)
    })
}

fn events_of(document: &Value) -> impl Iterator<Item = &Value> {
    document["events"].as_array().into_iter().flatten()
}

/// What the watchers measured, all together.
#[derive(Debug)]
pub struct WatcherTotals {
    pub latencies_micros: Histogram<u64>,
    pub events_received: u64,
    pub failures: Vec<String>,
}

/// The running watchers: [`start_watchers`] makes them, [`RunningWatchers::finish`] ends them.
pub struct RunningWatchers {
    tasks: JoinSet<(Histogram<u64>, Option<String>)>,
    received: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    count: usize,
}

/// Opens `count` watchers of `prefix` spread over `endpoints` and waits (at most `open_limit`)
/// until every one is created.
pub async fn start_watchers(
    target: TargetKind,
    endpoints: &[String],
    prefix: &str,
    count: usize,
    open_limit: Duration,
) -> Result<RunningWatchers, String> {
    let http = reqwest::Client::builder()
        .connect_timeout(open_limit)
        .tcp_nodelay(true)
        .build()
        .map_err(|error| format!("cannot build an HTTP client: {error}"))?;
    let received = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = watch::channel(false);
    let (ready_sender, mut ready) = mpsc::channel(count.max(1));
    let mut tasks = JoinSet::new();
    for index in 0..count {
        let stream = WatchStream {
            http: http.clone(),
            target,
            endpoint: endpoint_for_client(endpoints, index).to_string(),
            prefix: prefix.to_string(),
            received: Arc::clone(&received),
            stopped: stopped.clone(),
            ready: ready_sender.clone(),
        };
        tasks.spawn(stream.run());
    }
    drop(ready_sender);
    let deadline = tokio::time::Instant::now() + open_limit;
    for opened in 0..count {
        match tokio::time::timeout_at(deadline, ready.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(problem))) => return Err(problem),
            _ => return Err(format!("only {opened} of {count} watchers opened in time")),
        }
    }
    Ok(RunningWatchers {
        tasks,
        received,
        stop,
        count,
    })
}

impl RunningWatchers {
    /// Waits until every watcher received `writes` events or [`DRAIN_LIMIT`] passed, then ends
    /// the watchers and adds up what they measured.
    pub async fn finish(mut self, writes: u64) -> WatcherTotals {
        let expected = writes.saturating_mul(self.count as u64);
        let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
        let mut poll = tokio::time::interval(Duration::from_millis(10));
        while self.received.load(Ordering::Relaxed) < expected
            && tokio::time::Instant::now() < deadline
        {
            poll.tick().await;
        }
        let _ = self.stop.send(true);
        let mut totals = WatcherTotals {
            latencies_micros: new_latency_histogram(),
            events_received: self.received.load(Ordering::Relaxed),
            failures: Vec::new(),
        };
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok((latencies, failure)) => {
                    totals
                        .latencies_micros
                        .add(&latencies)
                        .expect("histograms with the same bounds add up");
                    totals.failures.extend(failure);
                }
                Err(error) => totals
                    .failures
                    .push(format!("a watcher task ended: {error}")),
            }
        }
        totals
    }
}

/// One watcher.
struct WatchStream {
    http: reqwest::Client,
    target: TargetKind,
    endpoint: String,
    prefix: String,
    received: Arc<AtomicU64>,
    stopped: watch::Receiver<bool>,
    ready: mpsc::Sender<Result<(), String>>,
}

impl WatchStream {
    /// Reads the stream until stopped; answers its latencies and why it failed, if it did.
    async fn run(mut self) -> (Histogram<u64>, Option<String>) {
        let mut latencies = new_latency_histogram();
        let failure = self.read_events(&mut latencies).await.err();
        if let Some(problem) = &failure {
            let _ = self.ready.try_send(Err(problem.clone()));
        }
        (latencies, failure)
    }

    async fn read_events(&mut self, latencies: &mut Histogram<u64>) -> Result<(), String> {
        let mut response = self.open().await?;
        let mut pending = Vec::new();
        loop {
            let chunk = tokio::select! {
                _ = self.stopped.changed() => return Ok(()),
                chunk = response.chunk() => chunk,
            };
            match chunk.map_err(|error| format!("watch stream from {}: {error}", self.endpoint))? {
                Some(bytes) => pending.extend_from_slice(&bytes),
                None => return Err(format!("the watch stream from {} ended", self.endpoint)),
            }
            while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                self.handle_line(&line[..line.len() - 1], latencies).await?;
            }
            if pending.len() > LONGEST_LINE_BYTES {
                return Err("a watch line is over the limit".into());
            }
        }
    }

    async fn handle_line(&self, line: &[u8], latencies: &mut Histogram<u64>) -> Result<(), String> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        match parse_watch_line(self.target, line)? {
            WatchLine::Created => {
                let _ = self.ready.send(Ok(())).await;
            }
            WatchLine::Values(values) => {
                let now = micros_since_epoch();
                for value in values {
                    if let Some(stamp) = stamp_of(&value) {
                        latencies.saturating_record(now.saturating_sub(stamp).max(1));
                        self.received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            WatchLine::Other => {}
        }
        Ok(())
    }

    async fn open(&self) -> Result<reqwest::Response, String> {
        let request = match self.target {
            TargetKind::Revkv => self.http.get(format!(
                "{}/v1/watch?key={}&prefix=true",
                self.endpoint, self.prefix
            )),
            TargetKind::Etcd => self
                .http
                .post(format!("{}/v3/watch", self.endpoint))
                .header(CONTENT_TYPE, "application/json")
                .body(json_bytes(&etcd_create_request(&self.prefix))),
        };
        let response = request
            .send()
            .await
            .map_err(|error| format!("cannot open a watch on {}: {error}", self.endpoint))?;
        if !response.status().is_success() {
            return Err(format!(
                "{} answered {} to a watch",
                self.endpoint,
                response.status()
            ));
        }
        Ok(response)
    }
}

/// etcd's request to watch every key under `prefix`.
pub fn etcd_create_request(prefix: &str) -> Value {
    json!({
        "create_request": {
            "key": BASE64.encode(prefix),
            "range_end": BASE64.encode(prefix_end(prefix.as_bytes())),
        }
    })
}

/// The first key after every key that starts with `prefix` (etcd's range end of a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_lead_the_value_and_read_back() {
        let value = stamped_value(64);
        assert_eq!(value.len(), 64);
        let stamp = stamp_of(&value).unwrap();
        assert!(stamp <= micros_since_epoch());
        assert_eq!(stamped_value(4).len(), STAMP_DIGITS, "a stamp always fits");
        assert_eq!(stamp_of(b"12"), None);
    }

    #[test]
    fn revkv_lines_are_read() {
        let created = br#"{"type": "CREATED", "watch_id": "1", "revision": 3}"#;
        assert_eq!(
            parse_watch_line(TargetKind::Revkv, created),
            Ok(WatchLine::Created)
        );
        let events = br#"{"type": "EVENTS", "revision": 4, "events": [{"type": "PUT",
            "kv": {"key": "k", "value": "00000000000000000042aa", "mod_revision": 4}}]}"#;
        assert_eq!(
            parse_watch_line(TargetKind::Revkv, events),
            Ok(WatchLine::Values(vec![b"00000000000000000042aa".to_vec()]))
        );
        let bookmark = br#"{"type": "BOOKMARK", "revision": 4}"#;
        assert_eq!(
            parse_watch_line(TargetKind::Revkv, bookmark),
            Ok(WatchLine::Other)
        );
    }

    #[test]
    fn etcd_lines_are_read() {
        let created = br#"{"result": {"header": {"revision": "3"}, "created": true}}"#;
        assert_eq!(
            parse_watch_line(TargetKind::Etcd, created),
            Ok(WatchLine::Created)
        );
        let events = br#"{"result": {"header": {}, "events": [{"kv": {"key": "aw==",
            "value": "NDI=", "mod_revision": "4"}}]}}"#;
        assert_eq!(
            parse_watch_line(TargetKind::Etcd, events),
            Ok(WatchLine::Values(vec![b"42".to_vec()]))
        );
        assert!(parse_watch_line(TargetKind::Etcd, br#"{"error": {"message": "m"}}"#).is_err());
    }

    #[test]
    fn etcd_prefix_ends_increment_the_last_byte() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b""), vec![0]);
        let request = etcd_create_request("w/");
        assert_eq!(request["create_request"]["range_end"], BASE64.encode("w0"));
    }
}
