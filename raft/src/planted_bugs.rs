//! Bugs a test can plant in the members running on its thread, to show that the deterministic
//! simulator (`cluster/sim`) finds them. Compiled only with the `planted-bugs` feature, which only
//! the simulator's tests turn on (through `revkv-node`'s feature of the same name): the server
//! binary has none of this code. Each switch belongs to the thread that sets it, so a seed with a
//! planted bug and a clean seed can run side by side on two threads of one process.
//!
//! Each switch lives in the lowest crate that has its bug to plant (the raft log's in
//! `revkv_storage::planted_bugs`, re-exported here); `revkv_node::planted_bugs` is this module.

use std::cell::Cell;

pub use revkv_storage::planted_bugs::acknowledge_log_appends_before_fsync;

thread_local! {
    static LEADERS_RESTORE_THEIR_TERM: Cell<bool> = const { Cell::new(false) };
    static LINEARIZABLE_READS_SERVED_LOCALLY: Cell<bool> = const { Cell::new(false) };
    static KEEP_ALIVE_RENEWS_TO_HALF_TTL: Cell<bool> = const { Cell::new(false) };
    static WATCHES_SKIP_COMPACTED_REVISIONS: Cell<bool> = const { Cell::new(false) };
    static LINEARIZABLE_READS_TRUST_THE_LEADER_LEASE: Cell<bool> = const { Cell::new(false) };
    static LEARNER_LAG_COMPARED_THE_WRONG_WAY: Cell<bool> = const { Cell::new(false) };
}

/// Plants (or removes) the bug of a leader that compares a learner's lag with its bound the
/// wrong way round: it would promote a learner only while it is *more* than the bound behind, so
/// a learner added with `--auto-promote` that catches up stays a learner for good.
pub fn compare_learner_lag_the_wrong_way(planted: bool) {
    LEARNER_LAG_COMPARED_THE_WRONG_WAY.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub(crate) fn learner_lag_is_compared_the_wrong_way() -> bool {
    LEARNER_LAG_COMPARED_THE_WRONG_WAY.with(Cell::get)
}

/// Plants (or removes) the bug of confirming a linearizable read with the leader's lease
/// (openraft's `ReadPolicy::LeaseRead`) instead of a quorum round: safe while clocks keep time,
/// but a leader whose clock runs slow still believes its lease while the others have elected a
/// new leader and written past it, and answers from its stale state. Only clock faults find it.
pub fn confirm_linearizable_reads_with_the_leader_lease(planted: bool) {
    LINEARIZABLE_READS_TRUST_THE_LEADER_LEASE.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub(crate) fn linearizable_reads_trust_the_leader_lease() -> bool {
    LINEARIZABLE_READS_TRUST_THE_LEADER_LEASE.with(Cell::get)
}

/// Plants (or removes) the bug of serving a linearizable read from the member's local state,
/// without the ReadIndex round through the leader: a serializable read where a linearizable one
/// was asked, which a member that lags or is cut off answers with stale data.
pub fn serve_linearizable_reads_locally(planted: bool) {
    LINEARIZABLE_READS_SERVED_LOCALLY.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub fn linearizable_reads_are_served_locally() -> bool {
    LINEARIZABLE_READS_SERVED_LOCALLY.with(Cell::get)
}

/// Plants (or removes) the bug of a keep-alive that renews a lease to half its granted TTL while
/// answering the whole TTL: a client that renews on schedule sees its lease expire early.
pub fn renew_leases_to_half_their_ttl(planted: bool) {
    KEEP_ALIVE_RENEWS_TO_HALF_TTL.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub(crate) fn leases_are_renewed_to_half_their_ttl() -> bool {
    KEEP_ALIVE_RENEWS_TO_HALF_TTL.with(Cell::get)
}

/// Plants (or removes) the bug of a watch asked to start below the compact revision that starts
/// at the compact revision instead of answering "compacted": the events in between are skipped
/// without a word, and a client's cache silently misses them.
pub fn skip_compacted_revisions_in_watches(planted: bool) {
    WATCHES_SKIP_COMPACTED_REVISIONS.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub fn watches_skip_compacted_revisions() -> bool {
    WATCHES_SKIP_COMPACTED_REVISIONS.with(Cell::get)
}

/// Plants (or removes) the bug found by a chaos run (docs/RELIABILITY.md): openraft's leader
/// restore turned back on, so a leader that restarts takes up its old term at once. It may have
/// crashed before its own log held entries it had sent its followers, and writing new entries at
/// those log ids in the same term parts the replicas for good.
pub fn restore_leaders_on_restart(planted: bool) {
    LEADERS_RESTORE_THEIR_TERM.with(|switch| switch.set(planted));
}

/// Whether that bug is planted on this thread.
pub(crate) fn leaders_restore_their_term() -> bool {
    LEADERS_RESTORE_THEIR_TERM.with(Cell::get)
}
