//! One seed's run, start to finish: start the members, run the clients, lease clients, watchers,
//! the compactor and the faults for the workload's simulated time, heal everything, wait until
//! every member has applied the same revision, read the store's history back, and check.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as WallClock};

use crate::check::{self, Violation};
use crate::cluster::Cluster;
use crate::compactor::{Compactor, HistoryArchive};
use crate::faults::{run_faults, FaultKind, CALM};
use crate::history::{ClockJump, LeaseEvent, Record, WatchRecord};
use crate::leases::{LeaseClient, LEASE_KEY_PREFIX};
use crate::membership::{follow_the_cluster, wait_for_promotions};
use crate::network::Network;
use crate::runtime::{SimulationRuntimeError, SimulationThread};
use crate::settle::{settle, wait_for_leases_to_end};
use crate::trace::Trace;
use crate::watchers::run_watcher;
use crate::workload::{keys, Client};

/// What a run does.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub members: u64,
    pub clients: u64,
    pub watchers: u64,
    /// Clients that each hold one lease at a time, with keys attached (`crate::leases`).
    pub lease_clients: u64,
    pub keys: u64,
    /// Simulated time the clients and faults run for.
    pub workload: Duration,
    pub faults: Vec<FaultKind>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            members: 3,
            clients: 3,
            watchers: 2,
            lease_clients: 1,
            keys: 4,
            workload: Duration::from_secs(20),
            faults: FaultKind::ALL.to_vec(),
        }
    }
}

/// What one run did and found.
pub struct RunReport {
    pub seed: u64,
    pub trace: Trace,
    pub simulated: Duration,
    pub wall: Duration,
    pub operations: usize,
    pub unknown_outcomes: usize,
    pub watch_messages: usize,
    pub faults: u64,
    /// Compactions the compactor saw acknowledged.
    pub compactions: u64,
    pub final_revision: u64,
    pub violations: Vec<Violation>,
}

/// Runs `seed` on the calling thread.
pub fn run_seed(seed: u64, options: &SimOptions) -> Result<RunReport, SimulationRuntimeError> {
    let started = WallClock::now();
    let directory = tempfile::Builder::new()
        .prefix("revkv-sim-")
        .tempdir_in(scratch_directory())?;
    let thread = SimulationThread::enter(seed)?;
    let mut report = thread
        .runtime
        .block_on(simulate(seed, options, directory.path()));
    drop(thread);
    report.wall = started.elapsed();
    Ok(report)
}

/// Memory-backed when the machine has it: the runs' fsyncs then cost nothing, and simulated
/// disks (not real ones) are what the simulation is about.
pub(crate) fn scratch_directory() -> std::path::PathBuf {
    let shared_memory = std::path::Path::new("/dev/shm");
    if shared_memory.is_dir() {
        shared_memory.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

async fn simulate(seed: u64, options: &SimOptions, directory: &std::path::Path) -> RunReport {
    let trace = Trace::start();
    trace.redact_directory(directory);
    let network = Network::new(seed, trace.clone());
    network.set_quality(CALM);
    let cluster = Arc::new(Cluster::new(
        options.members,
        directory,
        &network,
        trace.clone(),
    ));
    let mut violations = start_founders(&cluster).await;
    let workload_end = trace.elapsed() + options.workload;
    let shared = Shared::new(options);
    let (stop_watchers, watchers_stop) = tokio::sync::watch::channel(false);
    let watchers: Vec<_> = (0..options.watchers)
        .map(|id| {
            let watch_records = shared.watch_records.clone();
            let watcher = run_watcher(
                id,
                seed,
                cluster.clone(),
                trace.clone(),
                watchers_stop.clone(),
                watch_records,
            );
            tokio::spawn(watcher)
        })
        .collect();
    let mut clients = Vec::new();
    for id in 1..=options.clients {
        let client = Client::new(id, seed, keys(options.keys));
        let run = client.run(
            cluster.clone(),
            trace.clone(),
            workload_end,
            shared.records.clone(),
        );
        clients.push(tokio::spawn(run));
    }
    for id in 1..=options.lease_clients {
        let client = LeaseClient::new(
            id,
            seed,
            cluster.clone(),
            trace.clone(),
            shared.lease_events.clone(),
            shared.keys_written.clone(),
        );
        clients.push(tokio::spawn(client.run(workload_end)));
    }
    let compactor = Compactor {
        cluster: cluster.clone(),
        archive: shared.archive.clone(),
        keys_written: shared.keys_written.clone(),
        compactions_sent: shared.compactions_sent.clone(),
        trace: trace.clone(),
    };
    let compactions = tokio::spawn(compactor.run(seed, workload_end));
    let faults = run_faults(
        seed,
        options.faults.clone(),
        cluster.clone(),
        network.clone(),
        trace.clone(),
        workload_end,
    )
    .await;
    for client in clients {
        let _ = client.await;
    }
    let compactions = compactions.await.unwrap_or(0);
    trace.record(None, None, "workload over: healing".into());
    network.heal();
    network.set_quality(CALM);
    violations.extend(restart_stopped(&cluster).await);
    follow_the_cluster(&cluster, &trace).await;
    if let Err(why) = wait_for_leases_to_end(&cluster).await {
        violations.push(failure("lease never ended", why));
    }
    if let Err(why) = wait_for_promotions(&cluster, &trace).await {
        violations.push(failure("learner never promoted", why));
    }
    let final_revision = match settle(&cluster, &trace).await {
        Ok(revision) => revision,
        Err(why) => {
            violations.push(failure("no convergence", why));
            0
        }
    };
    if let Err(why) = shared.archive_everything(&cluster).await {
        violations.push(failure("history unreadable", why));
    }
    violations.extend(check::replicas::check(&cluster, final_revision).await);
    // Give the watches the time to deliver what is left, then stop them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_watchers.send_replace(true);
    for watcher in watchers {
        let _ = watcher.await;
    }
    cluster.stop_all().await;
    let tally = shared.check(final_revision, &cluster.clock_jumps(), &mut violations);
    RunReport {
        seed,
        trace: trace.clone(),
        simulated: trace.elapsed(),
        wall: Duration::ZERO,
        operations: tally.operations,
        unknown_outcomes: tally.unknown_outcomes,
        watch_messages: tally.watch_messages,
        faults,
        compactions,
        final_revision,
        violations,
    }
}

/// Starts the founding members together, as a new cluster's do: each waits to hear from the
/// others.
async fn start_founders(cluster: &Arc<Cluster>) -> Vec<Violation> {
    let starts = cluster.ids().into_iter().map(|id| {
        let cluster = cluster.clone();
        async move { (id, cluster.start(id).await) }
    });
    let started = futures::future::join_all(starts).await;
    let failed = started.into_iter().filter_map(|(id, started)| {
        let error = started.err()?;
        Some(failure(
            "member did not start",
            format!("member {id}: {error}"),
        ))
    });
    failed.collect()
}

/// Starts every member a fault left stopped.
async fn restart_stopped(cluster: &Cluster) -> Vec<Violation> {
    let mut violations = Vec::new();
    for id in cluster.ids() {
        if cluster.running_ids().contains(&id) {
            continue;
        }
        if let Err(error) = cluster.start(id).await {
            violations.push(failure(
                "member did not restart",
                format!("member {id}: {error}"),
            ));
        }
    }
    violations
}

/// How much a run checked.
struct Tally {
    operations: usize,
    unknown_outcomes: usize,
    watch_messages: usize,
}

/// What the run's tasks record, and what the checks read.
struct Shared {
    records: Arc<Mutex<Vec<Record>>>,
    watch_records: Arc<Mutex<Vec<WatchRecord>>>,
    lease_events: Arc<Mutex<Vec<LeaseEvent>>>,
    /// Every key a client may have written (the workload's, and each leased key before its put).
    keys_written: Arc<Mutex<BTreeSet<String>>>,
    compactions_sent: Arc<Mutex<BTreeSet<u64>>>,
    archive: Arc<HistoryArchive>,
    workload_keys: Vec<String>,
}

fn take<T>(shared: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(
        &mut *shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

impl Shared {
    fn new(options: &SimOptions) -> Self {
        let workload_keys = keys(options.keys);
        Shared {
            records: Arc::default(),
            watch_records: Arc::default(),
            lease_events: Arc::default(),
            keys_written: Arc::new(Mutex::new(workload_keys.iter().cloned().collect())),
            compactions_sent: Arc::default(),
            archive: Arc::default(),
            workload_keys,
        }
    }

    fn all_keys(&self) -> Vec<String> {
        let keys = self
            .keys_written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        keys.iter().cloned().collect()
    }

    /// Reads every key's history since the last compaction into the archive, through the first
    /// member.
    async fn archive_everything(&self, cluster: &Cluster) -> Result<(), String> {
        let first = cluster.ids().first().copied();
        let backend = first.and_then(|id| Some((id, cluster.backend(id)?)));
        let (id, backend) = backend.ok_or_else(|| "no member runs".to_owned())?;
        let keys = self.all_keys();
        cluster
            .on_member(id, self.archive.read(&backend, &keys))
            .await
            .map(|_| ())
    }

    /// Runs every check on what was recorded, adding what they find to `violations`.
    fn check(
        &self,
        final_revision: u64,
        clock_jumps: &[ClockJump],
        violations: &mut Vec<Violation>,
    ) -> Tally {
        let records = take(&self.records);
        let watch_records = take(&self.watch_records);
        let lease_events = take(&self.lease_events);
        if final_revision > 0 {
            let histories = self.archive.histories(&self.workload_keys);
            let lease_keys: Vec<String> = self
                .all_keys()
                .into_iter()
                .filter(|key| key.starts_with(LEASE_KEY_PREFIX))
                .collect();
            let lease_histories = self.archive.histories(&lease_keys);
            violations.extend(check::linearizability::check(
                &records,
                &histories,
                final_revision,
            ));
            let compactions = self.compactions_sent.lock();
            let compactions = compactions.unwrap_or_else(|poisoned| poisoned.into_inner());
            violations.extend(check::watches::check(
                &watch_records,
                &histories,
                final_revision,
                &compactions,
            ));
            drop(compactions);
            violations.extend(check::leases::check(
                &lease_events,
                clock_jumps,
                &lease_histories,
                final_revision,
            ));
        }
        Tally {
            operations: records.len(),
            unknown_outcomes: records
                .iter()
                .filter(|record| record.outcome == crate::history::Outcome::Unknown)
                .count(),
            watch_messages: watch_records
                .iter()
                .map(|record| record.messages.len())
                .sum(),
        }
    }
}

fn failure(kind: &'static str, detail: String) -> Violation {
    Violation { kind, detail }
}
