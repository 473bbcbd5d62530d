//! The command-line tools that talk to a revkv cluster from outside, through the members' public
//! HTTP API (`docs/API.md`), all on top of the Rust client (`revkv-client`):
//!
//! - [`ctl`]: `revkv ctl`, the command line for reading, writing, watching and administering.
//! - [`bench`]: `revkv bench`, a load generator that drives revkv's HTTP API, etcd's v3 JSON
//!   gateway or etcd's native gRPC API with the same workloads (put, get, cas).
//! - [`follow_etcd`]: `revkv follow-etcd`, which replays etcd's changes into a revkv restored
//!   from an etcd snapshot, revision for revision, until the switch (over etcd's gRPC API).
//! - [`chaos`]: `revkv chaos`, the fault-injection harness: a three-member cluster of processes
//!   behind link proxies, a recorded workload and watches under kills, pauses, partitions, slow
//!   and lossy links, leader transfers and compaction, and checkers over the recorded history.
//!
//! This crate knows nothing of the server's internals: it starts members as `revkv serve`
//! processes and speaks to them over their public APIs (HTTP; etcd's gRPC API for `bench
//! --target etcd-grpc` and `follow-etcd`, through [`etcd_api`], the clients revkv-etcd-proto
//! generates). It links revkv-storage and revkv-etcd-snapshot only to check backup files offline,
//! and never openraft.

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod ctl;
pub mod etcd_api;
pub mod follow_etcd;
pub mod harness;
pub mod interrupt;
