//! revkv's replication layer (not built yet; issue 3).
//!
//! This crate will hold the openraft (`=0.10.0-alpha.37`) glue: the type config, the
//! `RaftLogStorage` and `RaftStateMachine` implementations over `revkv-storage` (group-committed
//! appends, whole committed ranges applied in one transaction), snapshots built from the MVCC state,
//! and the HTTP peer transport on the separate peer listener. It knows nothing of the client API.
