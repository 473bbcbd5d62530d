//! Everything that talks to a revkv cluster from outside.
//!
//! Built so far: [`bench`], the `revkv bench` load generator that drives revkv's HTTP API or etcd's
//! v3 JSON gateway with the same workloads (issues 3 and 6). Still to come (issue 6 and 7): the Rust
//! client (failover, retry-on-conflict with client-go's backoff presets, resuming watches), the
//! `revkv ctl` command line, and the fault-injection harness.

pub mod bench;
