//! The end-to-end tests' view of the process harness (`revkv_tools::harness`): clusters of this
//! package's `revkv` binary, which only this package's tests know the path of.
// Each test binary uses a different part of the harness.
#![allow(dead_code, unused_imports)]

mod ctl_run;

pub use ctl_run::{ctl, ctl_async, CtlRun};
pub use revkv_tools::harness::{
    wait_until, Answer, ClusterOptions, ClusterTls, MemberClient, ProcessCluster,
    CONVERGENCE_TIMEOUT, STARTUP_TIMEOUT,
};

/// The binary under test.
pub const REVKV_BINARY: &str = env!("CARGO_BIN_EXE_revkv");

/// Options for a cluster of the binary under test, with the harness's defaults.
pub fn cluster_options() -> ClusterOptions {
    ClusterOptions::for_binary(REVKV_BINARY)
}

/// Runs `revkv snapshot restore BACKUP` for member `id` of the cluster `initial_cluster`
/// describes, into `data_dir`; what it printed and how it exited.
pub fn run_restore(
    backup: &std::path::Path,
    id: u64,
    data_dir: &std::path::Path,
    initial_cluster: &str,
) -> std::process::Output {
    std::process::Command::new(REVKV_BINARY)
        .args(["snapshot", "restore"])
        .arg(backup)
        .arg("--data-dir")
        .arg(data_dir)
        .args([
            "--id",
            &id.to_string(),
            "--initial-cluster",
            initial_cluster,
        ])
        .output()
        .expect("run revkv snapshot restore")
}

/// Restores member `id` from `backup` (`ProcessCluster::start_prepared`'s preparation), failing
/// the test if the restore fails.
pub fn restore_member(
    backup: &std::path::Path,
    id: u64,
    data_dir: &std::path::Path,
    initial_cluster: &str,
) {
    let output = run_restore(backup, id, data_dir, initial_cluster);
    assert!(
        output.status.success(),
        "restore of member {id} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// How many times member `member` asked `target` for a vote, or (with Pre-Vote, the default)
/// whether it would vote, and failed to reach it: one per election `member` started, as
/// openraft 0.10.0-alpha.37 logs each (target `openraft::core::raft_core`, level warn,
/// "while requesting vote, error: ..., target: N" or "while requesting pre-vote, ..."). The
/// version is pinned, so the text is stable. With Pre-Vote a lost election leaves the term as it
/// was, so the log, not the term, counts them.
pub fn failed_vote_requests(cluster: &ProcessCluster, member: u64, target: u64) -> usize {
    let to_target = format!(", target: {target}");
    cluster
        .log_text(member)
        .lines()
        .filter(|line| {
            let asked = line.contains("while requesting vote, error: ")
                || line.contains("while requesting pre-vote, error: ");
            asked && line.contains(&to_target)
        })
        .count()
}
