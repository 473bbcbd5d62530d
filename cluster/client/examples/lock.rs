//! A distributed lock (etcd's `concurrency.Mutex`): each holder has a session (a lease kept
//! alive); locking puts a key under the lock's prefix with the session's lease and waits until it
//! is the oldest. Two sessions take turns: the second gets the lock only after the first unlocks,
//! and a holder that dies loses the lock when its lease expires.
//!
//! `cargo run -p revkv-client --example lock` against the quick-start cluster
//! (`scripts/cluster.sh up`); `REVKV_ENDPOINTS` names other members (comma-separated).

use revkv_client::concurrency::{Mutex, Session};
use revkv_client::{Client, ClientError};

/// The sessions' time to live: how long a holder that dies keeps the lock.
const SESSION_TTL_SECONDS: i64 = 10;

/// Runs the example against `client`; answers what it printed.
pub async fn run(client: &Client) -> Result<String, ClientError> {
    let name = format!("examples/locks/{}", std::process::id());
    let first = Session::new(client, SESSION_TTL_SECONDS).await?;
    let second = Session::new(client, SESSION_TTL_SECONDS).await?;
    let mut first_lock = Mutex::new(&first, &name);
    let mut second_lock = Mutex::new(&second, &name);

    first_lock.lock().await?;
    // The second waits in a task of its own while the first holds the lock.
    let waiting = tokio::spawn(async move { second_lock.lock().await.map(|()| second_lock) });
    let first_revision = first_lock.revision();
    first_lock.unlock().await?;
    let mut second_lock = waiting.await.expect("the waiting task panicked")?;
    let second_revision = second_lock.revision();
    assert!(
        first_revision < second_revision,
        "the lock went to the sessions in turn"
    );
    second_lock.unlock().await?;
    Ok(format!(
        "{name}: the first session held it (key at revision {first_revision}), then the second \
         (revision {second_revision})"
    ))
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let client = Client::new(revkv_client::endpoints_from_environment())?;
    println!("{}", run(&client).await?);
    Ok(())
}
