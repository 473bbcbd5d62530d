//! `revkv serve --worker-threads N` (or `worker-threads` in the config file) sets how many async
//! worker threads the member's process runs; a count out of range stops `revkv serve` with an
//! error naming the flag before it opens or binds anything. That the runtime gets exactly N
//! workers is checked where the runtime is built (`revkv_node::runtime`'s tests).

use crate::process_cluster;

use std::process::Command;

use process_cluster::{cluster_options, ProcessCluster, REVKV_BINARY};

#[tokio::test]
async fn a_member_with_one_worker_thread_serves_writes() {
    let cluster =
        ProcessCluster::start(1, cluster_options().with_flags(&["--worker-threads", "1"])).await;
    let client = cluster.client(1);
    let revision = client.put_ok("one-worker", "v").await;
    let answer = client.get("/v1/kv/one-worker").await;
    assert_eq!(answer.json["kv"]["value"], "v", "{:?}", answer.json);
    assert_eq!(answer.json["kv"]["mod_revision"], revision);
}

#[test]
fn worker_thread_counts_out_of_range_stop_serve_before_it_starts() {
    let directory = tempfile::tempdir().unwrap();
    let data_dir = directory.path().join("data");
    for count in ["0", "1025"] {
        let output = Command::new(REVKV_BINARY)
            .args(["serve", "--worker-threads", count, "--data-dir"])
            .arg(&data_dir)
            .args([
                "--listen-client",
                "127.0.0.1:0",
                "--listen-peer",
                "127.0.0.1:0",
            ])
            .output()
            .expect("run revkv serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{count} was accepted: {stderr}");
        assert!(
            stderr.contains(&format!(
                "--worker-threads: worker threads must be between 1 and 1024, not {count}"
            )),
            "{stderr}"
        );
        assert!(
            !data_dir.exists(),
            "serve created its data directory before refusing"
        );
    }
}
