//! Tests of the lease checker: a small correct history passes (and passes the key-value checker,
//! which leaves lease deletes to it), each kind of planted violation (a key outliving its lease,
//! a key of a live lease deleted, a lease's keys deleted apart, a delete of two leases' keys or
//! of a key no lease explains) is reported, and the ambiguities the bounds allow for (a leader
//! change, a keep-alive whose answer was lost, a revoke that may have happened) are not.

use std::collections::BTreeMap;
use std::time::Duration;

use super::kv::check_operations;
use super::leases::{check_leases, LeaseBounds, LeaseObservations};
use super::planted::{kv, ok, operation};
use super::states::{History, State};
use super::Violation;
use crate::chaos::history::{Answer, Consistency, Operation, Outcome, Request};
use crate::chaos::leaderships::{LeadershipSeen, QuorumLoss};

const KEY_0: &str = "chaos/lease/0";
const KEY_1: &str = "chaos/lease/1";

fn leased_put(key: &str, lease: i64) -> Request {
    Request::LeasedPut {
        key: key.into(),
        lease,
    }
}

fn range() -> Request {
    Request::Range {
        prefix: "chaos/lease/".into(),
        consistency: Consistency::Linearizable,
    }
}

/// Lease 1 (TTL 1 s) granted at 0 ms; revision 2 puts key 0 with it (op 1), revision 3 key 1
/// (op 2); a keep-alive sent at 400 ms is acknowledged; revision 4 deletes both keys (the
/// expiry). The expiry may come no earlier than 1.4 s and no later than 4.41 s (1 s TTL, 3 s
/// slack, no leader change).
fn history() -> History {
    let both = State::from([
        (KEY_0.to_string(), kv(1, 2, 2, 1)),
        (KEY_1.to_string(), kv(2, 3, 3, 1)),
    ]);
    let first_only = State::from([(KEY_0.to_string(), kv(1, 2, 2, 1))]);
    History::from_states(1, vec![State::new(), first_only, both, State::new()])
}

fn both_keys_at_3() -> Answer {
    Answer::Range(vec![
        (KEY_0.to_string(), kv(1, 2, 2, 1)),
        (KEY_1.to_string(), kv(2, 3, 3, 1)),
    ])
}

/// The correct operations, with the expiry seen by a range that began at 1.6 s.
fn correct_operations() -> Vec<Operation> {
    vec![
        operation(
            0,
            Request::LeaseGrant {
                lease: 1,
                ttl_seconds: 1,
            },
            (0, 10),
            ok(1, Answer::Lease { ttl_seconds: 1 }),
        ),
        operation(1, leased_put(KEY_0, 1), (20, 30), ok(2, Answer::Written)),
        operation(2, leased_put(KEY_1, 1), (40, 50), ok(3, Answer::Written)),
        operation(
            3,
            Request::LeaseKeepAlive { lease: 1 },
            (400, 410),
            ok(3, Answer::Lease { ttl_seconds: 1 }),
        ),
        operation(4, range(), (900, 910), ok(3, both_keys_at_3())),
        operation(5, range(), (1600, 1610), ok(4, Answer::Range(Vec::new()))),
    ]
}

/// Revision 4 first reached a watch at `at_ms`.
fn seen_at(at_ms: u64) -> BTreeMap<u64, Duration> {
    BTreeMap::from([
        (2, Duration::from_millis(31)),
        (3, Duration::from_millis(51)),
        (4, Duration::from_millis(at_ms)),
    ])
}

fn check(
    history: &History,
    operations: &[Operation],
    first_seen: &BTreeMap<u64, Duration>,
    leaderships: &[LeadershipSeen],
) -> Vec<Violation> {
    check_with_losses(history, operations, first_seen, leaderships, &[])
}

fn check_with_losses(
    history: &History,
    operations: &[Operation],
    first_seen: &BTreeMap<u64, Duration>,
    leaderships: &[LeadershipSeen],
    quorum_losses: &[QuorumLoss],
) -> Vec<Violation> {
    let observed = LeaseObservations {
        history,
        operations,
        first_seen,
        leaderships,
        quorum_losses,
    };
    check_leases(&observed, &LeaseBounds::default())
}

fn kinds(violations: &[Violation]) -> Vec<&'static str> {
    violations.iter().map(|violation| violation.kind).collect()
}

#[test]
fn a_correct_lease_history_passes_both_checkers() {
    let operations = correct_operations();
    let violations = check(&history(), &operations, &seen_at(1_450), &[]);
    assert!(violations.is_empty(), "{violations:#?}");
    // The key-value checker leaves the expiry's delete (no operation made it) to the lease checker.
    let violations = check_operations(&history(), &operations);
    assert!(violations.is_empty(), "{violations:#?}");
}

/// The expiry comes only after a range that began at 6 s (past the 4.41 s bound) still saw both
/// keys.
fn operations_seeing_the_keys_at(invoked_ms: u64) -> Vec<Operation> {
    let mut operations = correct_operations();
    operations[5] = operation(
        5,
        range(),
        (invoked_ms, invoked_ms + 10),
        ok(3, both_keys_at_3()),
    );
    operations.push(operation(
        6,
        range(),
        (invoked_ms + 1_000, invoked_ms + 1_010),
        ok(4, Answer::Range(Vec::new())),
    ));
    operations
}

#[test]
fn a_key_seen_after_its_lease_must_have_expired_is_reported() {
    let operations = operations_seeing_the_keys_at(6_000);
    let violations = check(&history(), &operations, &seen_at(7_005), &[]);
    assert_eq!(
        kinds(&violations),
        ["lease-outlived", "lease-outlived"],
        "{violations:#?}"
    );
    assert!(violations[0].detail.contains("operation 5"));
}

#[test]
fn a_key_seen_just_inside_the_bound_is_not_reported() {
    let operations = operations_seeing_the_keys_at(4_400);
    let violations = check(&history(), &operations, &seen_at(5_405), &[]);
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn a_leader_change_before_the_bound_allows_one_more_ttl() {
    let operations = operations_seeing_the_keys_at(6_000);
    let leadership = |after_ms, by_ms| LeadershipSeen {
        term: 3,
        after: Duration::from_millis(after_ms),
        by: Duration::from_millis(by_ms),
    };
    // Seen at 4 s: the new leader restarted the TTL, so the keys may live to 8.25 s.
    let violations = check(
        &history(),
        &operations,
        &seen_at(7_005),
        &[leadership(3_900, 4_000)],
    );
    assert!(violations.is_empty(), "{violations:#?}");
    // A leader change after the bound had passed changes nothing.
    let violations = check(
        &history(),
        &operations,
        &seen_at(7_005),
        &[leadership(5_000, 5_100)],
    );
    assert_eq!(kinds(&violations), ["lease-outlived", "lease-outlived"]);
}

#[test]
fn a_quorum_loss_before_the_bound_delays_the_expiry_until_it_ends() {
    let operations = operations_seeing_the_keys_at(6_000);
    let loss = |from_ms, until_ms| QuorumLoss {
        from: Duration::from_millis(from_ms),
        until: Duration::from_millis(until_ms),
    };
    // No majority from 3.5 s to 4 s: the revoke may commit up to 7 s (4 s + 3 s of slack).
    let violations = check_with_losses(
        &history(),
        &operations,
        &seen_at(7_005),
        &[],
        &[loss(3_500, 4_000)],
    );
    assert!(violations.is_empty(), "{violations:#?}");
    // A loss that began after the bound had passed excuses nothing, nor does a short one that
    // ended long before the keys were seen.
    for late_or_short in [loss(4_500, 9_000), loss(1_000, 1_200)] {
        let violations = check_with_losses(
            &history(),
            &operations,
            &seen_at(7_005),
            &[],
            &[late_or_short],
        );
        assert_eq!(
            kinds(&violations),
            ["lease-outlived", "lease-outlived"],
            "{late_or_short:?}"
        );
    }
}

#[test]
fn a_keep_alive_whose_answer_was_lost_may_have_renewed_the_lease() {
    let mut operations = operations_seeing_the_keys_at(6_000);
    operations.push(operation(
        7,
        Request::LeaseKeepAlive { lease: 1 },
        (3_000, 5_000),
        Outcome::Unknown {
            reason: "timeout error: operation timed out".into(),
        },
    ));
    let violations = check(&history(), &operations, &seen_at(7_005), &[]);
    assert!(violations.is_empty(), "{violations:#?}");
    // A refused connection renewed nothing.
    operations[7].outcome = Outcome::Failed {
        reason: "connect error: Connection refused".into(),
    };
    let violations = check(&history(), &operations, &seen_at(7_005), &[]);
    assert_eq!(kinds(&violations), ["lease-outlived", "lease-outlived"]);
}

#[test]
fn a_put_attaching_a_key_to_an_expired_lease_is_reported() {
    // Revision 3's put of key 1 with lease 1 was sent at 5 s, past the 4.41 s bound (the
    // keep-alive is gone, so the bound is the grant's 10 ms + 1 s + 3 s).
    let mut operations = correct_operations();
    operations.remove(3);
    operations[2] = operation(
        2,
        leased_put(KEY_1, 1),
        (5_000, 5_010),
        ok(3, Answer::Written),
    );
    operations[3] = operation(3, range(), (5_100, 5_110), ok(3, both_keys_at_3()));
    operations[4] = operation(4, range(), (6_000, 6_010), ok(4, Answer::Range(Vec::new())));
    let violations = check(&history(), &operations, &seen_at(5_500), &[]);
    assert!(
        kinds(&violations)
            .iter()
            .all(|kind| *kind == "lease-outlived")
            && violations.len() == 2,
        "{violations:#?}"
    );
    assert!(violations
        .iter()
        .any(|violation| violation.detail.contains("by a put sent at 5.000s")));
}

#[test]
fn keys_of_a_live_lease_deleted_before_its_ttl_are_reported() {
    // The watch got revision 4's deletes at 1.2 s; the keep-alive sent at 0.4 s was acknowledged,
    // so the lease could not expire before 1.4 s.
    let violations = check(&history(), &correct_operations(), &seen_at(1_200), &[]);
    assert_eq!(
        kinds(&violations),
        ["lease-expired-early"],
        "{violations:#?}"
    );
    assert!(violations[0].detail.contains("a watch received revision 4"));
    // The same shown by a linearizable read that completed at revision 4 by 1.3 s.
    let mut operations = correct_operations();
    operations[5] = operation(5, range(), (1_250, 1_300), ok(4, Answer::Range(Vec::new())));
    let violations = check(&history(), &operations, &seen_at(1_450), &[]);
    assert_eq!(
        kinds(&violations),
        ["lease-expired-early"],
        "{violations:#?}"
    );
    assert!(violations[0].detail.contains("operation 5"));
}

#[test]
fn a_revoke_that_may_have_happened_explains_an_early_delete() {
    let mut operations = correct_operations();
    operations.push(operation(
        6,
        Request::LeaseRevoke { lease: 1 },
        (1_100, 3_100),
        Outcome::Unknown {
            reason: "504 timeout".into(),
        },
    ));
    let violations = check(&history(), &operations, &seen_at(1_200), &[]);
    assert!(violations.is_empty(), "{violations:#?}");
    // A revoke refused with 503 did not happen, and one sent after the delete was seen cannot
    // have caused it.
    for (times, outcome) in [
        (
            (1_100, 1_150),
            Outcome::Failed {
                reason: r#"503 {"error":{"code":"unavailable"}}"#.into(),
            },
        ),
        (
            (1_300, 1_350),
            Outcome::Ok {
                revision: 4,
                answer: Answer::Revoked,
            },
        ),
    ] {
        operations[6] = operation(6, Request::LeaseRevoke { lease: 1 }, times, outcome);
        let violations = check(&history(), &operations, &seen_at(1_200), &[]);
        assert_eq!(
            kinds(&violations),
            ["lease-expired-early"],
            "{violations:#?}"
        );
    }
}

#[test]
fn a_lease_whose_keys_are_deleted_apart_is_reported() {
    // Revision 4 deletes key 0 only; key 1 stays attached to lease 1 until revision 5 deletes it.
    let key_1 = State::from([(KEY_1.to_string(), kv(2, 3, 3, 1))]);
    let both = State::from([
        (KEY_0.to_string(), kv(1, 2, 2, 1)),
        (KEY_1.to_string(), kv(2, 3, 3, 1)),
    ]);
    let first_only = State::from([(KEY_0.to_string(), kv(1, 2, 2, 1))]);
    let history =
        History::from_states(1, vec![State::new(), first_only, both, key_1, State::new()]);
    let mut first_seen = seen_at(1_450);
    first_seen.insert(5, Duration::from_millis(1_460));
    let violations = check(&history, &correct_operations(), &first_seen, &[]);
    assert_eq!(
        kinds(&violations),
        ["lease-partial-delete"],
        "{violations:#?}"
    );
}

#[test]
fn a_delete_of_keys_of_two_leases_at_once_is_reported() {
    // Key 1 is put with lease 2 instead; revision 4 deletes both keys at once.
    let mut operations = correct_operations();
    operations[2].request = leased_put(KEY_1, 2);
    operations.push(operation(
        6,
        Request::LeaseGrant {
            lease: 2,
            ttl_seconds: 1,
        },
        (11, 15),
        ok(1, Answer::Lease { ttl_seconds: 1 }),
    ));
    let violations = check(&history(), &operations, &seen_at(1_450), &[]);
    assert_eq!(
        kinds(&violations),
        ["lease-phantom-delete"],
        "{violations:#?}"
    );
}

#[test]
fn a_delete_of_a_leased_key_no_lease_explains_is_reported() {
    // Key 1's value is written by a put without a lease, yet revision 4 deletes it with key 0:
    // no revoke or expiry deletes a key that is not attached to the lease.
    let mut operations = correct_operations();
    operations[2].request = Request::Put {
        key: KEY_1.into(),
        if_mod_revision: None,
    };
    let violations = check(&history(), &operations, &seen_at(1_450), &[]);
    assert_eq!(
        kinds(&violations),
        ["lease-phantom-delete"],
        "{violations:#?}"
    );
    assert!(violations[0]
        .detail
        .contains("only 1 held a put of lease 1"));
}
