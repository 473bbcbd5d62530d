//! Three-way merge on a real three-member cluster of `revkv serve` processes: two writers, each
//! on its own member, update different fields of one JSON key concurrently for many rounds. In
//! each round both read the key at one revision, then both write with `merge=three-way` and
//! `If-Match` at that revision, so whichever lands second must be merged. No update is lost, no
//! round conflicts, and the members count exactly one `resolution="merged"` conflict per round.
//! Then the Rust client's `update_with_merge` does the same without lockstep, and the key's
//! history (`Client::history`, paged) holds every one of those writes, oldest first.

use crate::process_cluster;

use std::sync::Arc;

use process_cluster::{cluster_options, MemberClient, ProcessCluster};
use reqwest::{Method, StatusCode};
use revkv_client::Client;
use serde_json::{json, Value};
use tokio::sync::Barrier;

const KEY: &str = "doc/merged";
const ROUNDS: u64 = 40;
const MERGED_SERIES: &[(&str, &str)] =
    &[("op", "put"), ("prefix", "doc"), ("resolution", "merged")];

/// One writer's rounds: read, wait for the other writer to have read too, bump `field` with a
/// merge put, wait for the other's write. Answers how many of its writes were merged.
async fn write_rounds(client: MemberClient, field: &'static str, barrier: Arc<Barrier>) -> u64 {
    let mut merged = 0;
    for _ in 0..ROUNDS {
        let read = client.get(&format!("/v1/kv/{KEY}")).await.expect_ok("read");
        let mut value: Value =
            serde_json::from_str(read.json["kv"]["value"].as_str().unwrap()).unwrap();
        let revision = read.json["kv"]["mod_revision"].as_u64().unwrap();
        value[field] = json!(value[field].as_u64().unwrap() + 1);
        barrier.wait().await;
        let answer = client
            .send(
                Method::PUT,
                &format!("/v1/kv/{KEY}?merge=three-way"),
                Some(json!({ "value": value.to_string() })),
                &[("if-match", &format!("\"{revision}\""))],
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
        assert_eq!(answer.json["merged_fields"], json!([format!("/{field}")]));
        merged += u64::from(answer.json["merged"] == json!(true));
        barrier.wait().await;
    }
    merged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_of_disjoint_fields_lose_no_update_and_each_round_merges_once() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let ids = cluster.ids();
    cluster.client(ids[0]).put_ok(KEY, r#"{"a":0,"b":0}"#).await;

    let barrier = Arc::new(Barrier::new(2));
    let first = tokio::spawn(write_rounds(
        cluster.client(ids[0]),
        "a",
        Arc::clone(&barrier),
    ));
    let second = tokio::spawn(write_rounds(cluster.client(ids[1]), "b", barrier));
    let merged = first.await.unwrap() + second.await.unwrap();
    assert_eq!(merged, ROUNDS, "the second write of each round is merged");

    let read = cluster
        .client(ids[2])
        .get(&format!("/v1/kv/{KEY}"))
        .await
        .expect_ok("read");
    let value: Value = serde_json::from_str(read.json["kv"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(value, json!({"a": ROUNDS, "b": ROUNDS}), "no update lost");

    let mut counted = 0.0;
    for id in &ids {
        let text = cluster.client(*id).metrics_text().await;
        counted += labelled_sample(&text, "revkv_conflicts_total", MERGED_SERIES);
    }
    assert_eq!(
        counted, merged as f64,
        "every merge counted once, where it was answered"
    );
}

const CLIENT_KEY: &str = "doc/client";
const CLIENT_UPDATES: u64 = 20;

/// Adds 1 to `field` of the client key `CLIENT_UPDATES` times with `update_with_merge`.
async fn bump_with_client(client: Client, field: &'static str) -> u64 {
    let mut merged = 0;
    for _ in 0..CLIENT_UPDATES {
        let answer = client
            .update_with_merge(CLIENT_KEY, |mut value| {
                value[field] = json!(value[field].as_u64().unwrap() + 1);
                value
            })
            .await
            .expect("disjoint fields never really conflict");
        merged += u64::from(answer.merged);
    }
    merged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_merge_loses_no_update_and_history_shows_every_write() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let endpoints = cluster.client_urls();
    let setup = Client::new(endpoints.clone()).unwrap();
    let created = setup.put(CLIENT_KEY, r#"{"x":0,"y":0}"#).await.unwrap();
    let first = Client::new(vec![endpoints[0].clone()]).unwrap();
    let second = Client::new(vec![endpoints[1].clone()]).unwrap();
    let writers = [
        tokio::spawn(bump_with_client(first, "x")),
        tokio::spawn(bump_with_client(second, "y")),
    ];
    let mut merged = 0;
    for writer in writers {
        merged += writer.await.unwrap();
    }
    let now = setup.get(CLIENT_KEY).await.unwrap().kv;
    let value: Value = serde_json::from_str(&now.value).unwrap();
    assert_eq!(value, json!({"x": CLIENT_UPDATES, "y": CLIENT_UPDATES}));
    eprintln!(
        "{merged} of {} client updates were merged",
        2 * CLIENT_UPDATES
    );

    let mut versions = Vec::new();
    let mut page = setup
        .history(CLIENT_KEY, Some(created.header.revision), Some(7))
        .await
        .unwrap();
    loop {
        versions.extend(page.versions.clone());
        let Some(token) = page.continue_token.clone().filter(|_| page.more) else {
            break;
        };
        page = setup
            .history_after(CLIENT_KEY, &token, Some(7))
            .await
            .unwrap();
    }
    assert_eq!(versions.len() as u64, 1 + 2 * CLIENT_UPDATES);
    let revisions: Vec<u64> = versions
        .iter()
        .map(|version| version.kv.mod_revision)
        .collect();
    assert!(
        revisions.windows(2).all(|pair| pair[0] < pair[1]),
        "oldest first"
    );
    assert_eq!(versions.last().unwrap().kv, now);
}

/// The value of the sample of `name` carrying every one of `labels` (0 when there is none).
fn labelled_sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter(|rest| {
            labels
                .iter()
                .all(|(label, value)| rest.contains(&format!("{label}=\"{value}\"")))
        })
        .filter_map(|rest| rest.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}
