//! The replication crate's tests: members in one process over real loopback connections, the log
//! store's suite, backups, disk faults and a log writer killed mid-stream.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod support;

mod backup_restore;
mod disk_faults;
mod log_writer_crash;
mod simulated_network;
mod storage_suite;
mod three_members;
