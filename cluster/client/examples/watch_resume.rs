//! A watch that resumes by revision, as Kubernetes' reflectors do with resourceVersion: watch a
//! prefix, stop after some events, and open a new watch from the revision after the last one seen.
//! Every change arrives exactly once, in revision order, including those made while no watch was
//! open.
//!
//! `cargo run -p revkv-client --example watch_resume` against the quick-start cluster
//! (`scripts/cluster.sh up`); `REVKV_ENDPOINTS` names other members (comma-separated).

use revkv_client::{Client, ClientError, WatchRequest, WatchUpdate, Watcher};

/// The next change's (key, value, revision), skipping bookmarks.
async fn next_change(watcher: &mut Watcher) -> Result<(String, String, u64), ClientError> {
    loop {
        match watcher
            .next()
            .await
            .expect("a watch only ends when it is dropped")?
        {
            WatchUpdate::Events { events, .. } => {
                let event = events
                    .into_iter()
                    .next()
                    .expect("an events message holds one at least");
                return Ok((event.kv.key, event.kv.value, event.kv.mod_revision));
            }
            WatchUpdate::Bookmark { .. } => continue,
        }
    }
}

/// Runs the example against `client`; answers what it printed.
pub async fn run(client: &Client) -> Result<String, ClientError> {
    let prefix = format!("examples/watch-{}/", std::process::id());
    let first = client
        .put(&format!("{prefix}a"), "1")
        .await?
        .header
        .revision;
    // Watch from the first write on: a watch may start in the past, as long as it is not compacted.
    let mut watcher = client.watch(WatchRequest {
        start_revision: Some(first),
        ..WatchRequest::prefix(&prefix)
    });
    client.put(&format!("{prefix}b"), "2").await?;
    let mut seen = vec![
        next_change(&mut watcher).await?,
        next_change(&mut watcher).await?,
    ];
    let last_revision = seen.last().expect("two changes").2;
    drop(watcher);

    // While no watch is open, the key changes again.
    client.put(&format!("{prefix}c"), "3").await?;
    let mut resumed = client.watch(WatchRequest {
        start_revision: Some(last_revision + 1),
        ..WatchRequest::prefix(&prefix)
    });
    seen.push(next_change(&mut resumed).await?);

    let keys: Vec<&str> = seen
        .iter()
        .map(|(key, _, _)| key.trim_start_matches(&prefix))
        .collect();
    assert_eq!(keys, ["a", "b", "c"], "every change once, in order");
    let revisions: Vec<u64> = seen.iter().map(|change| change.2).collect();
    assert!(
        revisions.windows(2).all(|pair| pair[0] < pair[1]),
        "revisions only grow"
    );
    Ok(format!(
        "saw {keys:?} at revisions {revisions:?}, resuming after revision {last_revision}"
    ))
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let client = Client::new(revkv_client::endpoints_from_environment())?;
    println!("{}", run(&client).await?);
    Ok(())
}
