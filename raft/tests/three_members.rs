//! Three in-process members on loopback: writes through any member are applied everywhere,
//! follower reads pass a ReadIndex barrier, and membership and leadership change on request.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use revkv_raft::peer::paths;
use revkv_raft::AdminRequest;
use revkv_storage::Response;
use support::{local_value, nested_put, put, start_cluster};

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
    // The leader replicated over append streams, not one HTTP request per append: every follower
    // serves at least one (`peer/append_stream.rs`).
    let leader = cluster.members[0]
        .raft()
        .metrics()
        .borrow_watched()
        .current_leader
        .expect("a leader");
    for member in &cluster.members {
        if member.id() != leader {
            assert!(
                member.open_append_streams() >= 1,
                "member {} serves no append stream",
                member.id()
            );
        }
    }
    for member in &cluster.members {
        member.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_on_request_and_writes_continue() {
    let cluster = start_cluster(3).await;
    let first = &cluster.members[0];
    first.write(put("before", "1")).await.unwrap();
    // On a loaded machine an election may be under way even right after a write: wait for one.
    let leader = known_leader(first).await;
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

/// openraft's leader sends its hand-over message once; when that message is lost, the leader
/// asks again while it still leads, so leadership moves where it was asked to, round after round,
/// and the cluster takes writes afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_even_when_the_hand_over_message_is_lost() {
    let cluster = start_cluster(3).await;
    cluster.members[0].write(put("before", "1")).await.unwrap();
    for round in 0..3 {
        let leader = known_leader(&cluster.members[0]).await;
        let target = (1..=3).find(|id| *id != leader).unwrap();
        let leading_member = &cluster.members[(leader - 1) as usize];
        assert_eq!(leading_member.id(), leader);
        // The leader's first hand-over message, to each of the other two voters, never arrives.
        leading_member
            .peer_faults()
            .lose_next_calls(paths::TRANSFER_LEADER, 2);
        cluster.members[0]
            .admin(AdminRequest::TransferLeader { to: target })
            .await
            .unwrap_or_else(|error| panic!("round {round}: transfer to {target}: {error}"));
        let written = cluster.members[0]
            .write(put(&format!("after-{round}"), "1"))
            .await;
        assert!(written.is_ok(), "round {round}: {written:?}");
    }
    for member in &cluster.members {
        member.shutdown().await.unwrap();
    }
}

/// The leader `member` knows of, once it knows one (an election may be under way on a loaded
/// machine).
async fn known_leader(member: &revkv_raft::RaftMember) -> u64 {
    member
        .raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |metrics| metrics.current_leader.is_some(),
            "a leader is known",
        )
        .await
        .expect("a leader is known in time")
        .current_leader
        .unwrap()
}

/// Member 3 stands for a member of a build from before the feature gate: its peer URL answers
/// 404 to every path, as an older build answers `/raft/features`. Members 1 and 2 are a quorum,
/// so plain writes go on, but the leader refuses a nested txn and names member 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_txn_is_refused_while_a_member_runs_a_build_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    let mut initial_cluster = std::collections::BTreeMap::new();
    for id in 1..=3u64 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = revkv_raft::MemberNode {
            peer_url: format!("http://{}", listener.local_addr().unwrap()),
            client_url: String::new(),
            grpc_url: None,
        };
        initial_cluster.insert(id, node);
        listeners.push((id, listener));
    }
    let mut members = Vec::new();
    for (id, listener) in listeners {
        if id == 3 {
            tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
            continue;
        }
        let address = listener.local_addr().unwrap();
        let config = support::member_config(id, dir.path(), address, &initial_cluster);
        members.push(
            revkv_raft::RaftMember::start(config, listener)
                .await
                .unwrap(),
        );
    }
    write_once_a_leader_serves(&members[0]).await;
    let refused = members[0].write(nested_put("gated")).await;
    let Err(revkv_raft::MemberError::Refused(message)) = refused else {
        panic!("a nested txn went ahead with a member that cannot read it: {refused:?}");
    };
    assert!(
        message.contains("member 3 runs a build without it"),
        "{message}"
    );
    for member in &members {
        assert_eq!(local_value(member, "gated"), None);
    }
    for member in &members {
        member.shutdown().await.unwrap();
    }
}

/// A learner to be promoted once caught up is refused while it runs a build without the feature
/// (its peer listener answers 404 to every path, as an older build answers `/raft/features`): it
/// would read the intent in the log or a snapshot before it could refuse to join. Nothing is
/// added and no intent is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_to_promote_is_refused_while_it_runs_a_build_without_the_feature() {
    let cluster = start_cluster(3).await;
    let members = &cluster.members;
    write_once_a_leader_serves(&members[0]).await;
    let older = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer_url = format!("http://{}", older.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(older, axum::Router::new()).await });
    let node = peer_node(peer_url);
    let add = AdminRequest::AddLearnerToPromote {
        id: 4,
        node,
        max_lag_entries: None,
    };
    let refused = members[0].admin(add).await;
    let Err(revkv_raft::MemberError::Refused(message)) = refused else {
        panic!("a learner of an older build was marked to promote itself: {refused:?}");
    };
    assert!(
        message.contains("member 4 runs a build without it"),
        "{message}"
    );
    for member in members {
        assert!(member.members().iter().all(|listed| listed.id != 4));
        assert_eq!(member.store().learner_promotions().unwrap(), Vec::new());
    }
    for member in members {
        member.shutdown().await.unwrap();
    }
}

/// The leader keeps a member's answer about its features only while the membership holds that
/// member: once member 4 is removed, a different process started at the same id and URL (here
/// an older build, answering 404 where the removed one answered) is asked again when it is
/// marked to be promoted, and refused, rather than trusted on the removed member's word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_rejoining_at_a_removed_members_id_and_url_is_asked_for_its_features_again() {
    let cluster = start_cluster(3).await;
    let members = &cluster.members;
    write_once_a_leader_serves(&members[0]).await;
    // One peer URL: first this build's answer to `/raft/features`, then an older build's 404.
    let newer_build = Arc::new(AtomicBool::new(true));
    let peer_url = spawn_peer_answering_features(newer_build.clone()).await;
    let node = peer_node(peer_url);
    let mark = || AdminRequest::AddLearnerToPromote {
        id: 4,
        node: node.clone(),
        max_lag_entries: None,
    };
    members[0]
        .admin(mark())
        .await
        .expect("marked while it says its build reads the intent");
    // A gated write while learner 4 is a member: the leader asks it and keeps its answer.
    members[0]
        .write(nested_put("asked"))
        .await
        .expect("a nested txn every member reads");
    members[0]
        .admin(AdminRequest::Remove { id: 4 })
        .await
        .expect("member 4 removed");

    newer_build.store(false, Ordering::SeqCst);
    let refused = members[0].admin(mark()).await;
    let Err(revkv_raft::MemberError::Refused(message)) = refused else {
        panic!("the removed member's answer vouched for another process: {refused:?}");
    };
    assert!(
        message.contains("member 4 runs a build without it"),
        "{message}"
    );
    for member in members {
        member.shutdown().await.unwrap();
    }
}

/// Writes one key through `member`, retrying until a leader is elected that serves it.
async fn write_once_a_leader_serves(member: &revkv_raft::RaftMember) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while member.write(put("plain", "1")).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A member that serves no client API, listening for peers at `peer_url`.
fn peer_node(peer_url: String) -> revkv_raft::MemberNode {
    revkv_raft::MemberNode {
        peer_url,
        client_url: String::new(),
        grpc_url: None,
    }
}

/// A peer listener that answers `/raft/features` as this build does while `newer_build` holds,
/// and 404 (an older build's answer) otherwise; nothing else. Answers its URL.
async fn spawn_peer_answering_features(newer_build: Arc<AtomicBool>) -> String {
    let features = axum::routing::post(move || {
        let newer = newer_build.load(Ordering::SeqCst);
        async move {
            use axum::response::IntoResponse;
            if !newer {
                return axum::http::StatusCode::NOT_FOUND.into_response();
            }
            let names = vec![
                "txn-extensions".to_string(),
                "learner-promotion".to_string(),
            ];
            let reply: Result<Vec<String>, revkv_raft::peer::PeerError> = Ok(names);
            let body = revkv_storage::codec::encode(&reply).unwrap();
            (axum::http::StatusCode::OK, body).into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer_url = format!("http://{}", listener.local_addr().unwrap());
    let router = axum::Router::new().route(paths::FEATURES, features);
    tokio::spawn(async move { axum::serve(listener, router).await });
    peer_url
}

/// A learner marked to be promoted that moves (`member update`, etcd's `MemberUpdate`) takes its
/// mark along: the intent names the new peer URL on every member, or it would never apply again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_learner_that_moves_keeps_its_mark_at_the_new_url() {
    let cluster = start_cluster(3).await;
    let members = &cluster.members;
    write_once_a_leader_serves(&members[0]).await;
    let old_url = spawn_peer_answering_features(Arc::new(AtomicBool::new(true))).await;
    let mark = AdminRequest::AddLearnerToPromote {
        id: 4,
        node: peer_node(old_url.clone()),
        max_lag_entries: Some(7),
    };
    members[0].admin(mark).await.expect("learner 4 marked");
    // The new URL is not served yet, as when a member is moved before it restarts there.
    let new_url = "http://127.0.0.1:9".to_string();
    let update = AdminRequest::UpdateNode {
        id: 4,
        node: peer_node(new_url.clone()),
    };
    members[0].admin(update).await.expect("learner 4 moved");
    let marker = members[0].write(put("after-move", "1")).await.unwrap();
    for member in members {
        member
            .wait_for_revision(marker.revision, Duration::from_secs(30))
            .await
            .unwrap();
        let intents = member.store().learner_promotions().unwrap();
        let held: Vec<(u64, &str, u64)> = intents
            .iter()
            .map(|intent| {
                (
                    intent.member_id,
                    intent.peer_url.as_str(),
                    intent.max_lag_entries,
                )
            })
            .collect();
        assert_eq!(
            held,
            vec![(4, new_url.as_str(), 7)],
            "member {}",
            member.id()
        );
    }
    for member in members {
        member.shutdown().await.unwrap();
    }
}

/// An intent whose add never happened (here written alone, as when an add's outcome is unknown
/// after its intent was written, or its call was cancelled) names a member the membership does
/// not hold; the leader forgets it once it has been stranded for `stranded_intent_grace`, so it
/// cannot hold one of the store's places for intents forever. Without the reaper it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_whose_learner_never_joins_is_forgotten_after_its_grace() {
    let grace = Duration::from_millis(500);
    let cluster = support::start_cluster_with(3, |config| {
        config.learner_promotion.stranded_intent_grace = grace;
    })
    .await;
    let members = &cluster.members;
    write_once_a_leader_serves(&members[0]).await;
    let stranded = revkv_storage::LearnerPromotion {
        member_id: 9,
        peer_url: "http://127.0.0.1:9".to_owned(),
        max_lag_entries: 10,
    };
    let intend = revkv_storage::LearnerPromotionChange::Intend(stranded.clone());
    members[0]
        .write(revkv_storage::Request::LearnerPromotion(intend))
        .await
        .expect("the intent is written");
    assert_eq!(
        members[0].store().learner_promotions().unwrap(),
        vec![stranded],
        "written and applied on the member that wrote it"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for member in members {
        while !member.store().learner_promotions().unwrap().is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "member {} still holds the stranded intent",
                member.id()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for member in members {
        member.shutdown().await.unwrap();
    }
}
