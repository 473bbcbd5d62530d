//! Compare-and-swap with retry on conflict, as client-go's `RetryOnConflict` does it: several tasks
//! increment one counter by reading it, writing the next value only if the key is still at the
//! revision they read (`If-Match`), and reading again when another task got there first. No
//! increment is lost, however the writes interleave.
//!
//! `cargo run -p revkv-client --example cas_counter` against the quick-start cluster
//! (`scripts/cluster.sh up`); `REVKV_ENDPOINTS` names other members (comma-separated).

use std::time::Duration;

use revkv_client::{retry_on_conflict, Backoff, Client, ClientError, PutRequest};

/// Tasks incrementing at once, and increments each.
const TASKS: u64 = 4;
const INCREMENTS_PER_TASK: u64 = 20;

/// Tasks on one key conflict often, more than client-go's `DefaultRetry` (5 attempts) is made
/// for: up to 200 attempts, 5 to 10 ms apart (full jitter spreads the contenders out). The delay
/// does not grow: as in client-go's `wait.Backoff`, a delay that grows past `cap` ends the steps
/// there, so a growing delay with a cap of 100 ms allowed only 9 retries, and on a loaded machine
/// a task lost 10 times in a row and gave up (`scripts/test.sh`, 2026-11-29).
pub const CONTENDED: Backoff = Backoff {
    duration: Duration::from_millis(5),
    factor: 1.0,
    jitter: 1.0,
    steps: 200,
    cap: Duration::ZERO,
};

/// Runs the example against `client`; answers what it printed.
pub async fn run(client: &Client) -> Result<String, ClientError> {
    let key = "examples/counter";
    let start = match client.get(key).await {
        Ok(answer) => answer.kv.value.parse::<u64>().unwrap_or(0),
        Err(error) if error.is_not_found() => 0,
        Err(error) => return Err(error),
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..INCREMENTS_PER_TASK {
                    increment(&client, key).await?;
                }
                Ok::<(), ClientError>(())
            })
        })
        .collect();
    // The tasks run at once; waiting for them in turn only collects their outcomes.
    for task in tasks {
        task.await.expect("an increment task panicked")?;
    }
    let end: u64 = client.get(key).await?.kv.value.parse().unwrap_or(0);
    assert_eq!(
        end,
        start + TASKS * INCREMENTS_PER_TASK,
        "an increment was lost"
    );
    Ok(format!(
        "counter went from {start} to {end}: no increment lost"
    ))
}

/// One increment: read, add one, write if unchanged since the read; on a conflict, again.
async fn increment(client: &Client, key: &str) -> Result<(), ClientError> {
    retry_on_conflict(CONTENDED, || async {
        let write = match client.get(key).await {
            Ok(current) => {
                let next = current.kv.value.parse::<u64>().unwrap_or(0) + 1;
                PutRequest::new(key, next.to_string()).if_mod_revision(current.kv.mod_revision)
            }
            // Absent: create it, only if it is still absent.
            Err(error) if error.is_not_found() => PutRequest::new(key, "1").if_absent(),
            Err(error) => return Err(error),
        };
        client.put_with(&write).await.map(|_| ())
    })
    .await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let client = Client::new(revkv_client::endpoints_from_environment())?;
    println!("{}", run(&client).await?);
    Ok(())
}
