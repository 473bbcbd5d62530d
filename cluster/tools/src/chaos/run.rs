//! One harness run, start to verdict: start the cluster and the watches, run the workload while
//! the nemesis plays the schedule, heal, let everything settle, then check what was recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::check::kv::check_operations;
use super::check::leader_claims::{check_leader_claims, CLAIM_MARGIN, HARNESS_LEADER_LEASE};
use super::check::leases::{check_leases, LeaseBounds, LeaseObservations};
use super::check::recording::recording_of;
use super::check::states::{History, State};
use super::check::watch::{check_watch, WatchSpec};
use super::check::Violation;
use super::history::Operation;
use super::leaderships::{
    observe_leaderships, Isolation, LeaderNamed, LeadershipSeen, QuorumLoss, StatusesSeen,
};
use super::lease_workload::run_lease_worker;
use super::members::{Members, SharedEndpoints};
use super::nemesis::Nemesis;
use super::report::Report;
use super::schedule::schedule;
use super::store_check::check_store;
use super::watchers::{run_watcher, wait_for_coverage, WatchRecord, Watcher};
use super::workload::{run_worker, WorkloadContext, KEY_PREFIX};
use revkv_client::{Client, RangeRequest};

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct ChaosSettings {
    pub duration: Duration,
    pub seed: u64,
    pub workers: usize,
    pub lease_workers: usize,
    pub keys: usize,
    pub binary: PathBuf,
    pub dir: Option<PathBuf>,
}

/// How many members the cluster has.
const CLUSTER_SIZE: u64 = 3;
/// How long the healed cluster may take to settle (every member caught up, every watch covered).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The first revision a write can make (an empty store is at revision 1).
const FIRST_WRITE_REVISION: u64 = 2;

/// Runs the harness once; the report says what happened and what the checkers found.
pub async fn run_chaos(settings: &ChaosSettings) -> Report {
    let mut report = Report {
        seed: settings.seed,
        duration: settings.duration,
        ..Report::default()
    };
    let (temporary, directory) = match run_directory(settings) {
        Ok(found) => found,
        Err(error) => {
            report.aborted = Some(error);
            return report;
        }
    };
    if let Err(error) = run_in(settings, &directory, &mut report).await {
        report.aborted = Some(error);
    }
    if !report.is_clean() {
        // Keep the members' data and logs of a failed run for whoever looks into it.
        report.directory = Some(directory);
        if let Some(temporary) = temporary {
            let _ = temporary.keep();
        }
    }
    report
}

/// Where the members keep their data: `--dir`, or a new temporary directory (returned too, so
/// the caller decides whether to keep it).
fn run_directory(settings: &ChaosSettings) -> Result<(Option<tempfile::TempDir>, PathBuf), String> {
    if let Some(directory) = &settings.dir {
        std::fs::create_dir_all(directory)
            .map_err(|error| format!("create {}: {error}", directory.display()))?;
        return Ok((None, directory.clone()));
    }
    let temporary =
        tempfile::tempdir().map_err(|error| format!("create a temporary directory: {error}"))?;
    let directory = temporary.path().to_path_buf();
    Ok((Some(temporary), directory))
}

/// The harness's watches: the recording (everything, with `prev_kv`) first, then a mix of
/// ranges, single keys, filters and `prev_kv`.
fn harness_watchers() -> Vec<Watcher> {
    let everything = WatchSpec {
        prev_kv: true,
        ..WatchSpec::prefix(KEY_PREFIX)
    };
    let range = WatchSpec {
        range_end: Some(format!("{KEY_PREFIX}k5")),
        no_delete: true,
        ..WatchSpec::single(&format!("{KEY_PREFIX}k2"))
    };
    let deletes_only = WatchSpec {
        no_put: true,
        ..WatchSpec::prefix(KEY_PREFIX)
    };
    vec![
        Watcher::new("recording".into(), everything.clone()),
        Watcher::new("prefix-prev-kv".into(), everything),
        Watcher::new(
            "single-key".into(),
            WatchSpec::single(&format!("{KEY_PREFIX}k1")),
        ),
        Watcher::new("range-nodelete".into(), range),
        Watcher::new("prefix-noput".into(), deletes_only),
    ]
}

async fn run_in(
    settings: &ChaosSettings,
    directory: &Path,
    report: &mut Report,
) -> Result<(), String> {
    let mut members =
        Members::start(&settings.binary, directory, CLUSTER_SIZE, settings.seed).await?;
    let outcome = drive(settings, &mut members, report).await;
    if outcome.is_err() || !report.violations.is_empty() {
        eprintln!("{}", members.log_tails(40));
    }
    outcome
}

/// Runs the workload, watches and nemesis, then settles and checks.
async fn drive(
    settings: &ChaosSettings,
    members: &mut Members,
    report: &mut Report,
) -> Result<(), String> {
    let endpoints = members.shared_endpoints();
    let watchers = harness_watchers();
    let watch_tasks = spawn_watch_tasks(&watchers, &endpoints);
    let started = Instant::now();
    let deadline = started + settings.duration;
    let context = WorkloadContext::new(endpoints, started, deadline, settings.keys);
    let workers = spawn_workload_workers(settings, &context);
    let statuses: Arc<Mutex<StatusesSeen>> = Arc::default();
    let observer = tokio::spawn(observe_leaderships(
        context.endpoints.clone(),
        started,
        statuses.clone(),
        watch_tasks.stop_others.subscribe(),
    ));
    let mut nemesis = Nemesis {
        members,
        started,
        deadline,
        http: nemesis_http_client()?,
        compactable: compactable_revision(&watchers),
        injected: Vec::new(),
        quorum_losses: Vec::new(),
        isolations: Vec::new(),
    };
    play_the_schedule_then_heal(&mut nemesis, settings, workers, report).await?;
    let final_revision = settle(nemesis.members, &watchers, report).await?;
    watch_tasks.stop_recording_last(&watchers, report).await;
    let _ = observer.await;
    let operations = context.take_operations();
    report.count_operations(&operations);
    let statuses = std::mem::take(&mut *statuses.lock().expect("statuses lock"));
    let quorum_losses = std::mem::take(&mut nemesis.quorum_losses);
    let isolations = std::mem::take(&mut nemesis.isolations);
    let recorded = Recorded {
        watchers: &watchers,
        operations: &operations,
        leaderships: &statuses.leaderships,
        leaders_named: &statuses.leaders_named,
        quorum_losses: &quorum_losses,
        isolations: &isolations,
        started,
        final_revision,
    };
    check_everything(nemesis.members, &recorded, report).await;
    report.leader_claims_checked = (statuses.leaders_named.len(), isolations.len());
    report.leaderships = statuses.leaderships;
    Ok(())
}

/// The watch tasks, the recording's apart from the others', each part with its own stop signal.
struct WatchTasks {
    recording: JoinSet<()>,
    others: JoinSet<()>,
    stop_recording: tokio::sync::watch::Sender<bool>,
    stop_others: tokio::sync::watch::Sender<bool>,
}

impl WatchTasks {
    /// Stops the other watches, then the recording once it covers every revision they reached.
    /// Writes go on after the final read (leases the workload left behind expire), and every
    /// watch's events are compared with the history the recording makes, so that history must
    /// reach every event any watch received; a recording that does not get there within
    /// `SETTLE_TIMEOUT` is a stalled watch.
    async fn stop_recording_last(mut self, watchers: &[Watcher], report: &mut Report) {
        let _ = self.stop_others.send(true);
        while self.others.join_next().await.is_some() {}
        let reached = watchers[1..]
            .iter()
            .map(Watcher::covered_through)
            .max()
            .unwrap_or(0);
        let behind = wait_for_coverage(&watchers[..1], reached, SETTLE_TIMEOUT).await;
        if !behind.is_empty() {
            report.violations.push(Violation {
                kind: "watch-stalled",
                detail: format!(
                    "the recording is not through revision {reached}, which the other watches \
                     reached: {behind:?}"
                ),
                operations: Vec::new(),
            });
        }
        let _ = self.stop_recording.send(true);
        while self.recording.join_next().await.is_some() {}
    }
}

/// Starts one task per watcher, each following its watch from the first write's revision (moving
/// to the next endpoint whenever a stream ends) until its stop signal turns true. Watcher i starts
/// on member i (mod their number), so the streams are spread over the members. The first watcher
/// is the recording, which is stopped last ([`WatchTasks::stop_recording_last`]).
fn spawn_watch_tasks(watchers: &[Watcher], endpoints: &SharedEndpoints) -> WatchTasks {
    let (stop_recording, recording_stop) = tokio::sync::watch::channel(false);
    let (stop_others, others_stop) = tokio::sync::watch::channel(false);
    let mut tasks = WatchTasks {
        recording: JoinSet::new(),
        others: JoinSet::new(),
        stop_recording,
        stop_others,
    };
    for (index, watcher) in watchers.iter().enumerate() {
        let (set, stop) = match index {
            0 => (&mut tasks.recording, &recording_stop),
            _ => (&mut tasks.others, &others_stop),
        };
        set.spawn(run_watcher(
            watcher.spec.clone(),
            watcher.record.clone(),
            endpoints.clone(),
            index,
            FIRST_WRITE_REVISION,
            stop.clone(),
        ));
    }
    tasks
}

/// Starts `--workers` key-value workers, then `--lease-workers` lease workers numbered after them,
/// each seeded from the run's seed and its own number, so that no two make the same random
/// choices.
fn spawn_workload_workers(settings: &ChaosSettings, context: &WorkloadContext) -> JoinSet<()> {
    let mut workers = JoinSet::new();
    for worker in 0..settings.workers {
        let seed = settings.seed.wrapping_add(1_000 + worker as u64);
        workers.spawn(run_worker(context.clone(), worker, seed));
    }
    for lease_worker in 0..settings.lease_workers {
        let seed = settings.seed.wrapping_add(2_000 + lease_worker as u64);
        let worker = settings.workers + lease_worker;
        workers.spawn(run_lease_worker(context.clone(), worker, seed));
    }
    workers
}

/// The nemesis's own HTTP client (for its calls to the members' API), with a five-second limit
/// on each call, so that a member that does not answer is given up on and the next one tried.
fn nemesis_http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|error| error.to_string())
}

/// Plays the seed's schedule of faults, waits for the workload to reach its deadline and every
/// worker to end, then heals every fault. The faults injected and the proxies' counts go into
/// the report even when playing or healing failed, so an aborted run still says what it did;
/// the playing's failure is returned before the healing's.
async fn play_the_schedule_then_heal(
    nemesis: &mut Nemesis<'_>,
    settings: &ChaosSettings,
    mut workers: JoinSet<()>,
    report: &mut Report,
) -> Result<(), String> {
    let played = nemesis
        .run(&schedule(settings.seed, settings.duration))
        .await;
    tokio::time::sleep_until(nemesis.deadline.into()).await;
    while workers.join_next().await.is_some() {}
    let healed = nemesis.heal_everything().await;
    report.faults = std::mem::take(&mut nemesis.injected);
    report.proxies = nemesis.members.link_rules().counts();
    played?;
    healed?;
    Ok(())
}

/// What the nemesis may compact at, asked afresh before each compaction: the lowest revision
/// every watcher has covered (see [`lowest_coverage`]).
fn compactable_revision(watchers: &[Watcher]) -> Box<dyn Fn() -> u64 + Send> {
    let records: Vec<Arc<Mutex<WatchRecord>>> = watchers
        .iter()
        .map(|watcher| watcher.record.clone())
        .collect();
    Box::new(move || lowest_coverage(&records))
}

/// The lowest revision every watcher has covered: compacting at it takes nothing a watch still
/// needs.
fn lowest_coverage(records: &[Arc<Mutex<WatchRecord>>]) -> u64 {
    records
        .iter()
        .map(|record| record.lock().expect("watch record lock").covered_through())
        .min()
        .unwrap_or(0)
}

/// After healing: the final revision (a linearizable read), and every watch covering it.
async fn settle(
    members: &Members,
    watchers: &[Watcher],
    report: &mut Report,
) -> Result<u64, String> {
    let client =
        Client::new(members.client_urls().into_values()).map_err(|error| error.to_string())?;
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let final_revision = loop {
        match client.range(&RangeRequest::prefix(KEY_PREFIX)).await {
            Ok(range) => break range.header.revision,
            Err(error) if Instant::now() >= deadline => {
                return Err(format!("the healed cluster did not answer a read: {error}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    report.final_revision = final_revision;
    let behind = wait_for_coverage(watchers, final_revision, SETTLE_TIMEOUT).await;
    if !behind.is_empty() {
        report.violations.push(Violation {
            kind: "watch-stalled",
            detail: format!("not through revision {final_revision} after healing: {behind:?}"),
            operations: Vec::new(),
        });
    }
    Ok(final_revision)
}

/// Everything a run recorded, for the checkers.
struct Recorded<'a> {
    watchers: &'a [Watcher],
    operations: &'a [Operation],
    leaderships: &'a [LeadershipSeen],
    leaders_named: &'a [LeaderNamed],
    quorum_losses: &'a [QuorumLoss],
    isolations: &'a [Isolation],
    /// When the workload started: the zero of the operations' and leaderships' times.
    started: Instant,
    final_revision: u64,
}

impl Recorded<'_> {
    /// When the first event of each revision reached any watch, since the workload started.
    fn first_seen(&self) -> BTreeMap<u64, Duration> {
        let mut first_seen: BTreeMap<u64, Duration> = BTreeMap::new();
        for watcher in self.watchers {
            let record = watcher.record.lock().expect("watch record lock");
            for (revision, at) in &record.first_seen {
                let at = at.saturating_duration_since(self.started);
                let earliest = first_seen.entry(*revision).or_insert(at);
                *earliest = (*earliest).min(at);
            }
        }
        first_seen
    }
}

/// Builds the history from the recording and runs every checker.
async fn check_everything(members: &Members, recorded: &Recorded<'_>, report: &mut Report) {
    let (watchers, operations, final_revision) = (
        recorded.watchers,
        recorded.operations,
        recorded.final_revision,
    );
    let mut violations = Vec::new();
    for watcher in watchers {
        let record = watcher.record.lock().expect("watch record lock");
        let messages = record
            .segments
            .iter()
            .map(|segment| segment.messages.len())
            .sum();
        report
            .watches
            .push((watcher.name.clone(), record.segments.len(), messages));
        for problem in &record.problems {
            violations.push(watch_violation(&watcher.name, problem.clone()));
        }
    }
    let history = match recorded_history(&watchers[0]) {
        Ok(history) => history,
        Err(error) => {
            violations.push(watch_violation("recording", error));
            report.violations.extend(violations);
            return;
        }
    };
    violations.extend(check_operations(&history, operations));
    let first_seen = recorded.first_seen();
    let lease_observations = LeaseObservations {
        history: &history,
        operations,
        first_seen: &first_seen,
        leaderships: recorded.leaderships,
        quorum_losses: recorded.quorum_losses,
    };
    violations.extend(check_leases(&lease_observations, &LeaseBounds::default()));
    violations.extend(check_leader_claims(
        recorded.leaders_named,
        recorded.isolations,
        HARNESS_LEADER_LEASE + CLAIM_MARGIN,
    ));
    for watcher in &watchers[1..] {
        let record = watcher.record.lock().expect("watch record lock");
        if let Err(error) = check_watch(&history, &watcher.spec, &record.segments, final_revision) {
            violations.push(watch_violation(&watcher.name, error));
        }
    }
    let (compact_revision, store_violations) = check_store(members, &history, final_revision).await;
    report.compact_revision = compact_revision;
    violations.extend(store_violations);
    report.violations.extend(violations);
}

fn watch_violation(name: &str, detail: String) -> Violation {
    Violation {
        kind: "watch",
        detail: format!("{name}: {detail}"),
        operations: Vec::new(),
    }
}

/// The history the recording watch saw, from the empty store at revision 1.
fn recorded_history(recording: &Watcher) -> Result<History, String> {
    let record = recording.record.lock().expect("watch record lock");
    let recording = recording_of(&record.segments)?;
    History::from_changes(
        FIRST_WRITE_REVISION - 1,
        &State::new(),
        &recording.changes,
        recording.complete_through,
    )
}
