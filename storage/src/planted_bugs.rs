//! Bugs of the storage layer a test can plant in the members running on its thread, to show that
//! the deterministic simulator (`cluster/sim`) finds them. Compiled only with the `planted-bugs`
//! feature, which only the simulator's tests turn on (through `revkv-raft`'s feature of the same
//! name, whose `planted_bugs` module re-exports these): the server binary has none of this code.

use std::cell::Cell;

thread_local! {
    static LOG_APPENDS_ACKNOWLEDGED_BEFORE_FSYNC: Cell<bool> = const { Cell::new(false) };
}

/// Plants (or removes) the bug of a raft log that acknowledges an append before its fsync: each
/// batch is answered durable at once and synced only with the next append, so a crash can lose
/// entries a quorum was counted on.
pub fn acknowledge_log_appends_before_fsync(planted: bool) {
    LOG_APPENDS_ACKNOWLEDGED_BEFORE_FSYNC.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub fn log_appends_are_acknowledged_before_fsync() -> bool {
    LOG_APPENDS_ACKNOWLEDGED_BEFORE_FSYNC.with(Cell::get)
}
