//! A leader cut off from both followers, with real member processes and the chaos harness's link
//! proxies (issue 63, item 2): once no quorum has answered it for its lease (the longest election
//! timeout), its `/v1/status` names no leader and a write to it is refused at once with 503
//! rather than waiting out the request timeout; the other two elect a leader of their own; after
//! the cut heals all three name that one. etcd's leader steps down the same way (CheckQuorum),
//! and its `/health` then says `RAFT NO LEADER`, which revkv's etcd port derives from the same
//! status.

use crate::process_cluster;

use std::path::Path;
use std::time::Duration;

use revkv_tools::chaos::members::Members;
use revkv_tools::chaos::proxy::LinkRule;
use serde_json::Value;
use tokio::time::Instant;

/// The longest any wait here may take (elections under the harness's fast timing take about a
/// second).
const DEADLINE: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

async fn status_of(http: &reqwest::Client, members: &Members, id: u64) -> Option<Value> {
    let url = format!("{}/v1/status", members.client_url(id));
    let answer = http.get(url).send().await.ok()?;
    answer.json().await.ok()
}

/// Polls member `id`'s status until `holds` says so.
async fn wait_for_status(
    http: &reqwest::Client,
    members: &Members,
    id: u64,
    what: &str,
    holds: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = status_of(http, members, id).await {
            if holds(&status) {
                return status;
            }
        }
        assert!(Instant::now() < deadline, "member {id}: {what}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_a_quorum_stops_claiming_leadership() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let binary = Path::new(process_cluster::REVKV_BINARY);
    let members = Members::start(binary, directory.path(), 3, 1)
        .await
        .expect("three members start");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client");
    let deadline = Instant::now() + DEADLINE;
    let old_leader = loop {
        if let Some(leader) = members.leader().await {
            break leader;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(POLL_INTERVAL).await;
    };
    let others: Vec<u64> = members
        .ids()
        .into_iter()
        .filter(|id| *id != old_leader)
        .collect();
    let cut = LinkRule {
        blocked: true,
        ..LinkRule::default()
    };
    members.link_rules().set_between(old_leader, &others, cut);

    let status = wait_for_status(
        &http,
        &members,
        old_leader,
        "still claims leadership",
        |s| s["leader_id"].is_null(),
    )
    .await;
    assert_eq!(
        status["role"], "leader",
        "openraft keeps the role: {status}"
    );
    let put = http
        .put(format!("{}/v1/kv/cut-off", members.client_url(old_leader)))
        .json(&serde_json::json!({ "value": "lost" }))
        .send()
        .await
        .expect("an answer");
    assert_eq!(put.status().as_u16(), 503, "{:?}", put.text().await);
    let named = |status: &Value| status["leader_id"].as_u64();
    let elected = wait_for_status(&http, &members, others[0], "no new leader", |status| {
        named(status).is_some_and(|leader| leader != old_leader)
    })
    .await;
    let new_leader = named(&elected).expect("a leader");

    members.link_rules().heal();
    for id in members.ids() {
        wait_for_status(
            &http,
            &members,
            id,
            "does not name the new leader",
            |status| named(status) == Some(new_leader),
        )
        .await;
    }
}
