//! Three whole members (`Node`: raft, store, watch hub, background tasks) on a simulated peer
//! network without client listeners, all on the test's one thread, with their blocking work
//! inline and tokio's clock paused: how the deterministic simulator (issue 37) runs members.
//! Writes through any member reach every member's linearizable reads, and a watch on another
//! member sees each write once, in order.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use revkv_node::watch::{EventFilter, WatchMessage, WatchRequest};
use revkv_node::{KvBackend, Node, NodeConfig};
use revkv_raft::peer::simulated::{LoopbackNetwork, PeerNetwork};
use revkv_raft::MemberNode;
use revkv_storage::KeyRange;
use tokio::time::Instant;

/// How long (in the paused clock's time) anything the test waits for may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// Three members' configurations on `network`, at addresses no socket has.
fn configs(network: &Arc<LoopbackNetwork>, dir: &std::path::Path) -> Vec<(NodeConfig, SocketAddr)> {
    let address = |id: u64, port: u16| SocketAddr::from(([10, 0, 0, id as u8], port));
    let initial_cluster: BTreeMap<u64, MemberNode> = (1..=3)
        .map(|id| {
            let node = MemberNode {
                peer_url: format!("http://{}", address(id, 2380)),
                client_url: format!("http://{}", address(id, 2379)),
                grpc_url: None,
            };
            (id, node)
        })
        .collect();
    (1..=3)
        .map(|id| {
            let peer = address(id, 2380);
            let mut config = NodeConfig::single_member(
                dir.join(format!("member-{id}")),
                address(id, 2379),
                peer,
            );
            config.member.id = id;
            config.member.advertise = initial_cluster[&id].clone();
            config.member.initial_cluster = initial_cluster.clone();
            config.member.peer_network = PeerNetwork::simulated(network.link(id, peer));
            (config, peer)
        })
        .collect()
}

/// Puts `key` through `node` until it commits (before the first election there is no leader).
async fn put_until_committed(node: &Node, key: &str, value: &str) -> u64 {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match node.backend().put(key, value).await {
            Ok(written) => return written.header.revision,
            Err(error) => assert!(Instant::now() < deadline, "{key} not written: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn three_nodes_on_one_thread_serve_writes_reads_and_watches_without_sockets() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(LoopbackNetwork::default());
    let mut nodes = Vec::new();
    for (config, peer) in configs(&network, dir.path()) {
        nodes.push(Node::start_simulated(config, peer).await.expect("start"));
    }
    let watched = KeyRange::prefix("sim/");
    let mut watch = nodes[1]
        .backend()
        .watch_hub()
        .open(WatchRequest {
            filter: EventFilter::of(watched),
            start_revision: Some(1),
            prev_kv: false,
            progress_interval: Some(Duration::ZERO),
        })
        .expect("open a watch on member 2");

    let mut revisions = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        revisions.push(put_until_committed(node, &format!("sim/{index}"), "value").await);
    }
    for node in &nodes {
        for index in 0..nodes.len() {
            let read = node.backend().get(format!("sim/{index}")).await;
            let value = read.expect("a linearizable read").expect("the key").value;
            assert_eq!(value, b"value");
        }
    }
    let deadline = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    while seen.len() < revisions.len() {
        let message = tokio::time::timeout_at(deadline, watch.next()).await;
        match message.expect("every event before the deadline") {
            Some(WatchMessage::Events(events)) => seen.push(events.revision),
            Some(WatchMessage::Created { .. } | WatchMessage::Bookmark { .. }) => {}
            other => panic!("the watch ended: {other:?}"),
        }
    }
    assert_eq!(seen, revisions, "each write once, in order");
    assert!(network.delivered() > 0);
    for node in &nodes {
        node.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}
