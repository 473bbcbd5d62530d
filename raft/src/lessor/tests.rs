//! The lessor's rules: who expires, what a new leader restarts from, when a lease is due for a
//! checkpoint, and when a renewal must clear one.

use super::*;

fn lease(id: i64, ttl: i64) -> LeaseInfo {
    LeaseInfo {
        id,
        granted_ttl_seconds: ttl,
        attached_keys: 0,
        checkpointed_remaining_ms: None,
    }
}

fn ids(expired: &[Expired]) -> Vec<i64> {
    expired.iter().map(|expired| expired.id).collect()
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_follower_expires_nothing_and_a_new_leader_restarts_every_deadline() {
    let lessor = Lessor::default();
    let start = Instant::now();
    lessor.load(&[lease(1, 2), lease(2, 10)], start);
    let much_later = start + Duration::from_secs(60);
    assert_eq!(
        lessor.follow_role(false, true, 3, much_later),
        LeaseRole::NotLeading
    );
    assert!(lessor.take_expired(much_later, 10, SECOND).is_empty());
    // Leading, but not caught up with the term: nothing is reset and nothing expires.
    assert_eq!(
        lessor.follow_role(true, false, 3, much_later),
        LeaseRole::CatchingUp
    );
    assert!(lessor.take_expired(much_later, 10, SECOND).is_empty());
    assert_eq!(
        lessor.follow_role(true, true, 3, much_later),
        LeaseRole::TookOver
    );
    let reading = lessor.reading(1, much_later).unwrap();
    assert_eq!(reading.remaining_ttl_seconds, 2, "reset to the full TTL");
    let after_two = much_later + Duration::from_secs(2);
    let expired = lessor.take_expired(after_two, 10, SECOND);
    assert_eq!(
        expired,
        [Expired {
            id: 1,
            deadline: after_two
        }]
    );
    // Proposed once; again only after the retry interval.
    assert!(lessor.take_expired(after_two, 10, SECOND).is_empty());
    let retry = after_two + SECOND;
    assert_eq!(ids(&lessor.take_expired(retry, 10, SECOND)), [1]);
    // Leading the same term again resets nothing; a new term does.
    assert_eq!(lessor.follow_role(true, true, 3, retry), LeaseRole::Leading);
    assert_eq!(lessor.reading(1, retry).unwrap().remaining_ttl_seconds, 0);
    lessor.follow_role(true, true, 4, retry);
    assert_eq!(lessor.reading(1, retry).unwrap().remaining_ttl_seconds, 2);
}

#[test]
fn renewal_restarts_the_ttl_from_the_confirmation_and_an_expired_lease_stays_expired() {
    let lessor = Lessor::default();
    let start = Instant::now();
    lessor.follow_role(true, true, 1, start);
    lessor.granted(7, 5, start);
    let confirmed = start + Duration::from_secs(3);
    let answered = confirmed + Duration::from_millis(10);
    let renewed = Renewal::Renewed {
        granted_ttl_seconds: 5,
        needs_checkpoint_clear: false,
    };
    assert_eq!(lessor.renew(7, confirmed, answered), renewed);
    let reading = lessor.reading(7, confirmed).unwrap();
    assert_eq!(
        (reading.granted_ttl_seconds, reading.remaining_ttl_seconds),
        (5, 5)
    );
    let past = confirmed + Duration::from_secs(6);
    assert_eq!(lessor.renew(7, past, past), Renewal::Expired);
    assert_eq!(lessor.renew(8, start, start), Renewal::NotFound);
    lessor.follow_role(false, true, 1, start);
    assert_eq!(lessor.renew(7, start, start), Renewal::NotLeading);
    lessor.follow_role(true, true, 2, start);
    lessor.revoked(7);
    assert!(lessor.reading(7, start).is_none());
    assert_eq!(lessor.len(), 0);
}

#[test]
fn at_most_max_expired_leases_are_taken_at_once() {
    let lessor = Lessor::default();
    let start = Instant::now();
    lessor.follow_role(true, true, 1, start);
    for id in 1..=10 {
        lessor.granted(id, 1, start);
    }
    let later = start + Duration::from_secs(2);
    let retry = Duration::from_secs(5);
    assert_eq!(lessor.take_expired(later, 4, retry).len(), 4);
    assert_eq!(lessor.take_expired(later, 4, retry).len(), 4);
    assert_eq!(lessor.take_expired(later, 4, retry).len(), 2);
    assert!(lessor.take_expired(later, 4, retry).is_empty());
}

#[test]
fn a_revoke_whose_proposal_failed_is_taken_again_at_once_one_on_its_way_only_after_the_retry() {
    let lessor = Lessor::default();
    let start = Instant::now();
    lessor.follow_role(true, true, 1, start);
    lessor.granted(1, 1, start);
    lessor.granted(2, 1, start);
    let expired_at = start + Duration::from_secs(2);
    let retry = Duration::from_secs(5);
    let mut taken = ids(&lessor.take_expired(expired_at, 10, retry));
    taken.sort_unstable();
    assert_eq!(taken, [1, 2]);
    // Both are on their way: nothing is taken again before the retry interval...
    assert!(lessor.take_expired(expired_at, 10, retry).is_empty());
    // ...unless a proposal came back with an error: the chaos harness saw a leader that kept its
    // term hold such a lease for the whole 5 s (docs/RELIABILITY.md).
    lessor.revoke_failed(1);
    assert_eq!(ids(&lessor.take_expired(expired_at, 10, retry)), [1]);
    assert!(lessor.take_expired(expired_at, 10, retry).is_empty());
}

/// A lessor with checkpoints every `interval`, leading term 1 from `start`.
fn checkpointing_leader(interval: Duration, start: Instant) -> Lessor {
    let lessor = Lessor::default();
    lessor.set_checkpoint_interval(Some(interval));
    lessor.follow_role(true, true, 1, start);
    lessor
}

#[test]
fn a_lease_is_checkpointed_once_an_interval_after_its_grant_and_in_bounded_batches() {
    let start = Instant::now();
    let lessor = checkpointing_leader(Duration::from_secs(5), start);
    for id in 1..=3 {
        lessor.granted(id, 60, start);
    }
    let early = start + Duration::from_secs(4);
    assert!(lessor.take_due_checkpoints(early, 10).is_empty());
    let due_time = start + Duration::from_secs(5);
    let first = lessor.take_due_checkpoints(due_time, 2);
    assert_eq!(first.len(), 2, "at most the batch size");
    assert!(first.iter().all(|lease| lease.remaining_ttl_ms == 55_000));
    assert_eq!(lessor.take_due_checkpoints(due_time, 2).len(), 1);
    let much_later = start + Duration::from_secs(30);
    assert!(
        lessor.take_due_checkpoints(much_later, 10).is_empty(),
        "once checkpointed, a lease needs none until it is renewed"
    );
    // Checkpointing is off by default.
    let plain = Lessor::default();
    plain.follow_role(true, true, 1, start);
    plain.granted(9, 60, start);
    assert!(plain.take_due_checkpoints(much_later, 10).is_empty());
}

#[test]
fn a_new_leader_restarts_a_lease_from_its_checkpoint_counted_from_when_it_applied_it() {
    let start = Instant::now();
    let follower = Lessor::default();
    follower.set_checkpoint_interval(Some(Duration::from_secs(5)));
    follower.granted(1, 60, start);
    follower.granted(2, 60, start);
    let applied_at = start + Duration::from_secs(5);
    let checkpoint = [CheckpointedLease {
        id: 1,
        remaining_ttl_ms: 55_000,
    }];
    follower.checkpoint_applied(&checkpoint, &[1], applied_at);
    let elected = start + Duration::from_secs(20);
    assert_eq!(
        follower.follow_role(true, true, 2, elected),
        LeaseRole::TookOver
    );
    let reading = follower.reading(1, elected).unwrap();
    assert_eq!(
        reading.remaining_ttl_seconds, 40,
        "60 s from the grant, not from the election"
    );
    let without = follower.reading(2, elected).unwrap();
    assert_eq!(
        without.remaining_ttl_seconds, 60,
        "no checkpoint: the full TTL"
    );
    // The lease without a checkpoint is due for one at once, the other is not.
    let due = follower.take_due_checkpoints(elected, 10);
    assert_eq!(
        due,
        [CheckpointedLease {
            id: 2,
            remaining_ttl_ms: 60_000
        }]
    );
    // A checkpoint the store skipped is not recorded.
    follower.checkpoint_applied(&due, &[], elected);
    follower.follow_role(true, true, 3, elected + SECOND);
    assert_eq!(
        follower
            .reading(2, elected + SECOND)
            .unwrap()
            .remaining_ttl_seconds,
        60
    );
}

#[test]
fn renewing_a_checkpointed_lease_or_one_with_a_checkpoint_on_its_way_needs_a_clear() {
    let start = Instant::now();
    let lessor = checkpointing_leader(Duration::from_secs(5), start);
    lessor.granted(1, 60, start);
    let due_time = start + Duration::from_secs(5);
    let proposed = lessor.take_due_checkpoints(due_time, 10);
    let renewed_at = due_time + SECOND;
    let needs_clear = |renewal| {
        matches!(
            renewal,
            Renewal::Renewed {
                needs_checkpoint_clear: true,
                ..
            }
        )
    };
    assert!(
        needs_clear(lessor.renew(1, renewed_at, renewed_at)),
        "on its way"
    );
    lessor.checkpoint_applied(&proposed, &[1], renewed_at);
    assert!(
        needs_clear(lessor.renew(1, renewed_at, renewed_at)),
        "applied"
    );
    lessor.checkpoint_cleared(1, renewed_at);
    assert!(
        !needs_clear(lessor.renew(1, renewed_at, renewed_at)),
        "cleared"
    );
    // A failed proposal may still be applied: it stays on its way, and is due again.
    let next_due = renewed_at + Duration::from_secs(5);
    let failed = lessor.take_due_checkpoints(next_due, 10);
    assert_eq!(failed.len(), 1);
    lessor.checkpoint_failed(&failed, next_due);
    assert!(needs_clear(lessor.renew(1, next_due, next_due)));
    // A new term forgets what this member had on its way (it was applied, or never will be).
    lessor.follow_role(true, true, 2, next_due);
    assert!(!needs_clear(lessor.renew(1, next_due, next_due)));
}

#[test]
fn a_remaining_ttl_is_rounded_up_to_the_millisecond() {
    let start = Instant::now();
    let lessor = checkpointing_leader(Duration::from_secs(5), start);
    lessor.granted(1, 60, start);
    let due_time = start + Duration::from_secs(5) + Duration::from_nanos(1);
    let due = lessor.take_due_checkpoints(due_time, 10);
    assert_eq!(
        due[0].remaining_ttl_ms, 55_000,
        "54.999999999 s is 55,000 ms"
    );
}

#[test]
fn the_remaining_ttl_is_rounded_down_to_whole_seconds_as_etcd_shows_it() {
    let lessor = Lessor::default();
    let start = Instant::now();
    lessor.follow_role(true, true, 1, start);
    lessor.granted(9, 60, start);
    let remaining_at = |after: Duration| {
        lessor
            .reading(9, start + after)
            .unwrap()
            .remaining_ttl_seconds
    };
    assert_eq!(remaining_at(Duration::ZERO), 60);
    assert_eq!(remaining_at(Duration::from_millis(1)), 59, "etcd shows 59");
    assert_eq!(remaining_at(Duration::from_millis(59_999)), 0);
    assert_eq!(remaining_at(Duration::from_secs(61)), 0, "never negative");
}

#[test]
fn expired_and_due_leases_come_in_the_order_of_their_ids_whatever_the_order_they_came_in() {
    let lessor = Lessor::default();
    lessor.set_checkpoint_interval(Some(SECOND));
    let start = Instant::now();
    // Ids in an order no map keeps by accident, and more of them than fit in one call.
    let granted: Vec<i64> = (0..64).map(|step| (step * 37) % 64 + 1).collect();
    let leases: Vec<LeaseInfo> = granted.iter().map(|id| lease(*id, 1)).collect();
    lessor.load(&leases, start);
    lessor.follow_role(true, true, 2, start);
    let checkpoints = lessor.take_due_checkpoints(start, 10);
    let checkpointed: Vec<i64> = checkpoints.iter().map(|lease| lease.id).collect();
    assert_eq!(checkpointed, (1..=10).collect::<Vec<i64>>());
    let later = start + Duration::from_secs(2);
    let first = ids(&lessor.take_expired(later, 10, SECOND));
    let second = ids(&lessor.take_expired(later, 10, SECOND));
    assert_eq!(first, (1..=10).collect::<Vec<i64>>());
    assert_eq!(second, (11..=20).collect::<Vec<i64>>());
}
