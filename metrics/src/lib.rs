//! revkv's Prometheus metrics (not built yet; issue 5).
//!
//! This crate will define and register every metric of the contract's section 6 in one place
//! (`prometheus` 0.14), with bounded label sets (prefix folding), and provide the axum layer that
//! counts and times HTTP requests per route.
