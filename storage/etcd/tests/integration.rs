//! The etcd data-format crate's tests: the bbolt reader and writer against each other, revkv's
//! history written as an etcd snapshot and read back, and the files the reader must refuse.
//!
//! Every file beside this one is a module of one test binary, not a binary of its own: each test
//! binary links its own copy of tokio, hyper, redb and openraft, and with about eighty of them the
//! build took most of CI's 40 minutes. Tests that must own their process (a global log subscriber,
//! for one) stay separate binaries; Cargo.toml names them.

mod bolt_round_trip;
mod export_round_trip;
mod import_refusals;
