//! In-process members on loopback for the raft crate's tests: a cluster started on port-0
//! listeners (so every address is known before any member starts), and small request helpers.

#![allow(dead_code)] // Each test binary uses its own part of the support code.

use std::collections::BTreeMap;
use std::time::Duration;

use revkv_raft::{MemberConfig, MemberNode, PeerLimits, RaftMember, RaftTiming};
use revkv_storage::{KeyRange, PutRequest, RangeRequest, Request, StoreOptions, TxnOp, TxnRequest};

/// Fast timing for loopback tests; the default suits a LAN.
pub fn test_timing() -> RaftTiming {
    RaftTiming {
        heartbeat_interval: Duration::from_millis(50),
        election_timeout_min: Duration::from_millis(300),
        election_timeout_max: Duration::from_millis(600),
        ..RaftTiming::default()
    }
}

/// Members started together, with the configuration each was started from (for a restart).
pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub configs: Vec<MemberConfig>,
    pub members: Vec<RaftMember>,
}

pub async fn start_cluster(size: u64) -> TestCluster {
    start_cluster_with(size, |_| {}).await
}

/// As `start_cluster`, with every member's configuration changed by `adjust` first.
pub async fn start_cluster_with(size: u64, adjust: impl Fn(&mut MemberConfig)) -> TestCluster {
    let dir = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    let mut initial_cluster = BTreeMap::new();
    for id in 1..=size {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer_url = format!("http://{}", listener.local_addr().unwrap());
        initial_cluster.insert(
            id,
            MemberNode {
                peer_url,
                client_url: String::new(),
                grpc_url: None,
            },
        );
        listeners.push((id, listener));
    }
    let mut configs = Vec::new();
    let mut members = Vec::new();
    for (id, listener) in listeners {
        let listen_peer = listener.local_addr().unwrap();
        let mut config = member_config(id, dir.path(), listen_peer, &initial_cluster);
        adjust(&mut config);
        members.push(RaftMember::start(config.clone(), listener).await.unwrap());
        configs.push(config);
    }
    TestCluster {
        dir,
        configs,
        members,
    }
}

/// Member `id`'s configuration in a new cluster of `initial_cluster`, with its data under `dir`,
/// the test timing and every other setting at its default (sockets for the peer network).
pub fn member_config(
    id: u64,
    dir: &std::path::Path,
    listen_peer: std::net::SocketAddr,
    initial_cluster: &BTreeMap<u64, MemberNode>,
) -> MemberConfig {
    MemberConfig {
        id,
        data_dir: dir.join(format!("member-{id}")),
        listen_peer,
        advertise: initial_cluster[&id].clone(),
        initial_cluster: initial_cluster.clone(),
        join: false,
        timing: test_timing(),
        peer_limits: PeerLimits::default(),
        store: StoreOptions::default(),
        log: Default::default(),
        log_tail: Default::default(),
        peer_source_address: None,
        peer_tls: None,
        timings: Default::default(),
        peer_append_timings: Default::default(),
        lease: Default::default(),
        lease_events: Default::default(),
        learner_promotion: Default::default(),
        learner_promotion_events: Default::default(),
        peer_network: Default::default(),
        disks: Default::default(),
    }
}

pub fn put(key: &str, value: &str) -> Request {
    Request::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease: 0,
        prev_kv: false,
    })
}

/// A txn holding a nested txn that puts `key`: only builds with the txn extensions decode it, so
/// the leader appends it only once every member has said its build has them.
pub fn nested_put(key: &str) -> Request {
    let Request::Put(inner) = put(key, "nested") else {
        unreachable!("`put` builds a put");
    };
    Request::Txn(TxnRequest {
        success: vec![TxnOp::Txn(TxnRequest {
            success: vec![TxnOp::Put(inner)],
            ..TxnRequest::default()
        })],
        ..TxnRequest::default()
    })
}

/// The value of `key` in the member's own store (a serializable read).
pub fn local_value(member: &RaftMember, key: &str) -> Option<Vec<u8>> {
    let read = member
        .store()
        .range(&RangeRequest::of(KeyRange::single(key)))
        .unwrap();
    read.response.kvs.into_iter().next().map(|kv| kv.value)
}
