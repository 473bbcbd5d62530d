//! `revkv bench watch`: event delivery latency. `--watchers W` streams watch one fresh prefix
//! (spread round-robin over `--endpoints`), one writer puts keys under it at a steady
//! `--write-rate`, and each event's latency is the time from the write's acknowledgement to the
//! event's arrival on a stream. An event that arrives before its write is acknowledged counts as
//! zero (the two race: both follow the same apply).
//!
//! revkv is watched with `GET /v1/watch?key=P&prefix=true` (NDJSON); etcd 3.4 with its JSON
//! gateway's `POST /v3/watch`, which streams one JSON object per line as well; etcd (or revkv's
//! etcd gRPC port) with `--target etcd-grpc` over gRPC Watch streams (`watch_grpc.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::options::{WatchLatencyPlan, MOST_WATCHERS};
use super::report::{new_latency_histogram, LatencySummary};
use super::target::TargetKind;
use super::watch_arrivals::{stale, Arrivals, SETTLE_TIMEOUT};
use super::watch_grpc;
use crate::etcd_api::{ConnectOptions, EtcdClient, KvClient};

/// The HTTP paths below are never taken for `--target etcd-grpc`, which `watch_grpc` serves.
const NOT_HTTP: &str = "etcd-grpc is watched over gRPC, not HTTP";

/// What a watch-latency run measured.
#[derive(Serialize, Debug, Clone)]
pub struct WatchLatencyReport {
    pub target: TargetKind,
    pub watchers: usize,
    pub write_rate: u32,
    pub writes_acknowledged: u64,
    pub write_failures: u64,
    /// `writes_acknowledged * watchers`: every watcher should see every write.
    pub events_expected: u64,
    pub events_received: u64,
    pub events_before_ack: u64,
    pub setup_seconds: f64,
    /// `--target etcd-grpc`: the Watch streams the watches rode, and the connections they shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_streams: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_connections: Option<usize>,
    pub latency: LatencySummary,
}

/// The tasks following the watches; each answers the arrivals of every watch it followed.
type WatchTasks = Vec<JoinHandle<Result<Vec<Arrivals>, String>>>;

/// Runs the benchmark and reports.
pub async fn run(plan: &WatchLatencyPlan) -> Result<WatchLatencyReport, String> {
    assert!(plan.watchers > 0 && plan.watchers <= MOST_WATCHERS);
    let prefix = format!("bench/watch/{}/", plan.run_tag);
    let setup_started = Instant::now();
    let (last_revision_sender, last_revision) = watch::channel(None::<u64>);
    let created = Arc::new(tokio::sync::Semaphore::new(0));
    let watchers = match plan.target {
        TargetKind::EtcdGrpc => {
            let clients = watch_grpc::connect(plan).await?;
            watch_grpc::spawn_streams(plan, &clients, &prefix, &created, &last_revision)
        }
        TargetKind::Revkv | TargetKind::Etcd => {
            let client = watch_client_keeping_no_idle_connections(plan)?;
            spawn_watchers(plan, &client, &prefix, &created, &last_revision)
        }
    };
    wait_until_every_watch_is_created(plan.watchers, &created).await?;
    let setup_seconds = setup_started.elapsed().as_secs_f64();
    eprintln!(
        "revkv bench watch: {} watches open after {setup_seconds:.1}s; writing",
        plan.watchers
    );
    let writes = write_steadily(plan, &prefix).await?;
    // Revision 0 when no write was acknowledged: the watches then stop once they go quiet,
    // instead of waiting for a revision that never comes.
    let last_written = writes.acks.keys().max().copied().unwrap_or(0);
    last_revision_sender.send_replace(Some(last_written));
    let (histogram, received, early) = latencies_of_every_watcher(watchers, &writes.acks).await?;
    let acknowledged = writes.acks.len() as u64;
    let grpc = plan.target == TargetKind::EtcdGrpc;
    Ok(WatchLatencyReport {
        target: plan.target,
        watchers: plan.watchers,
        write_rate: plan.write_rate,
        writes_acknowledged: acknowledged,
        write_failures: writes.failures,
        events_expected: acknowledged * plan.watchers as u64,
        events_received: received,
        events_before_ack: early,
        setup_seconds,
        grpc_streams: grpc.then(|| watch_grpc::stream_count(plan)),
        grpc_connections: grpc.then_some(plan.grpc_connections),
        latency: LatencySummary::from_histogram(&histogram),
    })
}

/// The client the watch streams share: the plan's TLS, and no idle connections kept in its pool.
fn watch_client_keeping_no_idle_connections(
    plan: &WatchLatencyPlan,
) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder().pool_max_idle_per_host(0);
    plan.tls
        .configure(builder)
        .map_err(|error| error.to_string())?
        .build()
        .map_err(|error| error.to_string())
}

/// Starts the plan's watch streams on `prefix`, round-robin over the endpoints. Each adds a
/// permit to `created` once its watch is created, and stops once it has seen the revision that
/// `last_revision` names after the writes.
fn spawn_watchers(
    plan: &WatchLatencyPlan,
    client: &reqwest::Client,
    prefix: &str,
    created: &Arc<tokio::sync::Semaphore>,
    last_revision: &watch::Receiver<Option<u64>>,
) -> WatchTasks {
    let mut watchers = Vec::with_capacity(plan.watchers);
    for index in 0..plan.watchers {
        let endpoint = plan.endpoints[index % plan.endpoints.len()].clone();
        let watch = follow_watch(
            client.clone(),
            plan.target,
            endpoint,
            prefix.to_string(),
            created.clone(),
            last_revision.clone(),
        );
        watchers.push(tokio::spawn(
            async move { watch.await.map(|one| vec![one]) },
        ));
    }
    watchers
}

/// Waits (at most [`SETTLE_TIMEOUT`]) until all `watch_count` watches are created, so that no
/// write happens before a watch could see it.
async fn wait_until_every_watch_is_created(
    watch_count: usize,
    created: &tokio::sync::Semaphore,
) -> Result<(), String> {
    let all_created = created.acquire_many(watch_count as u32);
    tokio::time::timeout(SETTLE_TIMEOUT, all_created)
        .await
        .map_err(|_| format!("not all {watch_count} watches were created in time"))?
        .map_err(|error| error.to_string())?
        .forget();
    Ok(())
}

/// Waits for every watcher to end and adds up their latencies against the writes'
/// acknowledgements: the histogram, the events received, and those that arrived before their
/// acknowledgement. The first watcher that failed (in the order they were started) fails the run.
async fn latencies_of_every_watcher(
    watchers: WatchTasks,
    acks: &HashMap<u64, Instant>,
) -> Result<(Histogram<u64>, u64, u64), String> {
    let mut histogram = new_latency_histogram();
    let mut totals = (0u64, 0u64);
    for watcher in watchers {
        let followed = watcher
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| format!("a watch failed: {error}"))?;
        for arrivals in &followed {
            let (received, early) = record_latencies(arrivals, acks, &mut histogram);
            totals.0 += received;
            totals.1 += early;
        }
    }
    Ok((histogram, totals.0, totals.1))
}

/// Adds one watcher's latencies; answers (events matched to an acknowledged write, early ones).
fn record_latencies(
    arrivals: &Arrivals,
    acks: &HashMap<u64, Instant>,
    histogram: &mut Histogram<u64>,
) -> (u64, u64) {
    let (mut received, mut early) = (0, 0);
    for (revision, arrived) in arrivals {
        let Some(acknowledged) = acks.get(revision) else {
            continue;
        };
        received += 1;
        let latency = arrived.saturating_duration_since(*acknowledged);
        early += u64::from(latency.is_zero());
        let micros = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        histogram.saturating_record(micros);
    }
    (received, early)
}

struct Writes {
    /// Acknowledgement time of each written revision.
    acks: HashMap<u64, Instant>,
    failures: u64,
}

/// Puts keys under `prefix` at the plan's rate for its duration, one at a time.
async fn write_steadily(plan: &WatchLatencyPlan, prefix: &str) -> Result<Writes, String> {
    let mut writer = Writer::connect(plan).await?;
    let period = Duration::from_secs_f64(1.0 / f64::from(plan.write_rate.max(1)));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let deadline = Instant::now() + plan.duration;
    let value = "v".repeat(plan.value_size);
    let mut acks = HashMap::new();
    let mut failures = 0;
    let mut sequence = 0u64;
    while Instant::now() < deadline {
        ticks.tick().await;
        sequence += 1;
        let key = format!("{prefix}{sequence}");
        match writer.put(&key, &value).await {
            Ok(revision) => {
                acks.insert(revision, Instant::now());
            }
            Err(_) => failures += 1,
        }
    }
    Ok(Writes { acks, failures })
}

/// The watch workload's one writer: over HTTP, or over its own gRPC connection.
enum Writer {
    Http {
        client: reqwest::Client,
        target: TargetKind,
        endpoint: String,
    },
    // Boxed: a tonic client handle is several times the HTTP variant's size.
    Grpc(Box<KvClient>),
}

impl Writer {
    /// A writer to the plan's first endpoint.
    async fn connect(plan: &WatchLatencyPlan) -> Result<Writer, String> {
        let endpoint = plan.endpoints[0].clone();
        if plan.target == TargetKind::EtcdGrpc {
            let client = EtcdClient::connect(&[&endpoint], ConnectOptions::new())
                .await
                .map_err(|error| format!("cannot make a gRPC client of {endpoint}: {error}"))?;
            return Ok(Writer::Grpc(Box::new(client.kv())));
        }
        let client = plan
            .tls
            .configure(reqwest::Client::builder())
            .map_err(|error| error.to_string())?
            .build()
            .map_err(|error| error.to_string())?;
        Ok(Writer::Http {
            client,
            target: plan.target,
            endpoint,
        })
    }

    /// One put; answers the revision it created.
    async fn put(&mut self, key: &str, value: &str) -> Result<u64, String> {
        match self {
            Writer::Http {
                client,
                target,
                endpoint,
            } => put(client, *target, endpoint, key, value).await,
            Writer::Grpc(kv) => watch_grpc::put(kv, key, value).await,
        }
    }
}

/// One put over HTTP; answers the revision it created.
async fn put(
    client: &reqwest::Client,
    target: TargetKind,
    endpoint: &str,
    key: &str,
    value: &str,
) -> Result<u64, String> {
    let request = match target {
        TargetKind::Revkv => client
            .put(format!("{endpoint}/v1/kv/{key}"))
            .json(&json!({ "value": value })),
        TargetKind::Etcd => client
            .post(format!("{endpoint}/v3/kv/put"))
            .json(&json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) })),
        TargetKind::EtcdGrpc => return Err(NOT_HTTP.into()),
    };
    let answer: serde_json::Value = request
        .send()
        .await
        .and_then(|response| response.error_for_status())
        .map_err(|error| error.to_string())?
        .json()
        .await
        .map_err(|error| error.to_string())?;
    revision_number(&answer["header"]["revision"]).ok_or_else(|| format!("no revision in {answer}"))
}

/// revkv writes revisions as numbers, etcd's gateway as strings.
fn revision_number(value: &serde_json::Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|text| text.parse().ok()))
}

/// Opens one watch, reports its creation, and records each event's arrival until it has seen the
/// last written revision.
async fn follow_watch(
    client: reqwest::Client,
    target: TargetKind,
    endpoint: String,
    prefix: String,
    created: Arc<tokio::sync::Semaphore>,
    last_revision: watch::Receiver<Option<u64>>,
) -> Result<Arrivals, String> {
    let request = match target {
        TargetKind::Revkv => client.get(format!(
            "{endpoint}/v1/watch?key={prefix}&prefix=true&progress_notify_ms=0"
        )),
        TargetKind::Etcd => {
            let range_end = prefix_end(prefix.as_bytes());
            client.post(format!("{endpoint}/v3/watch")).json(&json!({
                "create_request": {"key": BASE64.encode(&prefix), "range_end": BASE64.encode(range_end)}
            }))
        }
        TargetKind::EtcdGrpc => return Err(NOT_HTTP.into()),
    };
    let mut response = request
        .send()
        .await
        .and_then(|response| response.error_for_status())
        .map_err(|error| error.to_string())?;
    let mut arrivals = Arrivals::new();
    let mut buffered = Vec::new();
    let mut announced = false;
    loop {
        while let Some(end) = buffered.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = buffered.drain(..=end).collect();
            match parse_line(target, &line)? {
                Line::Created if !announced => {
                    announced = true;
                    created.add_permits(1);
                }
                Line::Events(revision) => arrivals.push((revision, Instant::now())),
                _ => {}
            }
        }
        let last_seen = arrivals.last().map(|(revision, _)| *revision);
        if let Some(last) = *last_revision.borrow() {
            if last_seen.is_some_and(|seen| seen >= last) {
                return Ok(arrivals);
            }
        }
        // Wake up regularly to notice the end of the run even when no event comes.
        match tokio::time::timeout(Duration::from_millis(200), response.chunk()).await {
            Ok(Ok(Some(chunk))) => buffered.extend_from_slice(&chunk),
            Ok(Ok(None)) => return Err("the stream ended".into()),
            Ok(Err(error)) => return Err(error.to_string()),
            Err(_) if last_revision.borrow().is_some() && stale(&arrivals) => return Ok(arrivals),
            Err(_) => {}
        }
    }
}

enum Line {
    Created,
    Events(u64),
    Other,
}

#[derive(Deserialize)]
struct RevkvLine {
    #[serde(rename = "type")]
    kind: String,
    revision: Option<u64>,
}

/// Reads what the benchmark needs from one stream line.
fn parse_line(target: TargetKind, line: &[u8]) -> Result<Line, String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(Line::Other);
    }
    match target {
        TargetKind::Revkv => {
            let parsed: RevkvLine =
                serde_json::from_slice(line).map_err(|error| error.to_string())?;
            Ok(match (parsed.kind.as_str(), parsed.revision) {
                ("CREATED", _) => Line::Created,
                ("EVENTS", Some(revision)) => Line::Events(revision),
                _ => Line::Other,
            })
        }
        TargetKind::EtcdGrpc => Err(NOT_HTTP.into()),
        TargetKind::Etcd => {
            let parsed: serde_json::Value =
                serde_json::from_slice(line).map_err(|error| error.to_string())?;
            let result = &parsed["result"];
            if result["created"] == true {
                return Ok(Line::Created);
            }
            Ok(
                match revision_number(&result["events"][0]["kv"]["mod_revision"]) {
                    Some(revision) => Line::Events(revision),
                    None => Line::Other,
                },
            )
        }
    }
}

/// The smallest key after every key starting with `prefix` (etcd's prefix range end).
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
    fn stream_lines_of_both_systems_are_read() {
        let created = br#"{"type":"CREATED","watch_id":"1","revision":5}"#;
        assert!(matches!(
            parse_line(TargetKind::Revkv, created),
            Ok(Line::Created)
        ));
        let events = br#"{"type":"EVENTS","revision":7,"events":[]}"#;
        assert!(matches!(
            parse_line(TargetKind::Revkv, events),
            Ok(Line::Events(7))
        ));
        let etcd_created = br#"{"result":{"header":{"revision":"5"},"created":true}}"#;
        assert!(matches!(
            parse_line(TargetKind::Etcd, etcd_created),
            Ok(Line::Created)
        ));
        let etcd_events =
            br#"{"result":{"header":{"revision":"9"},"events":[{"kv":{"mod_revision":"9"}}]}}"#;
        assert!(matches!(
            parse_line(TargetKind::Etcd, etcd_events),
            Ok(Line::Events(9))
        ));
    }

    #[test]
    fn latencies_count_early_events_as_zero_and_skip_unknown_revisions() {
        let start = Instant::now();
        let acks = HashMap::from([(2, start + Duration::from_millis(5)), (3, start)]);
        let arrivals = vec![
            (2, start),                             // before its ack
            (3, start + Duration::from_millis(2)),  // 2 ms after
            (99, start + Duration::from_millis(1)), // not a write of this run
        ];
        let mut histogram = new_latency_histogram();
        let (received, early) = record_latencies(&arrivals, &acks, &mut histogram);
        assert_eq!((received, early), (2, 1));
        assert_eq!(histogram.len(), 2);
        assert!(histogram.max() >= 2_000);
    }

    #[test]
    fn prefix_ends_follow_etcd() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
