//! The lease check on small histories: a clean one passes, and each planted fault is caught: an
//! expiry before the renewal's promise, keys of one lease deleted at two revisions, a key that
//! outlived its revoked lease or was read after a keep-alive said the lease was gone, and an
//! acknowledged attachment missing from the history. A clock jump excuses an early end by no
//! more than the jump, and only while the lease lived.

use std::time::Duration;

use super::check;
use crate::check::linearizability::Histories;
use crate::history::{ClockJump, LeaseEvent, Version};

const LEASE: i64 = 7;

fn seconds(value: f64) -> Duration {
    Duration::from_secs_f64(value)
}

fn renewed(sent_at: f64, ttl: f64) -> LeaseEvent {
    LeaseEvent::Renewed {
        lease: LEASE,
        sent_at: seconds(sent_at),
        ttl: seconds(ttl),
    }
}

fn attached(key: &str) -> LeaseEvent {
    LeaseEvent::Attached {
        lease: LEASE,
        key: key.to_owned(),
    }
}

fn seen_gone(answered_at: f64) -> LeaseEvent {
    LeaseEvent::NotFound {
        lease: LEASE,
        sent_at: seconds(answered_at - 0.1),
        answered_at: seconds(answered_at),
    }
}

fn read(key: &str, invoked_at: f64, present: bool) -> LeaseEvent {
    LeaseEvent::KeyRead {
        lease: LEASE,
        key: key.to_owned(),
        invoked_at: seconds(invoked_at),
        answered_at: seconds(invoked_at + 0.05),
        revision: 5,
        present,
    }
}

fn put_then_deleted(put: u64, deleted: Option<u64>) -> Vec<Version> {
    let mut versions = vec![Version {
        revision: put,
        value: Some("held".to_owned()),
    }];
    versions.extend(deleted.map(|revision| Version {
        revision,
        value: None,
    }));
    versions
}

fn histories(keys: &[(&str, Vec<Version>)]) -> Histories {
    keys.iter()
        .map(|(key, versions)| ((*key).to_owned(), versions.clone()))
        .collect()
}

fn kinds(events: &[LeaseEvent], histories: &Histories) -> Vec<&'static str> {
    kinds_with_jumps(events, &[], histories)
}

fn kinds_with_jumps(
    events: &[LeaseEvent],
    jumps: &[ClockJump],
    histories: &Histories,
) -> Vec<&'static str> {
    check(events, jumps, histories, 100)
        .into_iter()
        .map(|violation| violation.kind)
        .collect()
}

#[test]
fn a_lease_that_expires_after_its_promise_with_all_its_keys_at_once_passes() {
    let events = [
        renewed(1.0, 2.0),
        attached("a"),
        attached("b"),
        read("a", 2.0, true),
        renewed(2.5, 2.0),
        read("b", 4.6, false),
        seen_gone(4.8),
    ];
    let store = histories(&[
        ("a", put_then_deleted(3, Some(9))),
        ("b", put_then_deleted(4, Some(9))),
    ]);
    assert_eq!(kinds(&events, &store), Vec::<&str>::new());
}

#[test]
fn a_lease_seen_gone_before_its_last_renewal_promised_is_caught() {
    let events = [renewed(1.0, 2.0), renewed(2.5, 2.0), seen_gone(4.4)];
    assert_eq!(kinds(&events, &Histories::new()), ["lease expired early"]);
}

fn jump(member: u64, at: f64, by: f64) -> ClockJump {
    ClockJump {
        member,
        at: seconds(at),
        by: seconds(by),
    }
}

#[test]
fn a_clock_jump_while_the_lease_lived_excuses_an_early_end_up_to_the_jump() {
    // Promised until 4.5; seen gone at 4.0, half a second early.
    let events = [renewed(1.0, 2.0), renewed(2.5, 2.0), seen_gone(4.0)];
    let one_jump = [jump(2, 3.0, 0.5)];
    assert_eq!(
        kinds_with_jumps(&events, &one_jump, &Histories::new()),
        Vec::<&str>::new()
    );
    let two_members = [jump(1, 2.6, 0.3), jump(3, 3.9, 0.2)];
    assert_eq!(
        kinds_with_jumps(&events, &two_members, &Histories::new()),
        Vec::<&str>::new()
    );
}

#[test]
fn a_clock_jump_smaller_than_the_earliness_or_outside_the_lease_excuses_nothing() {
    let events = [renewed(1.0, 2.0), renewed(2.5, 2.0), seen_gone(4.0)];
    let too_small = [jump(2, 3.0, 0.4)];
    assert_eq!(
        kinds_with_jumps(&events, &too_small, &Histories::new()),
        ["lease expired early"]
    );
    let before_the_renewal = [jump(2, 2.4, 5.0)];
    assert_eq!(
        kinds_with_jumps(&events, &before_the_renewal, &Histories::new()),
        ["lease expired early"]
    );
    let after_it_was_seen_gone = [jump(2, 4.1, 5.0)];
    assert_eq!(
        kinds_with_jumps(&events, &after_it_was_seen_gone, &Histories::new()),
        ["lease expired early"]
    );
}

#[test]
fn a_key_read_missing_before_the_promise_is_caught() {
    let events = [renewed(1.0, 2.0), attached("a"), read("a", 2.5, false)];
    assert_eq!(kinds(&events, &Histories::new()), ["lease expired early"]);
}

#[test]
fn a_key_found_after_a_keep_alive_answered_not_found_is_caught() {
    let events = [
        renewed(1.0, 2.0),
        attached("a"),
        seen_gone(3.5),
        read("a", 3.6, true),
    ];
    assert_eq!(
        kinds(&events, &Histories::new()),
        ["key outlived its lease"]
    );
}

#[test]
fn a_lease_seen_gone_after_its_own_revoke_was_sent_is_not_early() {
    let events = [
        renewed(1.0, 2.0),
        LeaseEvent::RevokeSent {
            lease: LEASE,
            sent_at: seconds(1.5),
        },
        seen_gone(1.7),
    ];
    assert_eq!(kinds(&events, &Histories::new()), Vec::<&str>::new());
}

#[test]
fn keys_of_one_lease_deleted_at_two_revisions_are_caught() {
    let events = [renewed(1.0, 2.0), attached("a"), attached("b")];
    let store = histories(&[
        ("a", put_then_deleted(3, Some(9))),
        ("b", put_then_deleted(4, Some(10))),
    ]);
    assert_eq!(kinds(&events, &store), ["lease ended piecemeal"]);
}

#[test]
fn a_key_that_outlived_its_revoked_lease_is_caught() {
    let events = [
        renewed(1.0, 2.0),
        attached("a"),
        LeaseEvent::Revoked { lease: LEASE },
    ];
    let store = histories(&[("a", put_then_deleted(3, None))]);
    assert_eq!(kinds(&events, &store), ["key outlived its lease"]);
}

#[test]
fn a_deletion_after_the_final_revision_does_not_count() {
    let events = [renewed(1.0, 2.0), attached("a"), attached("b")];
    let store = histories(&[
        ("a", put_then_deleted(3, Some(101))),
        ("b", put_then_deleted(4, None)),
    ]);
    assert_eq!(kinds(&events, &store), Vec::<&str>::new());
}

#[test]
fn an_acknowledged_attachment_missing_from_the_history_is_caught() {
    let events = [renewed(1.0, 2.0), attached("a")];
    let store = histories(&[("a", Vec::new())]);
    assert_eq!(kinds(&events, &store), ["lost write"]);
}
