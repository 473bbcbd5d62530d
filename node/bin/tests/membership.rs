//! Membership and leadership changes in a real cluster of `revkv serve` processes: the founding
//! members publish their client URLs, even a founder that waited alone long before the others
//! started; a fourth, empty process started with `--join` is added as a
//! learner, promoted to a voter and serves current data; a founding member (the leader) is removed
//! and the remaining three keep working; a leader transfer moves leadership where it was asked
//! to; and leadership is not handed to a member the leader has not heard from.

use crate::process_cluster;

use process_cluster::{
    cluster_options, failed_vote_requests, wait_until, Answer, ProcessCluster, CONVERGENCE_TIMEOUT,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A short request timeout: it bounds each attempt to publish a client URL while no leader is
/// known, so the window after which publishing used to give up (20 such attempts) ends after
/// about 4 s.
const SHORT_REQUEST_TIMEOUT_MS: u64 = 200;

/// How many elections the first founder starts and loses alone before the others start: each
/// takes at least the harness's election timeout (300 ms), so 30 take at least 9 s, past the old
/// give-up window above.
const ELECTIONS_ALONE: usize = 30;

/// Polls `GET /v1/members` on every member in `among` until each lists exactly `expected`, as
/// `(id, is_learner)` pairs in id order; returns the last listing.
async fn wait_for_membership(cluster: &ProcessCluster, among: &[u64], expected: &[(u64, bool)]) {
    let what = format!("members {among:?} to list the membership {expected:?}");
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        for id in among {
            let answer = cluster.client(*id).get("/v1/members").await;
            if answer.status != StatusCode::OK || membership_of(&answer.json) != expected {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// `(id, is_learner)` of every member in a `GET /v1/members` answer, in id order.
pub(crate) fn membership_of(answer: &Value) -> Vec<(u64, bool)> {
    let mut members: Vec<(u64, bool)> = answer["members"]
        .as_array()
        .map(|members| {
            members
                .iter()
                .filter_map(|member| {
                    Some((member["id"].as_u64()?, member["is_learner"].as_bool()?))
                })
                .collect()
        })
        .unwrap_or_default();
    members.sort();
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_member_is_added_promoted_and_a_founder_removed_while_the_cluster_serves() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    for index in 0..20 {
        cluster
            .client(1 + index % 3)
            .put_ok(
                &format!("members/early/{index:02}"),
                &format!("early {index}"),
            )
            .await;
    }
    let leader = cluster.leader().await;
    let follower = *cluster
        .ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");

    let joining = cluster.start_joining_member(4).await;
    let (peer_url, client_url) = (joining.peer_url(), joining.client_url());
    let new_member = cluster.client(4);
    assert!(
        !new_member.is_ready().await,
        "a joining member that was not added yet has no leader"
    );

    // Added through a follower, which forwards the change to the leader.
    let added = cluster
        .client(follower)
        .post(
            "/v1/members",
            json!({ "id": 4, "peer_url": peer_url, "client_url": client_url }),
        )
        .await
        .expect_ok("add member 4 as a learner");
    assert!(
        membership_of(&added.json).contains(&(4, true)),
        "the answer lists the learner: {}",
        added.json
    );
    let listed = added.json["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|member| member["id"] == 4)
        .expect("member 4 listed")
        .clone();
    assert_eq!(listed["peer_url"], peer_url);
    assert_eq!(listed["client_url"], client_url);
    // The member that took the request already shows the change in its own list.
    let listed_there = cluster.client(follower).get("/v1/members").await;
    assert!(membership_of(&listed_there.json).contains(&(4, true)));
    let with_learner = [(1, false), (2, false), (3, false), (4, true)];
    wait_for_membership(&cluster, &[1, 2, 3, 4], &with_learner).await;

    // The learner has the data written before it joined.
    let latest = cluster
        .client(leader)
        .put_ok("members/marker", "learner")
        .await;
    let on_learner = new_member
        .get_key(
            "members/early/07",
            &format!("consistency=serializable&min_revision={latest}"),
        )
        .await
        .expect_ok("a serializable read on the learner");
    assert_eq!(on_learner.json["kv"]["value"], "early 7");

    let promoted = cluster
        .client(1)
        .post("/v1/members/4/promote", json!({}))
        .await
        .expect_ok("promote member 4");
    assert!(membership_of(&promoted.json).contains(&(4, false)));
    let four_voters = [(1, false), (2, false), (3, false), (4, false)];
    wait_for_membership(&cluster, &[1, 2, 3, 4], &four_voters).await;

    // The new voter serves linearizable reads of data written through another member.
    let written = cluster
        .client(follower)
        .put_ok("members/after-promotion", "voter")
        .await;
    let read = new_member
        .get_key("members/after-promotion", "")
        .await
        .expect_ok("a linearizable read on the promoted member");
    assert_eq!(read.json["kv"]["value"], "voter");
    assert_eq!(read.json["kv"]["mod_revision"], written);

    // Remove the current leader through another member: the hardest removal, since leadership
    // must move to one of the remaining three.
    let leader = cluster.leader().await;
    let asked = *[1, 2, 3, 4]
        .iter()
        .find(|id| **id != leader)
        .expect("another member");
    let removed = cluster
        .client(asked)
        .delete(&format!("/v1/members/{leader}"))
        .await
        .expect_ok(format_args!("remove member {leader}"));
    assert!(
        !membership_of(&removed.json)
            .iter()
            .any(|(id, _)| *id == leader),
        "the answer no longer lists member {leader}: {}",
        removed.json
    );
    let remaining: Vec<u64> = [1, 2, 3, 4]
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let three_voters: Vec<(u64, bool)> = remaining.iter().map(|id| (*id, false)).collect();
    wait_for_membership(&cluster, &remaining, &three_voters).await;
    // The operator stops the removed member; the other three carry on alone.
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader(&remaining).await;
    assert_ne!(new_leader, leader);

    let mut last_revision = 0;
    for (index, id) in remaining.iter().cycle().take(9).enumerate() {
        last_revision = cluster
            .client(*id)
            .put_retrying(
                &format!("members/late/{index}"),
                "after the removal",
                CONVERGENCE_TIMEOUT,
            )
            .await;
    }
    for id in &remaining {
        let read = cluster
            .client(*id)
            .get_key("members/late/8", "")
            .await
            .expect_ok(format_args!("a linearizable read on member {id}"));
        assert_eq!(read.json["kv"]["mod_revision"], last_revision);
    }
    let revision = cluster
        .wait_for_same_revision(&remaining, last_revision)
        .await;
    cluster.assert_same_hash(&remaining, revision).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_transfer_moves_leadership_to_the_named_member() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    let ids = cluster.ids();
    cluster.client(1).put_ok("transfer/key", "before").await;
    for round in 0..3 {
        let leader = cluster.leader().await;
        let target = ids[(ids.iter().position(|id| *id == leader).unwrap() + 1) % ids.len()];
        // Ask a member that is neither the leader nor the target, so the request is forwarded.
        let asked = *ids
            .iter()
            .find(|id| **id != leader && **id != target)
            .expect("a third member");
        cluster
            .client(asked)
            .post("/v1/leader/transfer", json!({ "to": target }))
            .await
            .expect_ok(format_args!(
                "round {round}: transfer from {leader} to {target}"
            ));
        let now_leading = cluster.wait_for_leader(&ids).await;
        assert_eq!(
            now_leading, target,
            "round {round}: leadership moved to the target"
        );
        let status = cluster
            .client(target)
            .status()
            .await
            .expect("the new leader's status");
        assert_eq!(status["role"], "leader");
        // Writes through the old leader reach the new one.
        let value = format!("after transfer {round}");
        let written = cluster.client(leader).put_ok("transfer/key", &value).await;
        let read = cluster
            .client(asked)
            .get_key("transfer/key", "")
            .await
            .expect_ok("a linearizable read after the transfer");
        assert_eq!(read.json["kv"]["value"], value);
        assert_eq!(read.json["kv"]["mod_revision"], written);
    }
    // Transferring to the member that already leads is accepted and changes nothing.
    let leader = cluster.leader().await;
    cluster
        .client(leader)
        .post("/v1/leader/transfer", json!({ "to": leader }))
        .await
        .expect_ok("a transfer to the current leader");
    assert_eq!(cluster.leader().await, leader);
}

/// Runs Debian's etcdctl 3.4 against `endpoint`: (success, stdout, stderr).
fn etcdctl(endpoint: &str, arguments: &[&str]) -> (bool, String, String) {
    const ETCDCTL: &str = "/usr/bin/etcdctl";
    assert!(
        std::path::Path::new(ETCDCTL).is_file(),
        "{ETCDCTL} is missing: install Debian's etcd-client (scripts/install-test-deps.sh)"
    );
    let output = std::process::Command::new(ETCDCTL)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=5s", "--command-timeout=30s"])
        .args(arguments)
        .output()
        .expect("run etcdctl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_member_add_adds_a_running_joining_member_by_its_peer_url() {
    let mut cluster = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    cluster.wait_for_published_client_urls().await;
    let written = cluster.client(1).put_ok("members/before-add", "v").await;
    let endpoint = cluster.grpc_endpoints()[0].clone();

    // Where no joining member answers, nothing is added and etcdctl says how to start one.
    let (added, _, said) = tokio::task::block_in_place(|| {
        etcdctl(
            &endpoint,
            &["member", "add", "ghost", "--peer-urls=http://127.0.0.1:9"],
        )
    });
    assert!(!added, "a peer URL nobody listens on is refused");
    assert!(said.contains("revkv serve --join"), "{said}");

    let joining = cluster.start_joining_member(4).await;
    let peer_urls = format!("--peer-urls={}", joining.peer_url());
    let (added, stdout, stderr) =
        tokio::task::block_in_place(|| etcdctl(&endpoint, &["member", "add", "m4", &peer_urls]));
    assert!(added, "etcdctl member add: {stdout} {stderr}");
    assert!(
        regex::Regex::new(r"Member\s+4 added to cluster")
            .unwrap()
            .is_match(&stdout),
        "etcdctl names the id the joining member chose: {stdout}"
    );
    let four_voters = [(1, false), (2, false), (3, false), (4, false)];
    wait_for_membership(&cluster, &[1, 2, 3, 4], &four_voters).await;
    let on_new_member = cluster
        .client(4)
        .get_key(
            "members/before-add",
            &format!("consistency=serializable&min_revision={written}"),
        )
        .await
        .expect_ok("a read on the added member");
    assert_eq!(on_new_member.json["kv"]["value"], "v");

    // It belongs to the cluster now: adding it again is refused and changes nothing.
    let (again, _, said) = tokio::task::block_in_place(|| {
        etcdctl(&endpoint, &["member", "add", "m4-again", &peer_urls])
    });
    assert!(!again, "a member is added once");
    assert!(said.contains("already"), "{said}");
    wait_for_membership(&cluster, &[1, 2, 3, 4], &four_voters).await;
}

/// The peer URL `GET /v1/members` on member `on` lists for member `id`.
async fn listed_peer_url(cluster: &ProcessCluster, on: u64, id: u64) -> Option<String> {
    let answer = cluster.client(on).get("/v1/members").await;
    let members = answer.json["members"].as_array()?.clone();
    let member = members.iter().find(|member| member["id"] == id)?;
    member["peer_url"].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_member_update_moves_a_member_to_a_new_peer_url() {
    let mut cluster = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    cluster.wait_for_published_client_urls().await;
    let leader = cluster.leader().await;
    let moved = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    // Membership changes run on the leader; ask it directly (the ids are 1 to 3, in order).
    let endpoint = cluster.grpc_endpoints()[leader as usize - 1].clone();

    // An id that is not a member is refused and changes nothing.
    let (updated, _, said) = tokio::task::block_in_place(|| {
        etcdctl(
            &endpoint,
            &["member", "update", "63", "--peer-urls=http://127.0.0.1:9"],
        )
    });
    assert!(!updated, "member 0x63 does not exist");
    assert!(said.contains("member not found"), "etcd's message: {said}");

    // The member moves to another port, as it would to another host, in etcd's order: stopped,
    // the membership updated (the other two are a quorum), then started where it now listens.
    cluster.stop(moved);
    let new_peer_url = cluster.move_peer_listener(moved);
    let peer_urls = format!("--peer-urls={new_peer_url}");
    let hex_id = format!("{moved:x}");
    let (updated, stdout, stderr) = tokio::task::block_in_place(|| {
        etcdctl(&endpoint, &["member", "update", &hex_id, &peer_urls])
    });
    assert!(updated, "etcdctl member update: {stdout} {stderr}");
    assert!(stdout.contains("updated in cluster"), "{stdout}");
    cluster.restart(moved).await;
    for on in cluster.ids() {
        let what = format!("member {on} to list member {moved} at {new_peer_url}");
        wait_until(what, CONVERGENCE_TIMEOUT, async || {
            let listed = listed_peer_url(&cluster, on, moved).await;
            (listed.as_deref() == Some(new_peer_url.as_str())).then_some(())
        })
        .await;
    }

    // Raft traffic follows: a write through the leader reaches the moved member.
    let written = cluster
        .client(leader)
        .put_ok("members/after-move", "v")
        .await;
    let query = format!("consistency=serializable&min_revision={written}");
    let what = format!("member {moved} to apply revision {written} at its new peer URL");
    let on_moved = wait_until(what, CONVERGENCE_TIMEOUT, async || {
        let answer = cluster
            .client(moved)
            .get_key("members/after-move", &query)
            .await;
        (answer.status == StatusCode::OK).then_some(answer.json)
    })
    .await;
    assert_eq!(on_moved["kv"]["value"], "v");
}

/// Asks member `asked` to hand leadership to member `to`.
async fn ask_for_transfer(cluster: &ProcessCluster, asked: u64, to: u64) -> Answer {
    cluster
        .client(asked)
        .post("/v1/leader/transfer", json!({ "to": to }))
        .await
}

/// A transfer to a member that has gone silent (frozen here) is refused with `unavailable`, and
/// the leader keeps leading and writing; once the member answers again, leadership can move to it.
/// openraft's leader stops its heartbeats while it transfers and never calls a transfer off, so
/// without the refusal the cluster had no writable leader until another member's election timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_not_handed_to_a_member_the_leader_has_not_heard_from() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    let ids = cluster.ids();
    let leader = cluster.leader().await;
    let silent = *ids.iter().find(|id| **id != leader).expect("a follower");
    let live: Vec<u64> = ids.iter().copied().filter(|id| *id != silent).collect();
    cluster
        .client(leader)
        .put_ok("transfer/silent", "before")
        .await;
    cluster.pause(silent);

    // A transfer asked while the leader still counts the member as live may be carried out and
    // move leadership elsewhere; the refusal comes once the member has been silent for an
    // election timeout, from whichever live member then leads.
    let asked = live[0];
    let refusal = wait_until(
        format!("a transfer to the silent member {silent} to be refused"),
        CONVERGENCE_TIMEOUT,
        async || {
            let answer = ask_for_transfer(&cluster, asked, silent).await;
            let message = answer.json["error"]["message"].as_str().unwrap_or_default();
            (answer.status == StatusCode::SERVICE_UNAVAILABLE
                && message.contains("has not answered the leader"))
            .then_some(answer)
        },
    )
    .await;
    refusal.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &[]);
    let message = refusal.json["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(&format!("member {silent} ")),
        "the refusal names the silent member: {message}"
    );

    // The refusal left the leader leading: it answers a write itself, and the live members
    // still agree that it leads.
    let leading = cluster.wait_for_leader(&live).await;
    cluster
        .client(leading)
        .put_ok("transfer/silent", "after")
        .await;
    assert_eq!(cluster.wait_for_leader(&live).await, leading);

    // Once the member answers again, leadership can move to it.
    cluster.resume(silent);
    wait_until(
        format!("a transfer to the resumed member {silent} to be carried out"),
        CONVERGENCE_TIMEOUT,
        async || {
            let answer = ask_for_transfer(&cluster, asked, silent).await;
            (answer.status == StatusCode::OK).then_some(())
        },
    )
    .await;
    assert_eq!(cluster.wait_for_leader(&ids).await, silent);
}

/// A founding member that comes up long before a quorum of its cluster keeps trying to publish its
/// client URL until it can (issue 33, item 9), and its status says it has: it used to give up
/// after 20 attempts, and `GET /v1/members` then showed it without a client URL for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_founding_member_publishes_its_client_url_however_late_its_quorum_comes_up() {
    let options = cluster_options().with_request_timeout_ms(SHORT_REQUEST_TIMEOUT_MS);
    let mut cluster = ProcessCluster::spawn_some_founders(3, options, &[1]);
    let what = format!("{ELECTIONS_ALONE} elections lost by the first founder alone");
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        let elections = failed_vote_requests(&cluster, 1, 2);
        (elections >= ELECTIONS_ALONE).then_some(())
    })
    .await;
    assert!(
        cluster.exited(1).is_none(),
        "the first founder is still running"
    );

    cluster.restart(2).await;
    cluster.restart(3).await;
    cluster.wait_for_published_client_urls().await;
    for id in cluster.ids() {
        let status = cluster.client(id).status().await.expect("status");
        assert_eq!(
            status["client_urls_published"], true,
            "member {id}: {status}"
        );
    }
}
