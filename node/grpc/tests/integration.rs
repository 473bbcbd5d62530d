//! The etcd gRPC API's tests: the KV, Watch, Lease, Cluster, Maintenance and Auth services through
//! the `etcd-client` crate against a real revkv member.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod support;

mod auth;
mod kv;
mod lease_cluster_maintenance;
mod slow_watch_streams;
mod watch;
