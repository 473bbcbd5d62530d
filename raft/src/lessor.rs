//! The lessor: every lease's deadline, in memory. Only the leader's deadlines mean anything.
//!
//! Every member keeps the same set of leases as its store (the state machine tells the lessor of
//! every applied grant and revoke, and reloads it from the store after a snapshot), so that a
//! member that becomes leader already knows them all. Deadlines are never replicated:
//!
//! - On becoming leader (the first time this member is seen leading a term) every deadline is
//!   reset to now + the lease's granted TTL, as etcd does. A lease therefore never expires earlier
//!   than its TTL after its last acknowledged renewal, and a leader change extends it by at most
//!   the time since that renewal (docs/ARCHITECTURE.md, "Leases", has the bound).
//! - A renewal (keep-alive) on the leader sets the deadline to the moment before the leader
//!   confirmed its leadership with a quorum + the TTL. Any later leader was elected after that
//!   confirmation, so its reset deadline is later than the one the client was promised.
//! - A follower never expires anything; the leader's expiry task (`lease_expiry.rs`) asks this
//!   map which leases are past their deadline and proposes their revokes through raft.
//!
//! The map holds at most `Limits::max_leases` entries, because it mirrors the store, which
//! refuses grants beyond that.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use revkv_storage::LeaseInfo;
use tokio::time::Instant;

/// One lease's clock.
#[derive(Clone, Copy, Debug)]
struct LeaseClock {
    granted_ttl: Duration,
    deadline: Instant,
    /// When a revoke of this expired lease was last proposed, so it is not proposed again on every
    /// check while the first is still on its way.
    revoke_proposed_at: Option<Instant>,
}

/// What a time-to-live query answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseClockReading {
    pub granted_ttl_seconds: i64,
    /// Whole seconds left before expiry, rounded up (0 once the deadline has passed).
    pub remaining_ttl_seconds: i64,
}

/// A lease past its deadline, whose revoke the leader is about to propose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    pub id: i64,
    /// The deadline it passed (for the expiry-lag metric).
    pub deadline: Instant,
}

/// What a renewal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    Renewed {
        granted_ttl_seconds: i64,
    },
    /// Unknown, or already past its deadline.
    NotFound,
    /// This member stopped leading.
    NotLeading,
}

#[derive(Debug, Default)]
struct LessorState {
    leases: HashMap<i64, LeaseClock>,
    /// The term in which this member leads and has reset every deadline; `None` when it does not.
    leading_term: Option<u64>,
}

/// Every lease's deadline. Cheap to share (`Arc`); every method takes the one lock briefly.
#[derive(Debug, Default)]
pub struct Lessor {
    state: Mutex<LessorState>,
}

fn ttl_of(granted_ttl_seconds: i64) -> Duration {
    Duration::from_secs(u64::try_from(granted_ttl_seconds).unwrap_or(0))
}

impl Lessor {
    fn state(&self) -> MutexGuard<'_, LessorState> {
        // The state is plain values that every method leaves consistent, so a panic elsewhere
        // while holding the lock does not make it unusable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces every lease with the store's (at start and after installing a snapshot).
    pub fn load(&self, leases: &[LeaseInfo], now: Instant) {
        let mut state = self.state();
        state.leases = leases
            .iter()
            .map(|lease| {
                let granted_ttl = ttl_of(lease.granted_ttl_seconds);
                let clock = LeaseClock {
                    granted_ttl,
                    deadline: now + granted_ttl,
                    revoke_proposed_at: None,
                };
                (lease.id, clock)
            })
            .collect();
    }

    /// A grant was applied.
    pub fn granted(&self, id: i64, granted_ttl_seconds: i64, now: Instant) {
        let granted_ttl = ttl_of(granted_ttl_seconds);
        let clock = LeaseClock {
            granted_ttl,
            deadline: now + granted_ttl,
            revoke_proposed_at: None,
        };
        self.state().leases.insert(id, clock);
    }

    /// A revoke (or an expiry, which is a revoke) was applied.
    pub fn revoked(&self, id: i64) {
        self.state().leases.remove(&id);
    }

    /// How many leases the lessor holds.
    pub fn len(&self) -> usize {
        self.state().leases.len()
    }

    /// True when the lessor holds no lease.
    pub fn is_empty(&self) -> bool {
        self.state().leases.is_empty()
    }

    /// True when `id` is a lease this member knows of.
    pub fn contains(&self, id: i64) -> bool {
        self.state().leases.contains_key(&id)
    }

    /// Follows this member's role: the first time it is seen leading `term`, every deadline
    /// restarts at now + its TTL; when it does not lead, deadlines are left alone and nothing
    /// expires. Answers true when this member leads `term` (after any reset).
    pub fn follow_role(&self, leads: bool, term: u64, now: Instant) -> bool {
        let mut state = self.state();
        if !leads {
            state.leading_term = None;
            return false;
        }
        if state.leading_term != Some(term) {
            for clock in state.leases.values_mut() {
                clock.deadline = now + clock.granted_ttl;
                clock.revoke_proposed_at = None;
            }
            state.leading_term = Some(term);
        }
        true
    }

    /// Renews lease `id` to its granted TTL from `confirmed_at` (a moment before this member
    /// confirmed it still leads). A lease past its deadline is not renewed: its revoke is on the
    /// way and, as in etcd, it cannot be brought back. Only a leader that has reset its deadlines
    /// renews; leadership can move between the caller's check and this call, which answers
    /// `NotLeading` then.
    pub fn renew(&self, id: i64, confirmed_at: Instant, now: Instant) -> Renewal {
        let mut state = self.state();
        if state.leading_term.is_none() {
            return Renewal::NotLeading;
        }
        let Some(clock) = state.leases.get_mut(&id) else {
            return Renewal::NotFound;
        };
        if clock.deadline <= now {
            return Renewal::NotFound;
        }
        clock.deadline = clock.deadline.max(confirmed_at + clock.granted_ttl);
        Renewal::Renewed {
            granted_ttl_seconds: clock.granted_ttl.as_secs() as i64,
        }
    }

    /// The granted and remaining TTL of lease `id`, or `None` when it is unknown.
    pub fn reading(&self, id: i64, now: Instant) -> Option<LeaseClockReading> {
        let state = self.state();
        let clock = state.leases.get(&id)?;
        let remaining = clock.deadline.saturating_duration_since(now);
        let remaining_ttl_seconds = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
        Some(LeaseClockReading {
            granted_ttl_seconds: clock.granted_ttl.as_secs() as i64,
            remaining_ttl_seconds: remaining_ttl_seconds as i64,
        })
    }

    /// Up to `max` leases past their deadline whose revoke is not already on its way (or was
    /// proposed more than `retry_after` ago and has not been applied), marked as proposed now.
    /// Empty unless this member leads.
    pub fn take_expired(&self, now: Instant, max: usize, retry_after: Duration) -> Vec<Expired> {
        let mut state = self.state();
        if state.leading_term.is_none() {
            return Vec::new();
        }
        let mut expired = Vec::new();
        for (id, clock) in state.leases.iter_mut() {
            if expired.len() >= max {
                break;
            }
            let waiting_for_revoke = clock
                .revoke_proposed_at
                .is_some_and(|proposed| now < proposed + retry_after);
            if clock.deadline <= now && !waiting_for_revoke {
                clock.revoke_proposed_at = Some(now);
                expired.push(Expired {
                    id: *id,
                    deadline: clock.deadline,
                });
            }
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: i64, ttl: i64) -> LeaseInfo {
        LeaseInfo {
            id,
            granted_ttl_seconds: ttl,
            attached_keys: 0,
        }
    }

    #[test]
    fn a_follower_expires_nothing_and_a_new_leader_restarts_every_deadline() {
        let lessor = Lessor::default();
        let start = Instant::now();
        lessor.load(&[lease(1, 2), lease(2, 10)], start);
        let much_later = start + Duration::from_secs(60);
        assert!(!lessor.follow_role(false, 3, much_later));
        assert!(lessor
            .take_expired(much_later, 10, Duration::from_secs(1))
            .is_empty());
        assert!(lessor.follow_role(true, 3, much_later));
        let reading = lessor.reading(1, much_later).unwrap();
        assert_eq!(reading.remaining_ttl_seconds, 2, "reset to the full TTL");
        let after_two = much_later + Duration::from_secs(2);
        let expired = lessor.take_expired(after_two, 10, Duration::from_secs(1));
        assert_eq!(
            expired,
            [Expired {
                id: 1,
                deadline: much_later + Duration::from_secs(2)
            }]
        );
        // Proposed once; again only after the retry interval.
        assert!(lessor
            .take_expired(after_two, 10, Duration::from_secs(1))
            .is_empty());
        let retry = after_two + Duration::from_secs(1);
        let again = lessor.take_expired(retry, 10, Duration::from_secs(1));
        assert_eq!(
            again.iter().map(|expired| expired.id).collect::<Vec<_>>(),
            [1]
        );
        // Leading the same term again resets nothing; a new term does.
        assert!(lessor.follow_role(true, 3, retry));
        assert_eq!(lessor.reading(1, retry).unwrap().remaining_ttl_seconds, 0);
        assert!(lessor.follow_role(true, 4, retry));
        assert_eq!(lessor.reading(1, retry).unwrap().remaining_ttl_seconds, 2);
    }

    #[test]
    fn renewal_restarts_the_ttl_from_the_confirmation_and_an_expired_lease_stays_expired() {
        let lessor = Lessor::default();
        let start = Instant::now();
        lessor.follow_role(true, 1, start);
        lessor.granted(7, 5, start);
        let confirmed = start + Duration::from_secs(3);
        let answered = confirmed + Duration::from_millis(10);
        let renewed = Renewal::Renewed {
            granted_ttl_seconds: 5,
        };
        assert_eq!(lessor.renew(7, confirmed, answered), renewed);
        let reading = lessor.reading(7, confirmed).unwrap();
        assert_eq!(
            (reading.granted_ttl_seconds, reading.remaining_ttl_seconds),
            (5, 5)
        );
        let past = confirmed + Duration::from_secs(6);
        assert_eq!(lessor.renew(7, past, past), Renewal::NotFound);
        assert_eq!(lessor.renew(8, start, start), Renewal::NotFound);
        lessor.follow_role(false, 1, start);
        assert_eq!(lessor.renew(7, start, start), Renewal::NotLeading);
        lessor.follow_role(true, 2, start);
        lessor.revoked(7);
        assert!(lessor.reading(7, start).is_none());
        assert_eq!(lessor.len(), 0);
    }

    #[test]
    fn at_most_max_expired_leases_are_taken_at_once() {
        let lessor = Lessor::default();
        let start = Instant::now();
        lessor.follow_role(true, 1, start);
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
}
