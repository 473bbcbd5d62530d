//! The revkv member (not built yet; issue 3).
//!
//! This crate will hold the embeddable `Node` and the `revkv` binary: configuration (flags, `REVKV_`
//! environment variables, TOML), the HTTP client API (axum 0.8), the linearizable and serializable
//! read paths, write forwarding to the leader, and the watch hub. Only this crate knows HTTP status
//! codes, and it decides them in one place.
