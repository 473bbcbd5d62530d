//! A lease kept alive, and the keys attached to it going when it goes, as a Kubernetes node's
//! heartbeat or a service registration does: grant a lease through a `LeaseKeeper` (which renews
//! it over one streaming keep-alive for as long as it runs), attach a key, read the lease's time to
//! live and keys, then revoke it and see the key deleted with it.
//!
//! `cargo run -p revkv-client --example lease_keepalive` against the quick-start cluster
//! (`scripts/cluster.sh up`); `REVKV_ENDPOINTS` names other members (comma-separated).

use revkv_client::{Client, ClientError, LeaseKeeper, LeaseState, PutRequest};

/// The lease's time to live: long enough that the example never depends on a renewal's timing.
const TTL_SECONDS: i64 = 30;

/// Runs the example against `client`; answers what it printed.
pub async fn run(client: &Client) -> Result<String, ClientError> {
    let keeper = LeaseKeeper::start(client);
    let lease = keeper.grant(TTL_SECONDS).await?;
    assert!(
        matches!(lease.state(), LeaseState::Alive { .. }),
        "{:?}",
        lease.state()
    );
    let key = format!("examples/registrations/{}", std::process::id());
    client
        .put_with(&PutRequest::new(&key, "here").with_lease(lease.id()))
        .await?;

    let alive = client.lease_time_to_live(lease.id(), true).await?;
    assert!(
        0 < alive.ttl && alive.ttl <= TTL_SECONDS,
        "time to live {}",
        alive.ttl
    );
    assert_eq!(
        alive.keys.as_deref(),
        Some(&[key.clone()][..]),
        "the key is attached"
    );

    client.lease_revoke(lease.id()).await?;
    let gone = client
        .get(&key)
        .await
        .err()
        .is_some_and(|error| error.is_not_found());
    assert!(gone, "a revoked lease takes its keys with it");
    Ok(format!(
        "lease {} had {} s of {TTL_SECONDS} left with {key} attached; revoked, the key is gone",
        lease.id(),
        alive.ttl
    ))
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let client = Client::new(revkv_client::endpoints_from_environment())?;
    println!("{}", run(&client).await?);
    Ok(())
}
