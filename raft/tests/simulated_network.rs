//! Three members on a simulated peer network (`revkv_raft::peer::simulated`), all on the test's
//! one thread, with its blocking work inline and tokio's clock paused: the first whole cluster
//! with no socket, no thread and no wall clock, the ground the deterministic simulator (issue 37)
//! builds on. It elects a leader, replicates through forwarded writes, loses the leader behind a
//! partition, elects another, and catches the old leader up once the partition heals.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use revkv_raft::peer::simulated::{LoopbackNetwork, PeerListener, PeerNetwork};
use revkv_raft::{MemberNode, RaftMember};
use tokio::time::Instant;

use crate::support::{local_value, member_config, nested_put, put};

/// How long (in the paused clock's time) anything the test waits for may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// Three members on `network`, at addresses no socket has.
async fn start_members(network: &Arc<LoopbackNetwork>, dir: &std::path::Path) -> Vec<RaftMember> {
    let addresses: BTreeMap<u64, SocketAddr> = (1..=3)
        .map(|id| (id, SocketAddr::from(([10, 0, 0, id as u8], 2380))))
        .collect();
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
        let mut config = member_config(id, dir, address, &initial_cluster);
        config.peer_network = PeerNetwork::simulated(network.link(id, address));
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

/// Waits until every one of `members` names `leader` as its leader.
async fn wait_until_every_member_names(members: &[RaftMember], leader: u64) {
    let deadline = Instant::now() + DEADLINE;
    while members
        .iter()
        .any(|member| member.status().leader != Some(leader))
    {
        assert!(
            Instant::now() < deadline,
            "the members never all named member {leader} as their leader"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn three_members_on_one_thread_elect_replicate_and_survive_a_partition_without_sockets() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(LoopbackNetwork::default());
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
    let delivered_before_partition = network.delivered();
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
    assert!(network.lost() > 0);

    // Healed: the old leader learns the new term and catches up.
    network.heal();
    wait_for_key(isolated, "during").await;
    for member in &members {
        member.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}

/// The ids of the members `member` lists (the committed configuration), and of those its log's
/// latest configuration names, committed or not.
fn listed_ids(member: &RaftMember) -> (Vec<u64>, Vec<u64>) {
    let applied = member.members();
    let latest = member.members_including_pending_change();
    (
        applied.iter().map(|listed| listed.id).collect(),
        latest.iter().map(|listed| listed.id).collect(),
    )
}

/// `member list` shows only committed configuration, as etcd shows only configuration that took
/// effect: a learner added on a leader cut off from both followers sits uncommitted in that
/// leader's log (its latest configuration names it) and is not listed; once the cut heals, the new leader's
/// log replaces the uncommitted change, and no member lists the learner.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_uncommitted_member_add_is_not_listed() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(LoopbackNetwork::default());
    let members = start_members(&network, dir.path()).await;
    write_until_committed(&members[0], "settled").await;
    let leader_id = members[0].status().leader.expect("a leader");
    let leader = members
        .iter()
        .find(|member| member.id() == leader_id)
        .expect("the leader");
    assert_eq!(listed_ids(leader), (vec![1, 2, 3], vec![1, 2, 3]));

    network.isolate(leader_id);
    let learner = MemberNode {
        peer_url: "http://10.0.0.4:2380".into(),
        client_url: String::new(),
        grpc_url: None,
    };
    let add = revkv_raft::AdminRequest::AddLearner {
        id: 4,
        node: learner,
    };
    let answered = tokio::time::timeout(Duration::from_secs(10), leader.admin(add)).await;
    assert!(
        !matches!(answered, Ok(Ok(()))),
        "an add without a quorum was answered done"
    );
    let (applied, latest) = listed_ids(leader);
    assert_eq!(latest, vec![1, 2, 3, 4], "the add is in the leader's log");
    assert_eq!(applied, vec![1, 2, 3], "an uncommitted add is listed");

    network.heal();
    let deadline = Instant::now() + DEADLINE;
    while listed_ids(leader).1 != vec![1, 2, 3] {
        assert!(
            Instant::now() < deadline,
            "the uncommitted add was never replaced"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for member in &members {
        assert_eq!(
            listed_ids(member).0,
            vec![1, 2, 3],
            "member {}",
            member.id()
        );
        member.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}

/// A leader cut off from both followers stops claiming leadership once no quorum has answered it
/// for its lease (the longest election timeout), as etcd's leader steps down under CheckQuorum:
/// its status names no leader while its role stays leader (openraft keeps it, and refuses it new
/// writes). The other two elect a leader of their own; once the cut heals, all three name that one.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_leader_cut_off_from_a_quorum_stops_claiming_leadership() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(LoopbackNetwork::default());
    let members = start_members(&network, dir.path()).await;
    write_until_committed(&members[0], "settled").await;
    let old_leader_id = members[0].status().leader.expect("a leader");
    let old_leader = members
        .iter()
        .find(|member| member.id() == old_leader_id)
        .expect("the leader");
    assert_eq!(old_leader.status().leader, Some(old_leader_id));

    network.isolate(old_leader_id);
    let deadline = Instant::now() + DEADLINE;
    while old_leader.status().leader.is_some() {
        assert!(
            Instant::now() < deadline,
            "the cut-off leader still claims leadership"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(old_leader.status().role, revkv_raft::MemberRole::Leader);
    let others: Vec<&RaftMember> = members
        .iter()
        .filter(|member| member.id() != old_leader_id)
        .collect();
    write_until_committed(others[0], "after the cut").await;
    let new_leader = others[0].status().leader.expect("a leader among the two");
    assert_ne!(new_leader, old_leader_id);
    assert_eq!(
        old_leader.status().leader,
        None,
        "the cut-off leader claims again"
    );

    network.heal();
    wait_until_every_member_names(&members, new_leader).await;
    for member in &members {
        member.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}

/// A follower cut off from the others keeps its term with Pre-Vote (its pre-votes fail, so it
/// never campaigns and never disturbs the leader when it comes back), and its status stops naming
/// the leader once the leader has been silent for its lease, as etcd's pre-candidate forgets its
/// leader. The other two keep their leader throughout; after the heal all three name it again.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_follower_cut_off_keeps_its_term_and_stops_naming_the_leader() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(LoopbackNetwork::default());
    let members = start_members(&network, dir.path()).await;
    write_until_committed(&members[0], "settled").await;
    let leader_id = members[0].status().leader.expect("a leader");
    let follower = members
        .iter()
        .find(|member| member.id() != leader_id)
        .expect("a follower");
    let term_before = follower.status().term;
    assert_eq!(follower.status().leader, Some(leader_id));

    network.isolate(follower.id());
    let deadline = Instant::now() + DEADLINE;
    while follower.status().leader.is_some() {
        assert!(
            Instant::now() < deadline,
            "the cut-off follower still names its leader"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Several election timeouts of failed pre-votes later, the term has not moved.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        follower.status().term,
        term_before,
        "a pre-vote raised the term"
    );
    let others: Vec<&RaftMember> = members
        .iter()
        .filter(|member| member.id() != follower.id())
        .collect();
    write_until_committed(others[0], "during the cut").await;
    assert!(others
        .iter()
        .all(|member| member.status().leader == Some(leader_id)));

    network.heal();
    wait_until_every_member_names(&members, leader_id).await;
    assert_eq!(
        follower.status().term,
        term_before,
        "the heal disturbed the leader"
    );
    for member in &members {
        member.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_nested_txn_waits_until_every_member_says_its_build_reads_it() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(LoopbackNetwork::default());
    let members = start_members(&network, dir.path()).await;
    write_until_committed(&members[0], "plain").await;
    let leader_id = members[0].status().leader.expect("a leader");
    let leader = members
        .iter()
        .find(|member| member.id() == leader_id)
        .expect("the leader");
    wait_until_every_member_names(&members, leader_id).await;

    // The leader's first question to one follower is lost: it cannot tell that member's build,
    // so the nested txn waits (unavailable, worth a retry; nothing says a build lacks it),
    // naming it, and nothing is written.
    leader
        .peer_faults()
        .lose_next_calls(revkv_raft::peer::paths::FEATURES, 1);
    let refused = leader.write(nested_put("gated")).await;
    let Err(revkv_raft::MemberError::NoLeader(message)) = refused else {
        panic!("a nested txn went ahead without every member's answer: {refused:?}");
    };
    assert!(message.contains("did not say"), "{message}");
    assert_eq!(local_value(leader, "gated"), None);

    // Every member answers now: the txn is appended and applied everywhere.
    leader
        .write(nested_put("gated"))
        .await
        .expect("every member reads nested txns");
    for member in &members {
        wait_for_key(member, "gated").await;
    }
    // The answers are remembered: a lost question no longer matters.
    leader
        .peer_faults()
        .lose_next_calls(revkv_raft::peer::paths::FEATURES, 2);
    leader
        .write(nested_put("again"))
        .await
        .expect("no member is asked twice");
    for member in &members {
        member.shutdown().await.expect("shutdown");
    }
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
}
