//! revkv's deterministic simulator: whole clusters of real members (the storage, raft and node
//! code `revkv serve` runs) in one process, on one thread, with the network, the clock, the
//! scheduler and every random draw under the control of one seed. The same seed gives the same
//! run, event for event, so a failing seed is a bug report that replays.
//!
//! A run ([`run::run_seed`]) starts the members, drives clients, watchers and faults for a
//! stretch of simulated time, heals the cluster, waits until every member applied the same
//! revision, reads the store's history back and checks it: linearizable client histories
//! (`check::linearizability`), watches without gaps, repeats or early bookmarks
//! (`check::watches`), leases that never end early and end all at once (`check::leases`), and the
//! same key space on every member. `revkv-sim` (src/main.rs) runs
//! many seeds in parallel and replays one with its trace.

pub mod check;
pub mod clocks;
pub mod cluster;
pub mod compactor;
pub mod crashes;
pub mod elections;
pub mod faults;
pub mod history;
pub mod leases;
pub mod membership;
pub mod network;
pub mod run;
pub mod runtime;
pub mod settle;
pub mod trace;
pub mod watchers;
pub mod workload;

pub use faults::FaultKind;
pub use run::{run_seed, RunReport, SimOptions};
