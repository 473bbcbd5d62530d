//! Learners that promote themselves (issue 65, item 4) in a real cluster of `revkv serve`
//! processes: a learner added with `auto_promote` becomes a voter once it has caught up, with no
//! further call, while writes go on; a learner that cannot catch up (its process paused) is never
//! promoted, the leader's lag gauge showing it past its bound; and when the leader that accepted the
//! intent dies, the next leader promotes the learner once it catches up. etcd's `MemberAdd` over
//! gRPC does the same with revkv's metadata, and refuses it on a voter's add. A manual promote
//! of a learner that has not caught up is refused as etcd refuses it, until it has.

use crate::membership::membership_of;
use crate::process_cluster;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use process_cluster::{cluster_options, wait_until, ProcessCluster, CONVERGENCE_TIMEOUT};
use reqwest::StatusCode;
use revkv_tools::etcd_api::{pb, ConnectOptions, EtcdClient};
use serde_json::json;

/// The value of a series (its name with labels, as exposed) in a metrics exposition.
fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.split_whitespace().next() == Some(series))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
}

/// Polls member `id` until its membership lists `member` with `is_learner`.
async fn wait_until_listed(cluster: &ProcessCluster, id: u64, member: u64, is_learner: bool) {
    let what = format!("member {id} to list member {member} with is_learner {is_learner}");
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        let answer = cluster.client(id).get("/v1/members").await;
        let listed = answer.status == StatusCode::OK
            && membership_of(&answer.json).contains(&(member, is_learner));
        listed.then_some(())
    })
    .await;
}

/// Automatic promotions member `id` has made.
async fn promotions_made(cluster: &ProcessCluster, id: u64) -> f64 {
    let text = cluster.client(id).metrics_text().await;
    metric_value(&text, "revkv_learner_auto_promotions_total").unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_added_to_be_promoted_becomes_a_voter_once_caught_up_while_writes_go_on() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    for index in 0..30 {
        let key = format!("promote/early/{index:02}");
        cluster.client(1 + index % 3).put_ok(&key, "early").await;
    }
    let leader = cluster.leader().await;
    let follower = *cluster.ids().iter().find(|id| **id != leader).unwrap();
    let joining = cluster.start_joining_member(4).await;
    let body = json!({ "id": 4, "peer_url": joining.peer_url(),
                       "client_url": joining.client_url(), "auto_promote": true });
    // Through a follower, which forwards the change to the leader.
    let added = cluster
        .client(follower)
        .post("/v1/members", body)
        .await
        .expect_ok("add member 4 to be promoted");
    assert!(
        membership_of(&added.json)
            .iter()
            .any(|member| member.0 == 4),
        "the answer lists the new member: {}",
        added.json
    );
    // Writes go on while it catches up; it is promoted with no further call.
    for index in 0..30 {
        let key = format!("promote/late/{index:02}");
        cluster.client(leader).put_ok(&key, "late").await;
    }
    for id in [1, 2, 3, 4] {
        wait_until_listed(&cluster, id, 4, false).await;
    }
    // The leader counts and logs the promotion once its change is done, a round after the
    // membership first lists member 4 as a voter.
    wait_until(
        "the leader to count the promotion",
        CONVERGENCE_TIMEOUT,
        async || (promotions_made(&cluster, leader).await == 1.0).then_some(()),
    )
    .await;
    assert!(cluster
        .log_text(leader)
        .contains("promoted learner 4 automatically"));
    let marker = cluster
        .client(leader)
        .put_ok("promote/marker", "voter")
        .await;
    cluster.wait_for_same_revision(&[1, 2, 3, 4], marker).await;
    assert_eq!(
        cluster
            .client(4)
            .local_value("promote/early/00")
            .await
            .as_deref(),
        Some("early")
    );
}

/// Has the leader ask every member, learner `learner` included, for its features: a txn that
/// compares over a key range needs `txn-extensions`, and the leader keeps every feature a
/// member's answer names, `learner-promotion` among them, for as long as the member keeps its
/// id and peer URL. (The txn writes: a txn that only reads is not a log entry and asks nobody.)
async fn have_the_leader_ask_every_member_for_its_features(cluster: &ProcessCluster) {
    let mut client = Client::connect(cluster.grpc_endpoints(), None)
        .await
        .expect("connect over gRPC");
    let compare = Compare::version("features/", CompareOp::Equal, 0).with_range("features0");
    let answer = client
        .txn(
            Txn::new()
                .when([compare])
                .and_then([TxnOp::put("features/asked", "yes", None)]),
        )
        .await
        .expect("a txn comparing over a range, which every member can read");
    assert!(answer.succeeded(), "no key under features/ exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_cannot_catch_up_waits_and_the_next_leader_promotes_it_once_it_can() {
    let mut cluster = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    cluster.wait_for_published_client_urls().await;
    let leader = cluster.leader().await;
    let joining = cluster.start_joining_member(4).await;
    let (peer_url, client_url) = (joining.peer_url(), joining.client_url());
    let plain = json!({ "id": 4, "peer_url": peer_url, "client_url": client_url });
    cluster
        .client(leader)
        .post("/v1/members", plain)
        .await
        .expect_ok("add member 4 as a plain learner");
    have_the_leader_ask_every_member_for_its_features(&cluster).await;
    // Paused, learner 4 receives nothing more and answers nothing: it falls behind.
    cluster.pause(4);
    for index in 0..20 {
        let key = format!("waiting/{index:02}");
        cluster.client(leader).put_ok(&key, "v").await;
    }
    // Marking it to be promoted needs nothing from it: the leader has its features already.
    let to_promote = json!({ "id": 4, "peer_url": peer_url,
                             "client_url": client_url, "auto_promote": true,
                             "auto_promote_max_lag": 5 });
    let marked = cluster
        .client(leader)
        .post("/v1/members", to_promote)
        .await
        .expect_ok("mark learner 4 to be promoted");
    // The membership shows the mark, with its bound, on the learner only.
    let bounds: Vec<(u64, Option<u64>)> = marked.json["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|member| {
            (
                member["id"].as_u64().unwrap(),
                member["auto_promote_max_lag"].as_u64(),
            )
        })
        .collect();
    assert_eq!(bounds, [(1, None), (2, None), (3, None), (4, Some(5))]);
    // The leader looks at it, at least 20 entries behind against a bound of 5, and leaves it a
    // learner.
    let series = "revkv_learner_lag_entries{member=\"4\"}";
    wait_until(
        "the leader to show learner 4 waiting, past its bound",
        CONVERGENCE_TIMEOUT,
        async || {
            let text = cluster.client(leader).metrics_text().await;
            let lag = metric_value(&text, series)?;
            (lag >= 20.0).then_some(())
        },
    )
    .await;
    wait_until_listed(&cluster, leader, 4, true).await;
    assert_eq!(promotions_made(&cluster, leader).await, 0.0);

    // The leader that accepted the intent dies; the next one goes on with it.
    cluster.kill(leader);
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let next_leader = cluster.wait_for_leader(&survivors).await;
    cluster.resume(4);
    wait_until_listed(&cluster, next_leader, 4, false).await;
    wait_until(
        "the next leader to count the promotion",
        CONVERGENCE_TIMEOUT,
        async || (promotions_made(&cluster, next_leader).await == 1.0).then_some(()),
    )
    .await;
    let marker = cluster
        .client(next_leader)
        .put_ok("waiting/marker", "v")
        .await;
    let mut caught_up = survivors.clone();
    caught_up.push(4);
    cluster.wait_for_same_revision(&caught_up, marker).await;
    // A voter shows no mark.
    wait_until(
        "member 4 listed without its mark",
        CONVERGENCE_TIMEOUT,
        async || {
            let members = cluster.client(next_leader).get("/v1/members").await;
            let listed = members.json["members"]
                .as_array()?
                .iter()
                .find(|member| member["id"] == 4)?
                .clone();
            listed.get("auto_promote_max_lag").is_none().then_some(())
        },
    )
    .await;
}

/// etcd's `MemberAdd` of `peer_url` over gRPC, with revkv's metadata `(name, value)` pairs.
async fn grpc_member_add(
    cluster: &ProcessCluster,
    peer_url: &str,
    is_learner: bool,
    metadata: &[(&'static str, &'static str)],
) -> Result<pb::MemberAddResponse, tonic::Status> {
    let client = EtcdClient::connect(&cluster.grpc_endpoints(), ConnectOptions::new())
        .await
        .expect("connect over gRPC");
    let mut request = tonic::Request::new(pb::MemberAddRequest {
        peer_ur_ls: vec![peer_url.to_string()],
        is_learner,
    });
    for (name, value) in metadata {
        request.metadata_mut().insert(*name, value.parse().unwrap());
    }
    client
        .cluster()
        .member_add(request)
        .await
        .map(|answer| answer.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_member_add_with_the_auto_promote_metadata_adds_a_learner_that_becomes_a_voter() {
    let mut cluster = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    cluster.wait_for_published_client_urls().await;
    let joining = cluster.start_joining_member(4).await;
    let peer_url = joining.peer_url();
    // Refused, with nothing added: the metadata on a voter's add, and a bound of no entries.
    let refusals = [
        (false, vec![("revkv-auto-promote", "true")]),
        (true, vec![("revkv-auto-promote", "yes")]),
        (
            true,
            vec![
                ("revkv-auto-promote", "true"),
                ("revkv-auto-promote-max-lag", "0"),
            ],
        ),
        (true, vec![("revkv-auto-promote-max-lag", "5")]),
    ];
    for (is_learner, metadata) in refusals {
        let refused = grpc_member_add(&cluster, &peer_url, is_learner, &metadata)
            .await
            .expect_err("a refused add");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().contains("revkv-auto-promote"),
            "{refused:?}"
        );
    }
    let members = cluster.client(1).get("/v1/members").await;
    assert_eq!(membership_of(&members.json).len(), 3, "{}", members.json);

    let metadata = [
        ("revkv-auto-promote", "true"),
        ("revkv-auto-promote-max-lag", "100"),
    ];
    let added = grpc_member_add(&cluster, &peer_url, true, &metadata)
        .await
        .expect("add member 4 as a learner to promote");
    let member = added.member.expect("the added member");
    assert_eq!((member.id, member.is_learner), (4, true));
    for id in [1, 2, 3, 4] {
        wait_until_listed(&cluster, id, 4, false).await;
    }
}

/// A manual promote (`POST /v1/members/{id}/promote`, etcd's `MemberPromote`) of a learner more
/// entries behind than the leader's `--auto-promote-max-lag` is refused as etcd refuses it
/// (`ErrLearnerNotReady`: gRPC `FailedPrecondition` with etcd's words; HTTP 503 `unavailable`
/// with `Retry-After`), and the membership is unchanged; once the learner has caught up, the same
/// promote succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_promote_of_a_learner_behind_is_refused_until_it_has_caught_up() {
    let options = cluster_options()
        .with_grpc()
        .with_flags(&["--auto-promote-max-lag", "5"]);
    let mut cluster = ProcessCluster::start(3, options).await;
    cluster.wait_for_published_client_urls().await;
    let leader = cluster.leader().await;
    let joining = cluster.start_joining_member(4).await;
    let plain = json!({ "id": 4, "peer_url": joining.peer_url(),
                        "client_url": joining.client_url() });
    cluster
        .client(leader)
        .post("/v1/members", plain)
        .await
        .expect_ok("add member 4 as a learner");
    // Paused, learner 4 receives nothing more: 20 writes put it at least 20 entries behind.
    cluster.pause(4);
    for index in 0..20 {
        let key = format!("behind/{index:02}");
        cluster.client(leader).put_ok(&key, "v").await;
    }
    let client = EtcdClient::connect(&cluster.grpc_endpoints(), ConnectOptions::new())
        .await
        .expect("connect over gRPC");
    let refused = client
        .cluster()
        .member_promote(pb::MemberPromoteRequest { id: 4 })
        .await
        .expect_err("a promote of a learner 20 entries behind, past a bound of 5");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert_eq!(
        refused.message(),
        "etcdserver: can only promote a learner member which is in sync with leader"
    );
    let over_http = cluster
        .client(leader)
        .post("/v1/members/4/promote", json!({}))
        .await;
    assert_eq!(
        over_http.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        over_http.json
    );
    assert_eq!(over_http.error_code(), "unavailable");
    assert_eq!(over_http.header("retry-after"), Some("1"));
    let message = over_http.json["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("learner 4"), "{message}");
    wait_until_listed(&cluster, leader, 4, true).await;

    cluster.resume(4);
    wait_until(
        "the promote of learner 4 to succeed once it has caught up",
        CONVERGENCE_TIMEOUT,
        async || {
            let answer = cluster
                .client(leader)
                .post("/v1/members/4/promote", json!({}))
                .await;
            (answer.status == StatusCode::OK).then_some(())
        },
    )
    .await;
    for id in [1, 2, 3, 4] {
        wait_until_listed(&cluster, id, 4, false).await;
    }
}
