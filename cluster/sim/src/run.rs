//! One seed's run, start to finish: start the members, run the clients, watchers and faults
//! for the workload's simulated time, heal everything, wait until every member has applied the
//! same revision, read the store's history back, and check.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as WallClock};

use revkv_node::{KvBackend, ReadConsistency};

use crate::check::linearizability::Histories;
use crate::check::{self, Violation};
use crate::cluster::Cluster;
use crate::faults::{run_faults, FaultKind, CALM};
use crate::history::{LeaseEvent, Version, WatchRecord};
use crate::leases::LeaseClient;
use crate::network::Network;
use crate::runtime::{SimulationRuntimeError, SimulationThread};
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

/// How long, in simulated time, the healed cluster may take to agree on one revision.
const CONVERGENCE_DEADLINE: Duration = Duration::from_secs(120);

/// The most versions one key-history read returns; the read pages on.
const HISTORY_PAGE: u64 = 1_000;

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
fn scratch_directory() -> std::path::PathBuf {
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
    let mut violations = Vec::new();
    // Founding members start together, as a new cluster's do: each waits to hear from the others.
    let starts = cluster.ids().into_iter().map(|id| {
        let cluster = cluster.clone();
        async move { (id, cluster.start(id).await) }
    });
    for (id, started) in futures::future::join_all(starts).await {
        if let Err(error) = started {
            violations.push(failure(
                "member did not start",
                format!("member {id}: {error}"),
            ));
        }
    }
    let workload_end = trace.elapsed() + options.workload;
    let records = Arc::new(Mutex::new(Vec::new()));
    let watch_records = Arc::new(Mutex::new(Vec::<WatchRecord>::new()));
    let (stop_watchers, watchers_stop) = tokio::sync::watch::channel(false);
    let mut watchers = Vec::new();
    for id in 0..options.watchers {
        let watcher = run_watcher(
            id,
            seed,
            cluster.clone(),
            trace.clone(),
            watchers_stop.clone(),
            watch_records.clone(),
        );
        watchers.push(tokio::spawn(watcher));
    }
    let mut clients = Vec::new();
    for id in 1..=options.clients {
        let client = Client::new(id, seed, keys(options.keys));
        let run = client.run(
            cluster.clone(),
            trace.clone(),
            workload_end,
            records.clone(),
        );
        clients.push(tokio::spawn(run));
    }
    let lease_events = Arc::new(Mutex::new(Vec::<LeaseEvent>::new()));
    for id in 1..=options.lease_clients {
        let client = LeaseClient::new(
            id,
            seed,
            cluster.clone(),
            trace.clone(),
            lease_events.clone(),
        );
        clients.push(tokio::spawn(client.run(workload_end)));
    }
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
    trace.record(None, None, "workload over: healing".into());
    network.heal();
    network.set_quality(CALM);
    for id in cluster.ids() {
        if !cluster.running_ids().contains(&id) {
            if let Err(error) = cluster.start(id).await {
                violations.push(failure(
                    "member did not restart",
                    format!("member {id}: {error}"),
                ));
            }
        }
    }
    if let Err(why) = wait_for_leases_to_end(&cluster).await {
        violations.push(failure("lease never ended", why));
    }
    let final_revision = match settle(&cluster, &trace).await {
        Ok(revision) => revision,
        Err(why) => {
            violations.push(failure("no convergence", why));
            0
        }
    };
    let histories = read_histories(&cluster, keys(options.keys), &mut violations).await;
    let lease_events = std::mem::take(&mut *lease_events.lock().unwrap_or_else(|p| p.into_inner()));
    let lease_histories =
        read_histories(&cluster, attached_keys(&lease_events), &mut violations).await;
    violations.extend(check_hashes(&cluster, final_revision).await);
    // Give the watches the time to deliver what is left, then stop them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_watchers.send_replace(true);
    for watcher in watchers {
        let _ = watcher.await;
    }
    cluster.stop_all().await;
    let records = std::mem::take(&mut *records.lock().unwrap_or_else(|p| p.into_inner()));
    let watch_records =
        std::mem::take(&mut *watch_records.lock().unwrap_or_else(|p| p.into_inner()));
    if final_revision > 0 {
        violations.extend(check::linearizability::check(
            &records,
            &histories,
            final_revision,
        ));
        violations.extend(check::watches::check(
            &watch_records,
            &histories,
            final_revision,
        ));
        violations.extend(check::leases::check(
            &lease_events,
            &lease_histories,
            final_revision,
        ));
    }
    RunReport {
        seed,
        simulated: trace.elapsed(),
        wall: Duration::ZERO,
        operations: records.len(),
        unknown_outcomes: records
            .iter()
            .filter(|record| record.outcome == crate::history::Outcome::Unknown)
            .count(),
        watch_messages: watch_records
            .iter()
            .map(|record| record.messages.len())
            .sum(),
        faults,
        final_revision,
        violations,
        trace,
    }
}

fn failure(kind: &'static str, detail: String) -> Violation {
    Violation { kind, detail }
}

/// How long, in simulated time, the leases left at the end of the workload may take to expire:
/// the longest TTL several times over, for the elections the heal may start.
const LEASE_END_DEADLINE: Duration = Duration::from_secs(60);

/// Waits until no lease is left: the lease clients' last leases, and any a grant that timed out
/// made, expire by themselves once nobody keeps them alive. A lease that outlives the deadline
/// is a lease that never expires. Waiting also keeps expiries out of the settled revision.
async fn wait_for_leases_to_end(cluster: &Cluster) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + LEASE_END_DEADLINE;
    let mut left = String::from("no answer");
    while tokio::time::Instant::now() < deadline {
        let backend = cluster.ids().first().and_then(|id| cluster.backend(*id));
        if let Some(backend) = backend {
            match backend.lease_ids().await {
                Ok((_, ids)) if ids.is_empty() => return Ok(()),
                Ok((_, ids)) => left = format!("leases {ids:?}"),
                Err(error) => left = error.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("after {LEASE_END_DEADLINE:?}: {left}"))
}

/// The key of the write that ends a run, outside the workload's prefix.
const BARRIER_KEY: &str = "barrier";

/// Brings the healed cluster to rest and answers its final revision. A leader may still hold
/// entries of requests whose clients gave up; they commit (or are overwritten) once it hears
/// from the others, at some moment after the heal. So one more write goes through the leader
/// after the members first agree: once it commits, every entry before it in the leader's log
/// has too, and the revision every member then agrees on is final.
async fn settle(cluster: &Cluster, trace: &Trace) -> Result<u64, String> {
    converge(cluster, 0).await?;
    let deadline = tokio::time::Instant::now() + CONVERGENCE_DEADLINE;
    let barrier = loop {
        let backend = cluster.ids().first().and_then(|id| cluster.backend(*id));
        let written = match backend {
            Some(backend) => backend
                .put(BARRIER_KEY, "")
                .await
                .map_err(|error| error.to_string()),
            None => Err("member 1 is not running".to_owned()),
        };
        match written {
            Ok(written) => break written.header.revision,
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("the barrier write failed: {error}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    trace.record(None, None, format!("barrier written at revision {barrier}"));
    converge(cluster, barrier).await
}

/// Waits until every member has a leader and all have applied the same revision, at least
/// `at_least`; answers it.
async fn converge(cluster: &Cluster, at_least: u64) -> Result<u64, String> {
    let deadline = tokio::time::Instant::now() + CONVERGENCE_DEADLINE;
    let mut last = BTreeMap::new();
    while tokio::time::Instant::now() < deadline {
        last.clear();
        for id in cluster.ids() {
            let Some(backend) = cluster.backend(id) else {
                continue;
            };
            if let Ok(status) = backend.status().await {
                last.insert(
                    id,
                    (status.leader_id, status.revision, status.applied_index),
                );
            }
        }
        let revisions: Vec<_> = last
            .values()
            .map(|(_, revision, applied)| (*revision, *applied))
            .collect();
        let all_led = last.values().all(|(leader, _, _)| leader.is_some());
        let agreed = revisions.windows(2).all(|pair| pair[0] == pair[1]);
        let everyone = last.len() == cluster.ids().len();
        if everyone && all_led && agreed && revisions[0].0 >= at_least {
            return Ok(revisions[0].0);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "members' (leader, revision, applied index) after {CONVERGENCE_DEADLINE:?}: {last:?}"
    ))
}

/// The keys the lease clients attached to their leases.
fn attached_keys(events: &[LeaseEvent]) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = events
        .iter()
        .filter_map(|event| match event {
            LeaseEvent::Attached { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    keys.into_iter().cloned().collect()
}

/// The whole history of each of `keys`, read linearizably from the first member.
async fn read_histories(
    cluster: &Cluster,
    keys: Vec<String>,
    violations: &mut Vec<Violation>,
) -> Histories {
    let mut histories = Histories::new();
    let Some(backend) = cluster.ids().first().and_then(|id| cluster.backend(*id)) else {
        return histories;
    };
    for key in keys {
        let mut versions = Vec::new();
        let mut from = None;
        loop {
            let page = backend
                .key_history(
                    key.clone().into_bytes(),
                    from,
                    HISTORY_PAGE,
                    ReadConsistency::Linearizable,
                )
                .await;
            let (_, page) = match page {
                Ok(page) => page,
                Err(error) => {
                    violations.push(failure("history unreadable", format!("{key}: {error}")));
                    break;
                }
            };
            versions.extend(page.versions.iter().map(|version| {
                Version {
                    revision: version.kv.mod_revision,
                    value: (!version.deleted)
                        .then(|| String::from_utf8_lossy(&version.kv.value).into_owned()),
                }
            }));
            match page.next_from_revision {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        histories.insert(key, versions);
    }
    histories
}

/// Members that applied the same revision must hold the same key space.
async fn check_hashes(cluster: &Cluster, revision: u64) -> Vec<Violation> {
    let mut hashes = BTreeMap::new();
    for id in cluster.ids() {
        let Some(backend) = cluster.backend(id) else {
            continue;
        };
        match backend.hash(Some(revision)).await {
            Ok((_, hash)) => {
                hashes.insert(id, hash.hash);
            }
            Err(error) => return vec![failure("hash unreadable", format!("member {id}: {error}"))],
        }
    }
    let distinct: std::collections::BTreeSet<u64> = hashes.values().copied().collect();
    if distinct.len() > 1 {
        return vec![failure(
            "replicas differ",
            format!("hashes at revision {revision}: {hashes:?}"),
        )];
    }
    Vec::new()
}
