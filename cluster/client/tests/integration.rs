//! The Rust client's tests against stub members (small axum servers on loopback): failover,
//! timeouts, retries and the lease keeper.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod client_stub;
mod lease_keeper_stub;
