//! The Rust client (`revkv_client::Client`) against a real three-member cluster of `revkv serve`
//! processes: ten tasks each add 1 to one counter a hundred times with read-modify-write and
//! `retry_on_conflict`, through different members; the counter ends at exactly 1,000, the
//! conflicts the client met account for every attempt beyond the 1,000 that succeeded, and the
//! members' metrics agree with the client: `revkv_conflicts_total{op="put"}` and
//! `revkv_client_retries_total{op="put"}` (from `X-Retry-Attempt`), summed over the members, both
//! equal the conflicts the client counted.

use crate::process_cluster;

use std::time::Duration;

use process_cluster::{cluster_options, ProcessCluster};
use revkv_client::{
    retry_on_conflict_counted, Backoff, Client, ClientError, PutRequest, RetryTally, TokioSleeper,
};

const TASKS: usize = 10;
const INCREMENTS_PER_TASK: u64 = 100;
const COUNTER_KEY: &str = "counters/hits";

/// Ten writers on one key conflict often; client-go's presets (5 and 4 attempts) are meant for a
/// contended resource that still usually succeeds. This test needs every increment to land, so it
/// allows many attempts, with delays of 2-4 ms (full jitter spreads the writers apart).
const MANY_ATTEMPTS: Backoff = Backoff {
    duration: Duration::from_millis(2),
    factor: 1.0,
    jitter: 1.0,
    steps: 1000,
    cap: Duration::ZERO,
};

/// One increment: read the counter, write value + 1 only if nobody wrote in between.
async fn increment(client: &Client) -> Result<(), ClientError> {
    let current = client.get(COUNTER_KEY).await?.kv;
    let value: u64 = current.value.parse().expect("the counter holds a number");
    let request =
        PutRequest::new(COUNTER_KEY, (value + 1).to_string()).if_mod_revision(current.mod_revision);
    client.put_with(&request).await.map(|_| ())
}

/// Does `INCREMENTS_PER_TASK` increments; answers the attempts and conflicts they took.
async fn run_task(client: Client) -> RetryTally {
    let mut total = RetryTally::default();
    for _ in 0..INCREMENTS_PER_TASK {
        let (outcome, tally) =
            retry_on_conflict_counted(MANY_ATTEMPTS, &TokioSleeper, || increment(&client)).await;
        outcome.expect("an increment succeeds within its attempts");
        total.attempts += tally.attempts;
        total.conflicts += tally.conflicts;
    }
    total
}

/// The endpoints rotated by `offset`, so tasks start at different members.
fn rotated(endpoints: &[String], offset: usize) -> Vec<String> {
    let mut rotated = endpoints.to_vec();
    rotated.rotate_left(offset % endpoints.len());
    rotated
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_tasks_incrementing_one_counter_with_retry_on_conflict_end_at_exactly_one_thousand() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let endpoints = cluster.client_urls();
    let setup = Client::new(endpoints.clone()).unwrap();
    setup.put(COUNTER_KEY, "0").await.unwrap();

    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let client = Client::new(rotated(&endpoints, task)).unwrap();
            tokio::spawn(run_task(client))
        })
        .collect();
    let mut attempts = 0u64;
    let mut conflicts = 0u64;
    for task in tasks {
        let tally = task.await.unwrap();
        attempts += u64::from(tally.attempts);
        conflicts += u64::from(tally.conflicts);
    }

    let expected = TASKS as u64 * INCREMENTS_PER_TASK;
    for endpoint in &endpoints {
        let member = setup.for_member(endpoint).unwrap();
        assert_eq!(
            member.get(COUNTER_KEY).await.unwrap().kv.value,
            expected.to_string()
        );
    }
    assert_eq!(
        attempts,
        expected + conflicts,
        "every failed attempt was a conflict"
    );
    eprintln!("{expected} increments took {attempts} attempts ({conflicts} conflicts)");

    // Each conflict the client met was counted once, by the member that answered it, and each retry
    // the client sent (after every conflict, since every increment finally landed) carried
    // `X-Retry-Attempt`, which the answering member counted.
    let mut member_conflicts = 0.0;
    let mut member_retries = 0.0;
    for id in cluster.ids() {
        let text = cluster.client(id).metrics_text().await;
        member_conflicts += labelled_sample(&text, "revkv_conflicts_total", PUT_ON_COUNTERS);
        member_retries += labelled_sample(&text, "revkv_client_retries_total", PUT_ON_COUNTERS);
    }
    assert!(conflicts > 0, "ten writers on one key must have conflicted");
    assert_eq!(
        member_conflicts, conflicts as f64,
        "conflicts counted by the members"
    );
    assert_eq!(
        member_retries, conflicts as f64,
        "retries counted by the members"
    );
}

/// The labels of the put metrics on the counter's prefix.
const PUT_ON_COUNTERS: &[(&str, &str)] = &[("op", "put"), ("prefix", "counters")];

/// The value of the sample of `name` carrying every one of `labels` (0 when there is none yet: a
/// labelled series appears at its first increment).
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
