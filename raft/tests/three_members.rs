//! Three in-process members on loopback: writes through any member are applied everywhere,
//! follower reads pass a ReadIndex barrier, and membership and leadership change on request.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use revkv_raft::{AdminRequest, MemberConfig, MemberNode, PeerLimits, RaftMember, RaftTiming};
use revkv_storage::{KeyRange, PutRequest, RangeRequest, Request, Response, StoreOptions};

/// Fast timing for loopback tests; the default suits a LAN.
fn test_timing() -> RaftTiming {
    RaftTiming {
        heartbeat_interval: Duration::from_millis(50),
        election_timeout_min: Duration::from_millis(300),
        election_timeout_max: Duration::from_millis(600),
        ..RaftTiming::default()
    }
}

struct TestCluster {
    _dir: tempfile::TempDir,
    members: Vec<RaftMember>,
}

async fn start_cluster(size: u64) -> TestCluster {
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
            },
        );
        listeners.push((id, listener));
    }
    let mut members = Vec::new();
    for (id, listener) in listeners {
        let config = MemberConfig {
            id,
            data_dir: dir.path().join(format!("member-{id}")),
            listen_peer: listener.local_addr().unwrap(),
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
            lease: Default::default(),
            lease_events: Default::default(),
        };
        members.push(RaftMember::start(config, listener).await.unwrap());
    }
    TestCluster { _dir: dir, members }
}

fn put(key: &str, value: &str) -> Request {
    Request::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease: 0,
        prev_kv: false,
    })
}

fn local_value(member: &RaftMember, key: &str) -> Option<Vec<u8>> {
    let read = member
        .store()
        .range(&RangeRequest::of(KeyRange::single(key)))
        .unwrap();
    read.response.kvs.into_iter().next().map(|kv| kv.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_every_member_are_applied_everywhere() {
    let cluster = start_cluster(3).await;
    for (index, member) in cluster.members.iter().enumerate() {
        let written = member
            .write(put(&format!("key-{index}"), "value"))
            .await
            .unwrap();
        assert_eq!(written.revision, index as u64 + 2);
        assert!(matches!(written.outcome, Ok(Response::Put(_))));
        // The writing member has applied its own write before answering.
        assert_eq!(
            local_value(member, &format!("key-{index}")),
            Some(b"value".to_vec())
        );
    }
    for member in &cluster.members {
        member.linearizable_read_barrier().await.unwrap();
        for index in 0..3 {
            assert_eq!(
                local_value(member, &format!("key-{index}")),
                Some(b"value".to_vec())
            );
        }
    }
    let hashes: Vec<_> = cluster
        .members
        .iter()
        .map(|member| member.store().hash(Some(4)).unwrap())
        .collect();
    assert!(
        hashes.windows(2).all(|pair| pair[0] == pair[1]),
        "{hashes:?}"
    );
    for member in &cluster.members {
        member.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_on_request_and_writes_continue() {
    let cluster = start_cluster(3).await;
    let first = &cluster.members[0];
    first.write(put("before", "1")).await.unwrap();
    let leader = first
        .raft()
        .metrics()
        .borrow_watched()
        .current_leader
        .unwrap();
    let target = (1..=3).find(|id| *id != leader).unwrap();
    first
        .admin(AdminRequest::TransferLeader { to: target })
        .await
        .unwrap();
    // Every member learns of the new leader (polled with a deadline, never a bare sleep).
    for member in &cluster.members {
        let mut metrics = member.raft().metrics();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while metrics.borrow_watched().current_leader != Some(target) {
            tokio::time::timeout_at(deadline, metrics.changed())
                .await
                .expect("every member learns the new leader in time")
                .unwrap();
        }
    }
    cluster.members[2].write(put("after", "2")).await.unwrap();
    for member in &cluster.members {
        member.linearizable_read_barrier().await.unwrap();
        assert_eq!(local_value(member, "after"), Some(b"2".to_vec()));
    }
    for member in &cluster.members {
        member.shutdown().await.unwrap();
    }
}
