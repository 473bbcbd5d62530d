//! A failing disk stops the member that owns it (fail-stop), and nothing it acknowledged is lost.
//!
//! Three in-process members take writes from several writers. One member's raft log or state file
//! is then made to fail every write or every fsync (`DiskFaults`, the switches on the real files).
//! The member must stop on its own and say why, naming the file; the other two must go on taking
//! writes; and once the member is restarted on the same, now healthy, files, every member must hold
//! every write any member acknowledged, with equal replica hashes.
//!
//! A slow disk is not a failed one: a follower whose fsyncs take longer than the leader's fixed
//! append timeout would be sent every append again. The leader's per-peer timeout follows the
//! follower's round trips instead (`peer/append_timeout.rs`); the last test shows the difference
//! with the adaptation on and off.

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use revkv_raft::RaftMember;
use revkv_storage::{DiskFaults, DiskOperation};
use support::{local_value, put, start_cluster, start_cluster_with, TestCluster};
use tokio::time::{timeout, Instant};

/// Writes acknowledged before the fault, and again after it.
const ACKNOWLEDGED_WRITES_PER_PHASE: usize = 150;

const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
enum Target {
    Leader,
    Follower,
}

#[derive(Clone, Copy, Debug)]
enum File {
    RaftLog,
    StateFile,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_fsync_on_the_leader_stops_it() {
    fault_stops_member_and_loses_nothing(Target::Leader, File::RaftLog, DiskOperation::Sync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_write_on_a_follower_stops_it() {
    fault_stops_member_and_loses_nothing(Target::Follower, File::RaftLog, DiskOperation::Write)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_state_file_fsync_on_the_leader_stops_it() {
    fault_stops_member_and_loses_nothing(Target::Leader, File::StateFile, DiskOperation::Sync)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_state_file_write_on_a_follower_stops_it() {
    fault_stops_member_and_loses_nothing(Target::Follower, File::StateFile, DiskOperation::Write)
        .await;
}

async fn fault_stops_member_and_loses_nothing(
    target: Target,
    file: File,
    operation: DiskOperation,
) {
    let mut cluster = start_cluster(3).await;
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let members: Arc<Vec<RaftMember>> = Arc::new(std::mem::take(&mut cluster.members));
    let leader_index = wait_for_leader(&members).await;
    let victim = match target {
        Target::Leader => leader_index,
        Target::Follower => (leader_index + 1) % members.len(),
    };
    let stop_writers = tokio::sync::watch::Sender::new(false);
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let members = members.clone();
            let acknowledged = acknowledged.clone();
            let mut stop = stop_writers.subscribe();
            tokio::spawn(async move {
                write_until_stopped(writer, &members, &acknowledged, &mut stop).await
            })
        })
        .collect();

    wait_for_acknowledged(&acknowledged, ACKNOWLEDGED_WRITES_PER_PHASE).await;
    let faults = faults_of(&members[victim], file);
    faults.fail(operation, true);
    let reason = timeout(DEADLINE, members[victim].stopped_by_fault())
        .await
        .expect("the member with the failing disk stops in time");
    assert!(faults.injected() > 0, "the fault was injected");
    assert!(
        reason.contains("injected disk fault"),
        "the member says why it stopped: {reason}"
    );
    let file_name = match file {
        File::RaftLog => "raft-log",
        File::StateFile => "state.redb",
    };
    assert!(reason.contains(file_name), "names the file: {reason}");
    assert!(!members[victim].status().running);

    // The other two go on: acknowledged writes keep growing without the stopped member.
    let before = acknowledged.lock().unwrap().len();
    wait_for_acknowledged(&acknowledged, before + ACKNOWLEDGED_WRITES_PER_PHASE).await;
    stop_writers.send_replace(true);
    for writer in writers {
        writer.await.unwrap();
    }

    let members = Arc::into_inner(members).expect("the writers are done");
    let restarted = restart_member(&cluster, members, victim).await;
    let acknowledged = acknowledged.lock().unwrap().clone();
    check_every_member_holds(&restarted, &acknowledged).await;
    for member in &restarted {
        member.shutdown().await.unwrap();
    }
}

/// How much longer each of the slow follower's fsyncs takes: above the test timing's 300 ms floor
/// (its minimum election timeout), so a fixed timeout at the floor would time every append out.
const SLOW_SYNC: Duration = Duration::from_millis(500);

/// The slow follower's fsyncs to wait for while writes go on: enough appends that a timeout per
/// append would show.
const SLOW_SYNCS_OBSERVED: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_on_a_slow_disk_gets_each_append_once_as_the_timeout_follows_it() {
    // With the ceiling at the floor, the timeout cannot follow the disk: this is the fixed
    // timeout the adaptation replaced, and the check must see appends time out again and again.
    let fixed = timed_out_appends_to_a_slow_follower(Duration::from_millis(300)).await;
    assert!(
        fixed.timed_out >= 4,
        "a fixed timeout below the fsync times the appends out: {fixed:?}"
    );
    let adaptive = timed_out_appends_to_a_slow_follower(Duration::from_secs(10)).await;
    eprintln!("fixed timeout: {fixed:?}; following the disk: {adaptive:?}");
    // The first append or two time out while the timeout learns the disk; none after that.
    assert!(
        adaptive.timed_out <= 2,
        "the timeout follows the slow disk: {adaptive:?}"
    );
    assert!(
        adaptive.timeout > SLOW_SYNC,
        "the timeout is above the slow fsync: {adaptive:?}"
    );
}

/// Starts three members whose append timeouts may grow up to `ceiling`, slows one follower's raft
/// log fsyncs by `SLOW_SYNC`, writes until it has made `SLOW_SYNCS_OBSERVED` of them, waits until
/// it has every write (its disk fast again), and answers the leader's view of that follower's append timeout.
async fn timed_out_appends_to_a_slow_follower(ceiling: Duration) -> revkv_raft::PeerAppendTimeout {
    let cluster = start_cluster_with(3, |config| config.timing.append_timeout_max = ceiling).await;
    let members = &cluster.members;
    let leader_index = wait_for_leader(members).await;
    let follower_index = (leader_index + 1) % members.len();
    let follower_id = cluster.configs[follower_index].id;
    // A first write before the disk slows down, so that the leader has talked to every peer.
    let first = members[leader_index]
        .write(put("slow/0", "0"))
        .await
        .unwrap();
    assert!(first.outcome.is_ok());
    let faults = members[follower_index].log_store().disk_faults().clone();
    faults.delay_syncs(SLOW_SYNC);
    let mut sequence = 0;
    while faults.delayed_syncs() < SLOW_SYNCS_OBSERVED {
        sequence += 1;
        let written = timeout(
            DEADLINE,
            members[leader_index].write(put("slow/last", &sequence.to_string())),
        )
        .await
        .expect("the leader and the fast follower commit without the slow one");
        assert!(written.unwrap().outcome.is_ok());
    }
    // The disk recovers, so the follower catches up however the leader's timeouts went.
    faults.delay_syncs(Duration::ZERO);
    let last = sequence.to_string().into_bytes();
    poll_until("the slow follower has every write", || {
        (local_value(&members[follower_index], "slow/last").as_deref() == Some(&last[..]))
            .then_some(())
    })
    .await;
    let seen = members[leader_index]
        .append_timeouts()
        .into_iter()
        .find(|timeout| timeout.peer == follower_id)
        .expect("the leader has sent appends to the follower");
    for member in cluster.members.iter() {
        member.shutdown().await.unwrap();
    }
    seen
}

fn faults_of(member: &RaftMember, file: File) -> DiskFaults {
    match file {
        File::RaftLog => member.log_store().disk_faults().clone(),
        File::StateFile => member.store().disk_faults().clone(),
    }
}

/// Writes distinct keys through every member in turn, remembering each acknowledged one. Errors
/// (a stopped member, an election) leave a write's fate unknown, so it is not remembered.
async fn write_until_stopped(
    writer: usize,
    members: &[RaftMember],
    acknowledged: &Mutex<BTreeSet<String>>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let mut sequence = 0usize;
    while !*stop.borrow() {
        sequence += 1;
        let key = format!("writer-{writer}-{sequence:06}");
        let member = &members[sequence % members.len()];
        let attempt = timeout(Duration::from_secs(2), member.write(put(&key, "value")));
        if let Ok(Ok(result)) = attempt.await {
            if result.outcome.is_ok() {
                acknowledged.lock().unwrap().insert(key);
            }
        }
    }
}

async fn wait_for_leader(members: &[RaftMember]) -> usize {
    poll_until("a leader is elected", || {
        members.iter().position(RaftMember::is_leader)
    })
    .await
}

async fn wait_for_acknowledged(acknowledged: &Mutex<BTreeSet<String>>, count: usize) {
    poll_until("enough writes are acknowledged", || {
        (acknowledged.lock().unwrap().len() >= count).then_some(())
    })
    .await
}

/// Shuts the stopped member down (its raft is gone already, so only its listeners and files are
/// released) and starts it again on the same data directory, whose files no longer fail.
async fn restart_member(
    cluster: &TestCluster,
    mut members: Vec<RaftMember>,
    victim: usize,
) -> Vec<RaftMember> {
    let stopped = members.remove(victim);
    let _ = stopped.shutdown().await;
    drop(stopped);
    let mut config = cluster.configs[victim].clone();
    // The config's switches are the failed disk's; the restarted member gets healthy ones.
    config.disks = Default::default();
    let restarted = poll_until_async("the stopped member starts again", || {
        let config = config.clone();
        async move {
            let listener = tokio::net::TcpListener::bind(config.listen_peer)
                .await
                .ok()?;
            RaftMember::start(config, listener).await.ok()
        }
    })
    .await;
    members.insert(victim, restarted);
    members
}

/// Waits until every member has applied everything the leader committed, then checks each holds
/// every acknowledged key and that the replica hashes agree.
async fn check_every_member_holds(members: &[RaftMember], acknowledged: &BTreeSet<String>) {
    let leader_index = wait_for_leader(members).await;
    members[leader_index]
        .linearizable_read_barrier()
        .await
        .unwrap();
    let commit_index = members[leader_index].status().commit_index;
    for member in members {
        member
            .wait_for_log_index(commit_index, DEADLINE)
            .await
            .expect("every member catches up");
    }
    for (index, member) in members.iter().enumerate() {
        let missing: Vec<_> = acknowledged
            .iter()
            .filter(|key| local_value(member, key).is_none())
            .take(5)
            .collect();
        assert!(
            missing.is_empty(),
            "member {} lost acknowledged writes, e.g. {missing:?}",
            index + 1
        );
    }
    let revision = members[leader_index].store().current_revision().unwrap();
    let hashes: Vec<_> = members
        .iter()
        .map(|member| member.store().hash(Some(revision)).unwrap())
        .collect();
    assert!(
        hashes.windows(2).all(|pair| pair[0] == pair[1]),
        "{hashes:?}"
    );
}

async fn poll_until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    poll_until_async(what, || std::future::ready(check())).await
}

async fn poll_until_async<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
