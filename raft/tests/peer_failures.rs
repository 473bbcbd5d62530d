//! What a member logs while another member is down: under the member's default log filter
//! (`revkv_raft::DEFAULT_LOG_FILTER`), the leader's failed calls to a stopped follower (a
//! heartbeat every 50 ms, and replication retries) cost a bounded number of lines, not one per
//! failed call (issue 33, item 12). Its own test binary, because it installs the process's one
//! global log subscriber.

mod support;

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use revkv_raft::peer::failure_log::LOG_INTERVAL;
use support::{put, start_cluster};
use tokio::time::Instant;

/// Every line the members logged, as the binary would have written them.
static CAPTURED_LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// How many failed calls the leader must make to the stopped follower before the log is read:
/// about five seconds of heartbeats, far more than the lines allowed below.
const FAILED_CALLS: u64 = 100;

/// The most lines the whole cluster may log while those calls fail: the first failure's warning,
/// and room for unrelated lines (on a loaded machine an election may happen meanwhile, and each
/// member logs its own votes and failures). Without the bound it is one line per failed call.
const MOST_LINES_ALLOWED: usize = 20;

/// How long the failed calls may take to add up.
const FAILURES_DEADLINE: Duration = Duration::from_secs(60);

/// Appends what the log subscriber writes to `CAPTURED_LOG`.
struct CaptureWriter;

impl Write for CaptureWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut captured = CAPTURED_LOG
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        captured.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines captured so far.
fn captured_lines() -> Vec<String> {
    let captured = CAPTURED_LOG
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    String::from_utf8_lossy(&captured)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_costs_the_leader_a_bounded_number_of_log_lines() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            revkv_raft::DEFAULT_LOG_FILTER,
        ))
        .with_ansi(false)
        .with_writer(|| CaptureWriter)
        .init();
    let cluster = start_cluster(3).await;
    cluster.members[0].write(put("before", "1")).await.unwrap();
    let leader_id = cluster.members[0]
        .status()
        .leader
        .expect("a leader after a write");
    let leader = &cluster.members[(leader_id - 1) as usize];
    let stopped = cluster
        .members
        .iter()
        .find(|member| member.id() != leader_id)
        .expect("a follower");
    // Counted from before the shutdown: the leader's first failed call may come while it runs.
    let lines_before = captured_lines().len();
    let stopped_at = Instant::now();
    stopped.shutdown().await.unwrap();

    let deadline = Instant::now() + FAILURES_DEADLINE;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    while leader.failed_calls_in_a_row(stopped.id()) < FAILED_CALLS {
        assert!(
            Instant::now() < deadline,
            "the leader made only {} failed calls to member {} in {FAILURES_DEADLINE:?}",
            leader.failed_calls_in_a_row(stopped.id()),
            stopped.id()
        );
        poll.tick().await;
    }

    let lines = captured_lines().split_off(lines_before);
    assert!(
        lines.len() <= MOST_LINES_ALLOWED,
        "{} lines logged for {FAILED_CALLS} failed calls:\n{}",
        lines.len(),
        lines.join("\n")
    );
    let warnings_about_the_stopped_member = lines
        .iter()
        .filter(|line| line.contains(&format!("calls to peer {} fail", stopped.id())))
        .count();
    // Each member that calls it (the leader, and the other follower if an election happened
    // meanwhile) logs one line when its failures start, then at most one per interval.
    let intervals = stopped_at.elapsed().as_secs() / LOG_INTERVAL.as_secs();
    let callers = cluster.members.len() - 1;
    assert!(
        (1..=callers * (1 + intervals as usize)).contains(&warnings_about_the_stopped_member),
        "{warnings_about_the_stopped_member} warnings about the stopped member: {lines:#?}"
    );
    for member in &cluster.members {
        if member.id() != stopped.id() {
            member.shutdown().await.unwrap();
        }
    }
}
