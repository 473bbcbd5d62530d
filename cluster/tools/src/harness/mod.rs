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

/// `count` free loopback addresses, all distinct: every listener is held until all are bound, then
/// released for the members to bind. (Another process may take one in between; the cluster start
/// retries when a member reports it cannot listen.)
pub fn free_addresses(count: usize) -> Result<Vec<SocketAddr>, String> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("bind a free loopback port: {error}"))?;
    listeners
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
