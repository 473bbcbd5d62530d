//! The measurement behind `scripts/bench-controller.sh` (issue 64): a controller process (the Rust
//! `replica_controller serve`, or its client-go twin in `cluster/go/controller-bench`) keeps
//! `--objects` replica sets, and this driver changes their specs at a steady `--rate` for
//! `--duration` seconds and times each change from the moment its write was sent to the moment a
//! watch sees a status whose `observedGeneration` reaches it. Both controllers get the same data,
//! the same load and the same measurement; only the controller differs.
//!
//! Also: the controller's resident memory before its first list (empty prefix) and after the
//! initial convergence, divided by the keys it caches; the spec writers' conflicts (they race the
//! controller's status writes); and the controller's own counts, from its last output line.
//!
//! usage: controller_bench --objects N --rate PER_SECOND --duration SECONDS --label NAME
//!                         -- CONTROLLER COMMAND...      (REVKV_ENDPOINTS: the members' HTTP URLs)

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use revkv_client::{
    Client, ClientError, DeleteRequest, PutRequest, RangeRequest, WatchRequest, WatchUpdate,
};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::Semaphore;

const SETS_PREFIX: &str = "examples/controller/sets/";
const PREFIX: &str = "examples/controller/";
const INITIAL_REPLICAS: u64 = 2;
/// Spec writes in flight at once; a tick finding none free is counted as skipped.
const MOST_WRITES_IN_FLIGHT: usize = 256;
const CONVERGENCE_DEADLINE: Duration = Duration::from_secs(300);

struct Arguments {
    objects: u64,
    rate: u64,
    duration: Duration,
    label: String,
    controller: Vec<String>,
}

fn parse_arguments() -> Result<Arguments, String> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let split = all
        .iter()
        .position(|a| a == "--")
        .ok_or("no -- CONTROLLER COMMAND")?;
    let (flags, controller) = (&all[..split], all[split + 1..].to_vec());
    let flag = |name: &str| -> Result<String, String> {
        let at = flags
            .iter()
            .position(|f| f == name)
            .ok_or(format!("{name} is missing"))?;
        flags
            .get(at + 1)
            .cloned()
            .ok_or(format!("{name} needs a value"))
    };
    let number = |name: &str| -> Result<u64, String> {
        flag(name)?.parse().map_err(|e| format!("{name}: {e}"))
    };
    if controller.is_empty() {
        return Err("the controller command is empty".into());
    }
    Ok(Arguments {
        objects: number("--objects")?,
        rate: number("--rate")?.max(1),
        duration: Duration::from_secs(number("--duration")?),
        label: flag("--label")?,
        controller,
    })
}

/// The controller's resident set size in KiB (Linux).
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (status.lines())
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn next_line(stdout: &mut BufReader<ChildStdout>) -> Result<String, String> {
    let mut line = String::new();
    match stdout.read_line(&mut line).await {
        Ok(0) => Err("the controller ended early".into()),
        Ok(_) => Ok(line.trim().to_string()),
        Err(error) => Err(format!("reading the controller: {error}")),
    }
}

/// Counts the sets whose status reflects their generation with as many replicas ready as wanted.
async fn converged_sets(client: &Client) -> Result<u64, ClientError> {
    let mut pages = client.range_pages(RangeRequest::prefix(SETS_PREFIX).limit(1000));
    let mut converged = 0;
    while let Some(page) = pages.next_page().await {
        for kv in page?.kvs {
            let value: Value = serde_json::from_str(&kv.value).unwrap_or(Value::Null);
            let generation = value
                .pointer("/metadata/generation")
                .and_then(Value::as_u64);
            let observed = value
                .pointer("/status/observedGeneration")
                .and_then(Value::as_u64);
            let ready = value.pointer("/status/ready").and_then(Value::as_u64);
            let wanted = value.pointer("/spec/replicas").and_then(Value::as_u64);
            converged +=
                u64::from(observed >= generation && generation.is_some() && ready == wanted);
        }
    }
    Ok(converged)
}

/// Writes and observations per key, to pair each acknowledged generation with its observation.
#[derive(Default)]
struct Timings {
    /// Per key: (generation, when its write was sent), not yet observed.
    pending: HashMap<String, Vec<(u64, Instant)>>,
    /// Per key: the highest observed generation, and when it was first seen.
    observed: HashMap<String, Vec<(u64, Instant)>>,
    latencies: Vec<Duration>,
}

impl Timings {
    fn acknowledged(&mut self, key: &str, generation: u64, sent: Instant) {
        let seen = (self.observed.get(key).into_iter().flatten())
            .find(|(observed, _)| *observed >= generation)
            .map(|&(_, at)| at);
        match seen {
            Some(at) => self.latencies.push(at.saturating_duration_since(sent)),
            None => self
                .pending
                .entry(key.to_string())
                .or_default()
                .push((generation, sent)),
        }
    }

    fn observed(&mut self, key: &str, observed: u64, at: Instant) {
        let history = self.observed.entry(key.to_string()).or_default();
        if history.last().is_none_or(|&(last, _)| last < observed) {
            history.push((observed, at));
        }
        if let Some(pending) = self.pending.get_mut(key) {
            let (done, waiting): (Vec<_>, Vec<_>) = pending
                .drain(..)
                .partition(|(generation, _)| *generation <= observed);
            self.latencies.extend(
                done.into_iter()
                    .map(|(_, sent)| at.saturating_duration_since(sent)),
            );
            *pending = waiting;
        }
    }

    fn unobserved(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }
}

/// One spec change of `key`: read, bump the generation, set a new replica count, write with the
/// revision read; conflicts are retried. Answers (generation, when the winning write was sent,
/// conflicts met).
async fn change_spec(
    client: &Client,
    key: &str,
    replicas: u64,
) -> Result<(u64, Instant, u64), ClientError> {
    let mut conflicts = 0;
    loop {
        let read = client.get(key).await?.kv;
        let mut value: Value = serde_json::from_str(&read.value).unwrap_or(Value::Null);
        let generation = value
            .pointer("/metadata/generation")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            + 1;
        value["metadata"]["generation"] = json!(generation);
        value["spec"]["replicas"] = json!(replicas);
        let writes = value
            .pointer("/spec/writes")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        value["spec"]["writes"] = json!(writes + 1);
        let sent = Instant::now();
        let write = PutRequest::new(key, value.to_string()).if_mod_revision(read.mod_revision);
        match client.put_with(&write).await {
            Ok(_) => return Ok((generation, sent, conflicts)),
            Err(error) if error.is_conflict() && conflicts < 100 => conflicts += 1,
            Err(error) => return Err(error),
        }
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

async fn start_controller(command: &[String]) -> Result<(Child, BufReader<ChildStdout>), String> {
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("starting {command:?}: {error}"))?;
    let stdout = BufReader::new(child.stdout.take().expect("piped"));
    Ok((child, stdout))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments = parse_arguments().map_err(|message| format!("controller_bench: {message}"))?;
    let client = Client::new(revkv_client::endpoints_from_environment())?;
    client.delete(&DeleteRequest::prefix(PREFIX)).await?;

    let (mut controller, mut stdout) = start_controller(&arguments.controller).await?;
    let pid = controller.id().ok_or("the controller has no pid")?;
    let synced = next_line(&mut stdout).await?;
    if !synced.starts_with("synced") {
        return Err(format!("the controller said {synced:?}, not synced").into());
    }
    let rss_empty = resident_kib(pid);

    let initial_start = Instant::now();
    let creators = Arc::new(Semaphore::new(64));
    let mut creations = Vec::new();
    for index in 0..arguments.objects {
        let permit = Arc::clone(&creators).acquire_owned().await?;
        let client = client.clone();
        creations.push(tokio::spawn(async move {
            let value = json!({"metadata": {"generation": 1},
                               "spec": {"replicas": INITIAL_REPLICAS, "writes": 1}});
            let key = format!("{SETS_PREFIX}set{index:06}");
            let created = client
                .put_with(&PutRequest::new(key, value.to_string()).if_absent())
                .await;
            drop(permit);
            created.map(|_| ())
        }));
    }
    for creation in creations {
        creation.await??;
    }
    let give_up = Instant::now() + CONVERGENCE_DEADLINE;
    while converged_sets(&client).await? < arguments.objects {
        if Instant::now() > give_up {
            return Err("the initial sets did not converge".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let initial_convergence = initial_start.elapsed();
    let rss_synced = resident_kib(pid);
    let cached_keys = arguments.objects * (1 + INITIAL_REPLICAS);

    let timings = Arc::new(Mutex::new(Timings::default()));
    let start_revision = client
        .get("examples/controller/sets/set000000")
        .await?
        .header
        .revision
        + 1;
    let mut watcher = client.watch(WatchRequest::prefix(SETS_PREFIX).from_revision(start_revision));
    let watched = Arc::clone(&timings);
    let watching = tokio::spawn(async move {
        while let Some(Ok(update)) = watcher.next().await {
            let WatchUpdate::Events { events, .. } = update else {
                continue;
            };
            let now = Instant::now();
            for event in events {
                let value: Value = serde_json::from_str(&event.kv.value).unwrap_or(Value::Null);
                if let Some(observed) = value
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_u64)
                {
                    watched
                        .lock()
                        .unwrap()
                        .observed(&event.kv.key, observed, now);
                }
            }
        }
    });

    let in_flight = Arc::new(Semaphore::new(MOST_WRITES_IN_FLIGHT));
    let write_conflicts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (mut writes, mut skipped, mut failed_writes) =
        (0u64, 0u64, Arc::new(std::sync::atomic::AtomicU64::new(0)));
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / arguments.rate as f64));
    let load_end = Instant::now() + arguments.duration;
    let mut tasks = Vec::new();
    while Instant::now() < load_end {
        ticks.tick().await;
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            skipped += 1;
            continue;
        };
        writes += 1;
        let key = format!("{SETS_PREFIX}set{:06}", fastrand::u64(0..arguments.objects));
        let replicas = fastrand::u64(0..=4);
        let (client, timings, conflicts, failed) = (
            client.clone(),
            Arc::clone(&timings),
            Arc::clone(&write_conflicts),
            Arc::clone(&failed_writes),
        );
        tasks.push(tokio::spawn(async move {
            match change_spec(&client, &key, replicas).await {
                Ok((generation, sent, met)) => {
                    conflicts.fetch_add(met, std::sync::atomic::Ordering::Relaxed);
                    timings.lock().unwrap().acknowledged(&key, generation, sent);
                }
                Err(_) => {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            drop(permit);
        }));
    }
    for task in tasks {
        task.await?;
    }
    let give_up = Instant::now() + CONVERGENCE_DEADLINE;
    while timings.lock().unwrap().unobserved() > 0 && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watching.abort();
    let rss_end = resident_kib(pid);

    drop(controller.stdin.take());
    let counts = next_line(&mut stdout).await.unwrap_or_default();
    let _ = tokio::time::timeout(Duration::from_secs(30), controller.wait()).await;
    let controller_counts: Value = serde_json::from_str(&counts).unwrap_or(Value::Null);

    let timings = timings.lock().unwrap();
    let mut latencies = timings.latencies.clone();
    latencies.sort();
    let failed_writes = Arc::get_mut(&mut failed_writes).map_or(0, |count| *count.get_mut());
    let report = json!({
        "label": arguments.label,
        "objects": arguments.objects,
        "cached_keys": cached_keys,
        "rate_per_second": arguments.rate,
        "duration_seconds": arguments.duration.as_secs(),
        "spec_writes": writes,
        "spec_writes_skipped": skipped,
        "spec_writes_failed": failed_writes,
        "spec_write_conflicts": write_conflicts.load(std::sync::atomic::Ordering::Relaxed),
        "timed_generations": latencies.len(),
        "unobserved_generations": timings.unobserved(),
        "convergence_ms": {
            "p50": percentile(&latencies, 0.50),
            "p90": percentile(&latencies, 0.90),
            "p99": percentile(&latencies, 0.99),
            "max": percentile(&latencies, 1.0),
        },
        "initial_convergence_seconds": initial_convergence.as_secs_f64(),
        "rss_kib": {"empty": rss_empty, "synced": rss_synced, "end": rss_end},
        "bytes_per_cached_key": (rss_synced.saturating_sub(rss_empty) * 1024) / cached_keys.max(1),
        "controller": controller_counts,
    });
    println!("{report}");
    Ok(())
}
