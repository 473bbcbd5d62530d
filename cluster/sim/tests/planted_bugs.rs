//! Bugs planted in the members behind test-only switches (`revkv_node::planted_bugs`, compiled
//! only for these tests): the simulator must find each within the number of seeds stated, with
//! the kind of violation the bug causes. This is the evidence that a clean soak means something.

use std::time::Duration;

use revkv_sim::{FaultKind, SimOptions};

use crate::seeds::run;

/// Plants a bug with `switch` on this thread, runs seeds 1, 2, ... up to `most_seeds` under every
/// fault until one reports a violation, removes the bug, and answers that violation's kind; fails
/// the test when no seed found the bug.
fn found_within(most_seeds: u64, bug: &str, switch: fn(bool)) -> &'static str {
    found_within_under(most_seeds, bug, switch, &SimOptions::default())
}

/// `found_within` with the run's options given, for a bug only some faults can reveal.
fn found_within_under(
    most_seeds: u64,
    bug: &str,
    switch: fn(bool),
    options: &SimOptions,
) -> &'static str {
    switch(true);
    let found = (1..=most_seeds).find_map(|seed| {
        let report = run(seed, options);
        let violation = report.violations.into_iter().next()?;
        Some((seed, violation))
    });
    switch(false);
    let Some((seed, violation)) = found else {
        panic!("the planted {bug} went unnoticed for {most_seeds} seeds");
    };
    eprintln!("the planted {bug} was found at seed {seed}: {violation}");
    violation.kind
}

/// A serializable read where a linearizable one was asked: a follower that lags, or one cut off
/// from the leader, answers from what it has applied. Found at seed 1 when this test was written;
/// five seeds leave room for a change in the workload's mix.
#[test]
fn a_linearizable_read_served_locally_is_found_within_five_seeds() {
    let switch = revkv_node::planted_bugs::serve_linearizable_reads_locally;
    let kind = found_within(5, "stale read", switch);
    assert!(
        ["real-time order", "stale or wrong read"].contains(&kind),
        "{kind}"
    );
}

/// A keep-alive that renews a lease to half its TTL while answering the whole TTL: a client that
/// renews after more than half the TTL sees its keys gone before the promised time. Found at
/// seed 1.
#[test]
fn a_keep_alive_that_renews_to_half_the_ttl_is_found_within_five_seeds() {
    let switch = revkv_node::planted_bugs::renew_leases_to_half_their_ttl;
    let kind = found_within(5, "short renewal", switch);
    assert_eq!(kind, "lease expired early");
}

/// A watch asked to start below the compact revision that starts at the compact revision
/// instead of answering "compacted": a watcher resuming after a pause misses the events between.
/// Found at seed 1; resuming behind a compaction depends on the faults' timing, so ten seeds.
#[test]
fn a_watch_that_skips_the_compacted_revisions_is_found_within_ten_seeds() {
    let switch = revkv_node::planted_bugs::skip_compacted_revisions_in_watches;
    let kind = found_within(10, "compacted-revision skip", switch);
    let skipped = ["watch skipped a change", "bookmark ahead of its events"];
    assert!(skipped.contains(&kind), "{kind}");
}

/// Partitions, with clock faults or without; ten clients over 40 s, so that some read reaches a
/// cut-off leader while the others write.
fn partitions(with_clock_faults: bool) -> SimOptions {
    let mut faults = vec![FaultKind::Partition];
    if with_clock_faults {
        faults.push(FaultKind::Clock);
    }
    SimOptions {
        faults,
        clients: 10,
        workload: Duration::from_secs(40),
        ..SimOptions::default()
    }
}

/// Linearizable reads confirmed with the leader's lease instead of a quorum round: a leader cut
/// off from the others while its clock runs slow believes its lease after they elected a new
/// leader and wrote past it, and serves stale reads. It takes a slow leader clock during a long
/// enough isolation of the leader: when this test was written, seed 2 found it (the leader at
/// 29% of the others' rate, isolated 4.8 s, a new leader elected 3.4 s in) and 4 of seeds 1-200
/// did. Partitions alone cannot find it (the leader's lease ends before the followers' promise not
/// to elect), which the same twenty seeds without clock faults confirm.
#[test]
fn a_read_confirmed_by_the_leader_lease_is_found_only_with_clock_faults() {
    let switch = revkv_node::planted_bugs::confirm_linearizable_reads_with_the_leader_lease;
    let kind = found_within_under(300, "lease read", switch, &partitions(true));
    assert!(
        ["real-time order", "stale or wrong read"].contains(&kind),
        "{kind}"
    );
    switch(true);
    let found = (1..=20).find(|seed| !run(*seed, &partitions(false)).violations.is_empty());
    switch(false);
    assert_eq!(found, None, "lease reads failed without clock faults");
}

/// Only crashes: the faults that lose what was not synced.
fn crashes_only() -> SimOptions {
    SimOptions {
        faults: vec![FaultKind::Crash],
        ..SimOptions::default()
    }
}

/// A raft log that acknowledges each append before its fsync (synced only with the next
/// append): a crash, above all a power loss of every member, loses entries a quorum was counted
/// on, so acknowledged writes vanish or their revisions are reused.
#[test]
fn a_log_that_acknowledges_before_its_fsync_is_found_within_ten_seeds() {
    let switch = revkv_node::planted_bugs::acknowledge_log_appends_before_fsync;
    let kind = found_within_under(10, "early acknowledgement", switch, &crashes_only());
    // Found at seed 1 when this test was written: a power loss kept the state file's durable
    // commit of an entry its own log then lacked, so the member could not restart.
    let lost = [
        "lost write",
        "shared revision",
        "member did not restart",
        "replicas differ",
    ];
    assert!(lost.contains(&kind), "{kind}");
}

/// openraft's leader restore turned back on: a leader that crashed before its own log held the
/// entries it had sent takes up its old term again on restart and writes other entries at the
/// same log ids, and the replicas part.
#[test]
fn a_restarted_leader_that_restores_its_term_is_found_within_twenty_seeds() {
    let switch = revkv_node::planted_bugs::restore_leaders_on_restart;
    let kind = found_within_under(20, "leader restore", switch, &crashes_only());
    // Found at seed 3 when this test was written: a compare-and-swap acknowledged at revision 44
    // lost to the restored leader's own entry at the same log id.
    let parted = ["lost write", "shared revision", "replicas differ"];
    assert!(parted.contains(&kind), "{kind}");
}

/// Only membership changes: the fault that adds learners to promote themselves.
fn membership_changes_only() -> SimOptions {
    SimOptions {
        faults: vec![FaultKind::Membership],
        ..SimOptions::default()
    }
}

/// A leader that compares a learner's lag with its bound the wrong way round promotes a learner
/// only while it is far behind: one added with `--auto-promote` that catches up (as every
/// learner in a healed run does) stays a learner, a replica the quorum never counts. Needs a
/// seed whose membership fault adds such a learner; ten seeds leave room for the seeds' draws.
#[test]
fn a_leader_that_compares_a_learners_lag_the_wrong_way_is_found_within_ten_seeds() {
    let switch = revkv_node::planted_bugs::compare_learner_lag_the_wrong_way;
    let options = membership_changes_only();
    let kind = found_within_under(10, "inverted lag bound", switch, &options);
    assert_eq!(kind, "learner never promoted");
}
