//! Three members on a simulated peer network (`revkv_raft::peer::simulated`), all on the test's
//! one thread, with its blocking work inline and tokio's clock paused: the first whole cluster
//! with no socket, no thread and no wall clock, the ground the deterministic simulator (issue 37)
//! builds on. It elects a leader, replicates through forwarded writes, loses the leader behind a
//! partition, elects another, and catches the old leader up once the partition heals.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use futures::future::BoxFuture;
use revkv_raft::peer::client::CallError;
use revkv_raft::peer::simulated::{PeerListener, PeerNetwork, SimulatedAnswer, SimulatedNetwork};
use revkv_raft::{MemberConfig, MemberNode, PeerLimits, RaftMember};
use revkv_storage::StoreOptions;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::support::{local_value, put, test_timing};

/// The largest answer body the test network carries.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// How long (in the paused clock's time) anything the test waits for may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// Every member's router by address, the links cut, and what crossed them.
#[derive(Default)]
struct Network {
    routers: Mutex<BTreeMap<SocketAddr, Router>>,
    /// Member addresses by member id, for the cuts.
    addresses: Mutex<BTreeMap<u64, SocketAddr>>,
    /// (from, to) member pairs whose calls are lost.
    cut: Mutex<BTreeSet<(u64, u64)>>,
    delivered: AtomicU64,
    lost: AtomicU64,
}

impl Network {
    fn member_at(&self, address: SocketAddr) -> Option<u64> {
        let addresses = self.addresses.lock().unwrap();
        addresses
            .iter()
            .find(|(_, known)| **known == address)
            .map(|(id, _)| *id)
    }

    /// Cuts every link between `isolated` and the others, both ways.
    fn isolate(&self, isolated: u64) {
        let others: Vec<u64> = self.addresses.lock().unwrap().keys().copied().collect();
        let mut cut = self.cut.lock().unwrap();
        for other in others.into_iter().filter(|other| *other != isolated) {
            cut.insert((isolated, other));
            cut.insert((other, isolated));
        }
    }

    fn heal(&self) {
        self.cut.lock().unwrap().clear();
    }
}

/// One member's handle on the network.
struct MemberLink {
    network: Arc<Network>,
    member: u64,
}

impl SimulatedNetwork for MemberLink {
    fn post(
        &self,
        url: String,
        body: Bytes,
        _timeout: Duration,
    ) -> BoxFuture<'static, Result<SimulatedAnswer, CallError>> {
        let network = self.network.clone();
        let from = self.member;
        Box::pin(async move {
            let uri: axum::http::Uri = url
                .parse()
                .map_err(|error| CallError::Unreachable(format!("{url}: not a URL: {error}")))?;
            let address: SocketAddr = uri
                .authority()
                .map(|authority| authority.as_str())
                .unwrap_or_default()
                .parse()
                .map_err(|error| CallError::Unreachable(format!("{url}: {error}")))?;
            let to = network.member_at(address);
            if to.is_some_and(|to| network.cut.lock().unwrap().contains(&(from, to))) {
                network.lost.fetch_add(1, Ordering::SeqCst);
                // Lost on the way: the caller's timeout ends the call.
                return std::future::pending().await;
            }
            let router = network.routers.lock().unwrap().get(&address).cloned();
            let Some(router) = router else {
                return Err(CallError::Unreachable(format!("{url}: nobody serves it")));
            };
            let request = axum::http::Request::post(uri.path())
                .body(Body::from(body))
                .map_err(|error| CallError::BadAnswer(error.to_string()))?;
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES)
                .await
                .map_err(|error| CallError::BadAnswer(error.to_string()))?;
            network.delivered.fetch_add(1, Ordering::SeqCst);
            Ok(SimulatedAnswer { status, body })
        })
    }

    fn serve(&self, address: SocketAddr, router: Router) {
        self.network.routers.lock().unwrap().insert(address, router);
    }

    fn stop_serving(&self, address: SocketAddr) {
        self.network.routers.lock().unwrap().remove(&address);
    }
}

/// Three members on `network`, at addresses no socket has.
async fn start_members(network: &Arc<Network>, dir: &std::path::Path) -> Vec<RaftMember> {
    let addresses: BTreeMap<u64, SocketAddr> = (1..=3)
        .map(|id| (id, SocketAddr::from(([10, 0, 0, id as u8], 2380))))
        .collect();
    *network.addresses.lock().unwrap() = addresses.clone();
    let initial_cluster: BTreeMap<u64, MemberNode> = addresses
        .iter()
        .map(|(id, address)| {
            let node = MemberNode {
                peer_url: format!("http://{address}"),
                client_url: String::new(),
                grpc_url: None,
            };
            (*id, node)
        })
        .collect();
    let mut members = Vec::new();
    for (id, address) in addresses {
        let link = MemberLink {
            network: network.clone(),
            member: id,
        };
        let config = MemberConfig {
            id,
            data_dir: dir.join(format!("member-{id}")),
            listen_peer: address,
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
            peer_network: PeerNetwork::simulated(Arc::new(link)),
        };
        let listener = PeerListener::Simulated(address);
        members.push(RaftMember::start(config, listener).await.expect("start"));
    }
    members
}

/// Writes `key` through `member` until the write commits (no leader, or one behind a partition,
/// fails it), within the deadline.
async fn write_until_committed(member: &RaftMember, key: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match member.write(put(key, "value")).await {
            Ok(_) => return,
            Err(error) => assert!(Instant::now() < deadline, "{key} not written: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `member` holds `key` in its own store.
async fn wait_for_key(member: &RaftMember, key: &str) {
    let deadline = Instant::now() + DEADLINE;
    while local_value(member, key).is_none() {
        assert!(
            Instant::now() < deadline,
            "member {} never applied {key}",
            member.id()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn three_members_on_one_thread_elect_replicate_and_survive_a_partition_without_sockets() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(Network::default());
    let members = start_members(&network, dir.path()).await;

    // A write through every member, forwarded to the leader over the simulated network.
    for (index, member) in members.iter().enumerate() {
        write_until_committed(member, &format!("before/{index}")).await;
    }
    for member in &members {
        for index in 0..members.len() {
            wait_for_key(member, &format!("before/{index}")).await;
        }
    }
    let old_leader = members[0]
        .status()
        .leader
        .expect("a leader after the writes");
    let delivered_before_partition = network.delivered.load(Ordering::SeqCst);
    assert!(delivered_before_partition > 0);

    // The leader alone on one side: the other two elect a leader of their own and commit.
    network.isolate(old_leader);
    let others: Vec<&RaftMember> = members
        .iter()
        .filter(|member| member.id() != old_leader)
        .collect();
    write_until_committed(others[0], "during").await;
    wait_for_key(others[1], "during").await;
    let new_leader = others[0].status().leader.expect("a leader among the two");
    assert_ne!(new_leader, old_leader);
    let isolated = members
        .iter()
        .find(|member| member.id() == old_leader)
        .expect("the old leader");
    assert_eq!(
        local_value(isolated, "during"),
        None,
        "nothing crossed the cut"
    );
    assert!(network.lost.load(Ordering::SeqCst) > 0);

    // Healed: the old leader learns the new term and catches up.
    network.heal();
    wait_for_key(isolated, "during").await;
    for member in &members {
        member.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}
