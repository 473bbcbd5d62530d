//! The Rust client's examples (`cluster/client/examples/`, which README's "The Rust client"
//! points to) run against a real three-member cluster: each example's `run` is compiled into this
//! test as it is written and must succeed, so an example cannot drift from the client. Each
//! example asserts what it shows (no lost increment, every watched change once and in order, a
//! revoked lease's key gone, a lock taken in turn).

use crate::process_cluster::{cluster_options, ProcessCluster};
use revkv_client::Client;

/// Its contended backoff also serves `controller_chaos.rs`' writers.
#[path = "../../../cluster/client/examples/cas_counter.rs"]
pub mod cas_counter;
#[path = "../../../cluster/client/examples/lease_keepalive.rs"]
mod lease_keepalive;
#[path = "../../../cluster/client/examples/lock.rs"]
mod lock;
/// Also driven under chaos by `controller_chaos.rs`.
#[path = "../../../cluster/client/examples/replica_controller.rs"]
pub mod replica_controller;
#[path = "../../../cluster/client/examples/watch_resume.rs"]
mod watch_resume;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_examples_run_as_written() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    let client = Client::new(cluster.client_urls()).expect("a client of the cluster");
    for (name, printed) in [
        ("cas_counter", cas_counter::run(&client).await),
        ("watch_resume", watch_resume::run(&client).await),
        ("lease_keepalive", lease_keepalive::run(&client).await),
        ("lock", lock::run(&client).await),
        ("replica_controller", replica_controller::run(&client).await),
    ] {
        let printed = printed.unwrap_or_else(|error| panic!("example {name} failed: {error}"));
        println!("{name}: {printed}");
    }
}
