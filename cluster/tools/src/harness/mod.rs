//! The one harness that runs `revkv serve` members as processes on this machine: free loopback
//! ports, a data directory and a log file per member, fast raft timing, and kill, stop (SIGTERM),
//! pause (SIGSTOP), resume, restart on the same data, and joining members.
//!
//! - [`member`]: one member process ([`MemberProcess`]), the part both users share.
//! - [`cluster`]: [`ProcessCluster`], a cluster for end-to-end tests (`node/bin/tests`). It fails
//!   the test (panics) when the cluster misbehaves, and prints the members' logs when dropped
//!   during a failing test.
//! - [`etcd`]: [`etcd::EtcdServer`], a single-member etcd (3.4 to 3.7) for tests that compare with it;
//!   [`etcd_cluster`]: [`etcd_cluster::EtcdCluster`], real etcd members to pause and resume.
//! - [`member_client`]: [`MemberClient`], raw HTTP against one member, for tests that check the
//!   API's exact answers rather than go through the typed client.
//! - `ports.rs`: [`free_addresses`], loopback ports this process never hands out twice.
//! - The chaos harness (`chaos::members`) builds its proxied members from [`MemberProcess`] and
//!   [`fast_serve_flags`] too, and reports failures as errors instead of panicking.
//!
//! Nothing waits by sleeping a fixed time: [`wait_until`] (`waiting.rs`) polls a condition until a
//! deadline. This file only declares the parts and re-exports what callers use, so the parts
//! import one another, never it.

pub mod cluster;
pub mod etcd;
pub mod etcd_cluster;
pub mod member;
pub mod member_client;
mod ports;
pub mod private_tools;
mod waiting;

pub use cluster::{
    ClusterOptions, ClusterTls, ProcessCluster, CONVERGENCE_TIMEOUT, STARTUP_TIMEOUT,
};
pub use member::{
    fast_serve_flags, MemberLaunch, MemberProcess, ELECTION_TIMEOUT_MS, HEARTBEAT_MS,
};
pub use member_client::{Answer, MemberClient};
pub use ports::{bind_fresh_loopback_listeners, free_addresses};
pub use waiting::{poll_until, wait_until};
