//! The faults that take a member down without its consent: a crash (one member, or the power of
//! the whole machine, every member at once), and a failing disk (an fsync that fails, writes that
//! fail, a full disk) under one member's state file or raft log, after which the member is power
//! cycled on mended hardware. Each loses what a power cut loses: every change since a file's last
//! fsync may be gone and the first lost write torn (`Cluster::crash`). Nothing acknowledged may be
//! lost by any of them, because an acknowledged write is durable on a quorum of raft logs.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::RngExt;
use revkv_storage::{DiskFaults, DiskOperation};

use crate::cluster::Cluster;
use crate::trace::Trace;

/// The chance that a crash cuts the power of every member at once instead of one member's.
const POWER_LOSS_CHANCE: f64 = 0.25;

/// Crashes one running member, or every member at once, and starts them again after `lasting`.
/// A single member's crash comes half the time at its next fsync (one that fails, then the power
/// goes), so that the write before it is lost or torn. Skipped while a member is down already,
/// so that a quorum comes back.
pub async fn crash(random: &mut StdRng, cluster: &Cluster, trace: &Trace, lasting: Duration) {
    let running = cluster.running_ids();
    if running.len() < cluster.ids().len() || running.is_empty() {
        return;
    }
    let victims = if random.random_bool(POWER_LOSS_CHANCE) {
        trace.record(None, None, format!("fault: power loss for {lasting:?}"));
        running
    } else {
        let victim = running[random.random_range(0..running.len())];
        let at_next_fsync = random.random_bool(0.5);
        trace.record(
            Some(victim),
            None,
            format!("fault: crash for {lasting:?} (at its next fsync: {at_next_fsync})"),
        );
        if at_next_fsync {
            crash_at_next_fsync(cluster, trace, victim).await;
        }
        vec![victim]
    };
    cluster.crash(&victims, random).await;
    tokio::time::sleep(lasting).await;
    // Together, as a machine's members come back after a power loss: each waits for a quorum.
    futures::future::join_all(victims.iter().map(|victim| start(cluster, trace, *victim))).await;
}

/// The longest a crash waits for the victim's next fsync.
const MAX_WAIT_FOR_FSYNC: Duration = Duration::from_secs(2);

/// Makes member `victim`'s next fsync fail (of either store) and waits until the member stops
/// itself on it, or the wait's bound passes.
async fn crash_at_next_fsync(cluster: &Cluster, trace: &Trace, victim: u64) {
    let Some(disks) = cluster.disks(victim) else {
        return;
    };
    disks.state_file.fail(DiskOperation::Sync, true);
    disks.raft_log.fail(DiskOperation::Sync, true);
    let stopped = cluster
        .stopped_by_fault_within(victim, MAX_WAIT_FOR_FSYNC)
        .await;
    trace.record(
        Some(victim),
        None,
        format!("an fsync failed before the crash: {}", stopped.is_some()),
    );
}

/// What goes wrong with a disk.
#[derive(Clone, Copy, Debug)]
enum DiskFailure {
    FsyncFails,
    WritesFail,
    Full,
}

/// Makes one running member's state file or raft log fail for `lasting` (the member should stop
/// itself at its next write, fail-stop), then power cycles it on mended disks.
pub async fn fail_disk(random: &mut StdRng, cluster: &Cluster, trace: &Trace, lasting: Duration) {
    let running = cluster.running_ids();
    if running.len() < cluster.ids().len() || running.is_empty() {
        return;
    }
    let victim = running[random.random_range(0..running.len())];
    let Some(disks) = cluster.disks(victim) else {
        return;
    };
    let (file, faults) = if random.random_bool(0.5) {
        ("state file", disks.state_file)
    } else {
        ("raft log", disks.raft_log)
    };
    let failure = match random.random_range(0..3) {
        0 => DiskFailure::FsyncFails,
        1 => DiskFailure::WritesFail,
        _ => DiskFailure::Full,
    };
    trace.record(
        Some(victim),
        None,
        format!("fault: {file} {failure:?} for {lasting:?}"),
    );
    arm(&faults, failure);
    let stopped = cluster.stopped_by_fault_within(victim, lasting).await;
    trace.record(
        Some(victim),
        None,
        format!("disk fault over; the member stopped itself: {stopped:?}"),
    );
    cluster.crash(&[victim], random).await;
    start(cluster, trace, victim).await;
}

fn arm(faults: &DiskFaults, failure: DiskFailure) {
    match failure {
        DiskFailure::FsyncFails => faults.fail(DiskOperation::Sync, true),
        DiskFailure::WritesFail => faults.fail(DiskOperation::Write, true),
        DiskFailure::Full => faults.fill(true),
    }
}

async fn start(cluster: &Cluster, trace: &Trace, member: u64) {
    if let Err(error) = cluster.start(member).await {
        trace.record(Some(member), None, format!("start failed: {error}"));
    }
}
