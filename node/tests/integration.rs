//! The server library's tests: its HTTP API, watch hub, leases and metrics, in process against
//! real redb files.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod support;

mod alarms_api;
mod auth_api;
mod cluster_api;
mod compaction_cleaner;
mod errors;
mod history_api;
mod hot_keys_api;
mod kv_api;
mod lease_api;
mod lease_keepalive_stream;
mod merge_api;
mod metrics_api;
mod over_tcp;
mod range_api;
mod simulated_cluster;
mod snapshot_api;
mod txn_api;
mod watch_api;
mod watch_hub;
