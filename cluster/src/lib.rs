//! Everything that talks to a revkv cluster from outside (not built yet; issue 6).
//!
//! This crate will hold the Rust client (failover, retry-on-conflict with client-go's backoff
//! presets, resuming watches), the `revkv ctl` command line, the `revkv bench` load generator, and
//! the fault-injection harness (issue 7).
