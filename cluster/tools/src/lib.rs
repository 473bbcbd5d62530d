//! The command-line tools that talk to a revkv cluster from outside, through the members' public
//! HTTP API (`shared/spec/API.md`), all on top of the Rust client (`revkv-client`):
//!
//! - [`ctl`]: `revkv ctl`, the command line for reading, writing, watching and administering.
//! - [`bench`]: `revkv bench`, a load generator that drives revkv's HTTP API, etcd's v3 JSON
//!   gateway or etcd's native gRPC API with the same workloads (put, get, cas).
//! - [`chaos`]: `revkv chaos`, the fault-injection harness: a three-member cluster of processes
//!   behind link proxies, a recorded workload and watches under kills, pauses, partitions, slow
//!   and lossy links, leader transfers and compaction, and checkers over the recorded history.
//!
//! This crate knows nothing of the server's code: it starts members as `revkv serve` processes and
//! speaks to them over HTTP only, so it never compiles redb or openraft.

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod ctl;
pub mod harness;
