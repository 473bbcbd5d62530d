//! The storage crate's tests: the MVCC store, its key index and history, the raft log store,
//! crash recovery and the rules a damaged file must meet, against real redb files.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod support;

mod alarms_and_defragment;
mod auth_records;
mod background_compaction;
mod backup_stream;
mod crash_recovery;
mod damaged_state_file;
mod key_history;
mod key_index;
mod learner_promotions;
mod log_store;
mod model;
mod nested_txns;
mod power_loss;
mod rules;
mod small_apply;
