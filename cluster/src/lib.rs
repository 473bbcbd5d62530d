//! Everything that talks to a revkv cluster from outside, through the members' public HTTP API
//! (`shared/spec/API.md`).
//!
//! - [`client`]: [`Client`], the Rust client: failover between members with jittered backoff,
//!   per-call timeouts, writes whose outcome is unknown reported rather than repeated, typed calls
//!   for every endpoint, [`retry_on_conflict`] with client-go's [`DEFAULT_RETRY`] and
//!   [`DEFAULT_BACKOFF`], watches that resume on another member, and an [`Informer`].
//! - [`ctl`]: `revkv ctl`, the command line on top of the client.
//! - [`bench`]: `revkv bench`, a load generator that drives revkv's HTTP API or etcd's v3 JSON
//!   gateway with the same workloads (put, get, cas).
//! - [`chaos`]: `revkv chaos`, the fault-injection harness: a three-member cluster of processes
//!   behind link proxies, a recorded workload and watches under kills, pauses, partitions, slow
//!   and lossy links, leader transfers and compaction, and checkers over the recorded history.

pub mod bench;
pub mod chaos;
pub mod client;
pub mod ctl;

pub use client::{
    retry_on_conflict, Client, ClientError, Informer, DEFAULT_BACKOFF, DEFAULT_RETRY,
};
