//! The end-to-end tests: real `revkv serve` processes (clusters of this package's binary),
//! driven over HTTP, gRPC, etcdctl and `revkv ctl`, and compared with the real etcd where a test says so.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod browser_support;
mod etcd_history;
mod etcdctl_compare;
mod etcdctl_contention;
mod gateway_support;
mod process_cluster;

mod allocator;
mod api_schema_fuzz;
mod auto_promote;
mod backup_restore;
mod chaos;
mod client_counter;
mod client_examples;
mod client_watch;
mod cluster_errors;
mod connection_limits;
mod console;
mod controller_chaos;
mod corruption_check;
mod ctl;
mod disk_full;
mod etcd_benchmark_tool;
mod etcd_client_port;
mod etcd_follow;
mod etcd_gateway;
mod etcd_gateway_python;
mod etcd_gateway_streams;
mod etcd_probes;
mod etcd_snapshot_in;
mod etcd_snapshot_out;
mod etcdctl_edges_vs_etcd;
mod etcdctl_vs_etcd;
mod failover;
mod h2_writes;
mod isolated_leader;
mod isolated_leader_vs_etcd;
mod leader_restart;
mod lease_vs_etcd;
mod leases;
mod lock_election_vs_etcd;
mod membership;
mod merge_cluster;
mod patroni_vs_etcd;
mod prometheus_scrape;
mod recipes;
mod replication;
mod space_quota;
mod tls;
mod tls_auth;
mod txn_extensions_vs_etcd;
mod watch_cluster;
mod worker_threads;
