//! The one harness that runs `revkv serve` members as processes on this machine: free loopback
//! ports, a data directory and a log file per member, fast raft timing, and kill, stop (SIGTERM),
//! pause (SIGSTOP), resume, restart on the same data, and joining members.
//!
//! - [`member`]: one member process ([`MemberProcess`]), the part both users share.
//! - [`cluster`]: [`ProcessCluster`], a cluster for end-to-end tests (`node/bin/tests`). It fails
//!   the test (panics) when the cluster misbehaves, and prints the members' logs when dropped
//!   during a failing test.
//! - [`etcd`]: [`etcd::EtcdServer`], a single-member etcd 3.4 for tests that compare with it.
//! - [`member_client`]: [`MemberClient`], raw HTTP against one member, for tests that check the
//!   API's exact answers rather than go through the typed client.
//! - The chaos harness (`chaos::members`) builds its proxied members from [`MemberProcess`] and
//!   [`fast_serve_flags`] too, and reports failures as errors instead of panicking.
//!
//! Nothing waits by sleeping a fixed time: [`wait_until`] polls a condition until a deadline.

pub mod cluster;
pub mod etcd;
pub mod member;
pub mod member_client;
pub mod private_tools;

use std::fmt::Display;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

pub use cluster::{
    ClusterOptions, ClusterTls, ProcessCluster, CONVERGENCE_TIMEOUT, STARTUP_TIMEOUT,
};
pub use member::{MemberLaunch, MemberProcess};
pub use member_client::{Answer, MemberClient};

/// Raft heartbeat of harness members: short, so that faults cause elections within a second.
pub const HEARTBEAT_MS: u64 = 50;
/// Minimum election timeout of harness members.
pub const ELECTION_TIMEOUT_MS: u64 = 300;

/// How often [`wait_until`] re-checks its condition.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// The `revkv serve` flags every harness member starts with: identity, addresses, data and fast
/// timing. Callers add their own (founding cluster or `--join`, proxies, snapshot thresholds).
pub fn fast_serve_flags(
    id: u64,
    data_dir: &Path,
    client_address: SocketAddr,
    peer_address: SocketAddr,
    request_timeout_ms: u64,
) -> Vec<String> {
    [
        "--id".to_string(),
        id.to_string(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--listen-client".into(),
        client_address.to_string(),
        "--listen-peer".into(),
        peer_address.to_string(),
        "--heartbeat-ms".into(),
        HEARTBEAT_MS.to_string(),
        "--election-timeout-ms".into(),
        ELECTION_TIMEOUT_MS.to_string(),
        "--request-timeout-ms".into(),
        request_timeout_ms.to_string(),
    ]
    .to_vec()
}

/// How many ports one call may bind and set aside because this process handed them out before.
const MAXIMUM_SKIPPED_PORTS: usize = 1024;

/// Every loopback port this process has handed out, so that it never hands one out twice. A port
/// handed out is released for a member to bind later; without this ledger the kernel may give the
/// same port to the next caller in between, and two members (or a member and a link proxy) would
/// be told to listen on one port.
static HANDED_OUT_PORTS: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// `count` free loopback listeners on ports this process has never handed out before, all
/// distinct, each recorded as handed out. Ports the kernel offers that were handed out before are
/// held until the call ends, so that it does not offer them again.
pub fn bind_fresh_loopback_listeners(count: usize) -> Result<Vec<TcpListener>, String> {
    let mut handed_out = HANDED_OUT_PORTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut fresh = Vec::with_capacity(count);
    let mut skipped = Vec::new();
    while fresh.len() < count {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|error| format!("bind a free loopback port: {error}"))?;
        let port = listener
            .local_addr()
            .map_err(|error| error.to_string())?
            .port();
        if handed_out.contains(&port) {
            if skipped.len() >= MAXIMUM_SKIPPED_PORTS {
                return Err(format!(
                    "no fresh loopback port after skipping {MAXIMUM_SKIPPED_PORTS} handed out before"
                ));
            }
            skipped.push(listener);
            continue;
        }
        fresh.push(listener);
    }
    for listener in &fresh {
        let port = listener
            .local_addr()
            .map_err(|error| error.to_string())?
            .port();
        handed_out.insert(port);
    }
    Ok(fresh)
}

/// `count` free loopback addresses, all distinct and never handed out before by this process
/// ([`bind_fresh_loopback_listeners`]), released for the members to bind. (Another process may
/// take one in between; the cluster start retries when a member reports it cannot listen.)
pub fn free_addresses(count: usize) -> Result<Vec<SocketAddr>, String> {
    bind_fresh_loopback_listeners(count)?
        .iter()
        .map(|listener| listener.local_addr().map_err(|error| error.to_string()))
        .collect()
}

/// Polls `probe` until it answers `Some`, and returns that; `Err` naming `what` if `timeout`
/// passes first.
pub async fn poll_until<T>(
    what: impl Display,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("gave up after {timeout:?} waiting for: {what}"));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// [`poll_until`] for tests: fails the test with what never happened.
pub async fn wait_until<T>(
    what: impl Display,
    timeout: Duration,
    probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    poll_until(what, timeout, probe)
        .await
        .unwrap_or_else(|problem| panic!("{problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports handed out one at a time and released at once (as the chaos harness does for each
    /// member) never repeat, although the kernel is free to offer a released port again.
    #[test]
    fn free_addresses_never_hands_out_a_port_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..500 {
            let address = free_addresses(1).expect("a free loopback port")[0];
            assert!(
                seen.insert(address.port()),
                "port {} handed out twice",
                address.port()
            );
        }
        let listener = bind_fresh_loopback_listeners(1)
            .expect("a fresh listener")
            .remove(0);
        let port = listener.local_addr().unwrap().port();
        assert!(
            !seen.contains(&port),
            "a held listener got a port handed out before"
        );
    }
}
