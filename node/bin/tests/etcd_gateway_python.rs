//! A Python client that speaks only etcd's JSON gateway (etcd3-py, from PyPI, in the private tools
//! environment) runs a small put/get/watch/lease script (`etcd_gateway_client.py`) against real
//! etcd 3.4 (Debian's) and against revkv's gRPC port; both must print the same lines. The script
//! prints the cluster version the client reads, so revkv reports etcd 3.4.23's here
//! (`--emulated-etcd-version`): what differs by default (revkv says 3.5.13) differs by design.
//!
//! Without etcd or etcd3-py the test passes with a note, except under `CI=true`
//! (`scripts/install-test-deps.sh` installs both).

use crate::process_cluster;

use std::path::Path;

use process_cluster::{cluster_options, ProcessCluster};
use revkv_tools::harness::etcd::{required_etcd, EtcdServer};
use revkv_tools::harness::private_tools::required_python_with_etcd3py;

/// The version of Debian's etcd, the control (`/usr/bin/etcd`).
const DEBIAN_ETCD_VERSION: &str = "3.4.23";

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/etcd_gateway_client.py");

/// What the script printed against the gateway at `address` (`host:port`).
fn run_script(python: &Path, address: &str) -> String {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    let output = std::process::Command::new(python)
        .args([SCRIPT, host, port])
        .output()
        .expect("run the etcd3-py script");
    assert!(
        output.status.success(),
        "the script failed against {address}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_gateway_client_runs_against_revkv_as_against_etcd() {
    let (Some(etcd_binary), Some(python)) = (required_etcd(), required_python_with_etcd3py())
    else {
        return;
    };
    let etcd = EtcdServer::start(&etcd_binary).await;
    let etcd_address = etcd.client_url.trim_start_matches("http://").to_string();
    let revkv = ProcessCluster::start(
        3,
        cluster_options()
            .with_grpc()
            .with_flags(&["--emulated-etcd-version", DEBIAN_ETCD_VERSION]),
    )
    .await;
    let revkv_address = revkv.grpc_endpoints()[0].clone();
    let (from_etcd, from_revkv) = tokio::task::block_in_place(|| {
        (
            run_script(&python, &etcd_address),
            run_script(&python, &revkv_address),
        )
    });
    // A guard against both going wrong alike: the watch saw the overwrite, the revoke took the
    // leased key with it.
    assert!(
        from_etcd.contains("watched [(b'foo', b'baz')]"),
        "{from_etcd}"
    );
    assert!(from_etcd.contains("after revoke None"), "{from_etcd}");
    assert_eq!(from_revkv, from_etcd);
}
