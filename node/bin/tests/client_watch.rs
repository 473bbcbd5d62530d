//! The resuming watch of the Rust client against a real three-member cluster: while the member the
//! watch is connected to is killed and later restarted, writes go on through the others, and the
//! watcher sees every event exactly once, in revision order, as one unbroken stream.
//!
//! Also `revkv bench watch`: every acknowledged write reaches every watcher.

use crate::process_cluster;

use std::time::Duration;

use process_cluster::{cluster_options, ProcessCluster, CONVERGENCE_TIMEOUT, REVKV_BINARY};
use revkv_client::{Client, WatchRequest, WatchUpdate};
use tokio::sync::mpsc;

const WRITES_BEFORE_THE_KILL: u64 = 10;
const WRITES_WHILE_DOWN: u64 = 10;
const WRITES_AFTER_THE_RESTART: u64 = 5;

/// Forwards every event's (revision, key) of the watch to `events` until the receiver goes away.
async fn forward_events(client: Client, start: u64, events: mpsc::Sender<(u64, String)>) {
    let request = WatchRequest::prefix("w/")
        .from_revision(start)
        .with_progress_notify(Duration::from_millis(500));
    let mut watcher = client.watch(request);
    while let Some(update) = watcher.next().await {
        let Ok(WatchUpdate::Events {
            revision,
            events: changes,
        }) = update
        else {
            assert!(update.is_ok(), "the watch failed: {update:?}");
            continue;
        };
        for change in changes {
            if events.send((revision, change.kv.key)).await.is_err() {
                return;
            }
        }
    }
}

/// Writes `w/{index}` for every index in `indexes`; answers the revision of the last write.
async fn write_keys(client: &Client, indexes: std::ops::Range<u64>) -> u64 {
    let mut revision = 0;
    for index in indexes {
        let key = format!("w/{index:03}");
        revision = client
            .put(&key, "v")
            .await
            .expect("the write succeeds")
            .header
            .revision;
    }
    revision
}

/// Receives events until `count` arrived, within the convergence timeout.
async fn receive(events: &mut mpsc::Receiver<(u64, String)>, count: u64) -> Vec<(u64, String)> {
    let mut received = Vec::new();
    while (received.len() as u64) < count {
        let next = tokio::time::timeout(CONVERGENCE_TIMEOUT, events.recv()).await;
        let event = next
            .expect("the watch delivers the next event in time")
            .expect("the watch task runs");
        received.push(event);
    }
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_every_event_once_in_order_while_its_member_is_killed_and_restarted() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    let url = |id: u64| cluster.member(id).client_url();
    let (first, second, third) = (url(1), url(2), url(3));
    let writer = Client::new([second.clone(), third.clone()]).unwrap();
    let start = writer.put("w/start", "v").await.unwrap().header.revision + 1;

    // The watch starts on member 1, the first endpoint.
    let watch_client = Client::new([first, second, third]).unwrap();
    let (sender, mut events) = mpsc::channel(1024);
    let watch_task = tokio::spawn(forward_events(watch_client, start, sender));

    write_keys(&writer, 0..WRITES_BEFORE_THE_KILL).await;
    let mut received = receive(&mut events, WRITES_BEFORE_THE_KILL).await;
    cluster.kill(1);
    let down_until = WRITES_BEFORE_THE_KILL + WRITES_WHILE_DOWN;
    write_keys(&writer, WRITES_BEFORE_THE_KILL..down_until).await;
    received.extend(receive(&mut events, WRITES_WHILE_DOWN).await);
    cluster.restart(1).await;
    let total = down_until + WRITES_AFTER_THE_RESTART;
    write_keys(&writer, down_until..total).await;
    received.extend(receive(&mut events, WRITES_AFTER_THE_RESTART).await);

    let keys: Vec<String> = received.iter().map(|(_, key)| key.clone()).collect();
    let expected: Vec<String> = (0..total).map(|index| format!("w/{index:03}")).collect();
    assert_eq!(keys, expected, "every write once, in order");
    assert!(
        received.windows(2).all(|pair| pair[0].0 < pair[1].0),
        "revisions increase: {received:?}"
    );
    drop(events);
    watch_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_watch_delivers_every_write_to_every_watcher() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let endpoints = cluster.client_urls();
    let arguments = [
        "bench",
        "watch",
        "--endpoints",
        &endpoints.join(","),
        "--watchers",
        "6",
        "--write-rate",
        "50",
        "--duration",
        "2s",
        "-o",
        "json",
    ]
    .map(String::from);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(REVKV_BINARY)
            .args(&arguments)
            .output()
            .expect("run revkv bench")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let written = report["writes_acknowledged"].as_u64().unwrap();
    assert!(written > 0, "{report}");
    assert_eq!(report["write_failures"], 0, "{report}");
    assert_eq!(report["events_expected"], written * 6, "{report}");
    assert_eq!(report["events_received"], written * 6, "{report}");
    assert_eq!(report["latency"]["samples"], written * 6, "{report}");
}
