//! The lessor: every lease's deadline, in memory. Only the leader's deadlines mean anything.
//!
//! Every member keeps the same set of leases as its store (the state machine tells the lessor of
//! every applied grant, revoke, checkpoint and checkpoint clear, and reloads it from the store
//! after a snapshot), so that a member that becomes leader already knows them all. Deadlines are
//! never replicated; what is replicated is each lease's last checkpoint (`lease_checkpoint.rs`):
//!
//! - On becoming leader (the first time this member is seen leading a term *and* has applied an
//!   entry of that term, so every entry committed before it is applied here) every deadline is
//!   reset: a lease with a checkpoint to the moment this member applied that checkpoint + its
//!   remaining TTL, any other lease to now + its granted TTL (etcd 3.4's behaviour). Leases
//!   without a checkpoint are then due for one at once, so the next leader does not restart them
//!   again. docs/design/leases.md has the bound and the argument.
//! - A renewal (keep-alive) on the leader sets the deadline to the moment before the leader
//!   confirmed its leadership with a quorum + the TTL. Any later leader was elected after that
//!   confirmation, so its reset deadline is later than the one the client was promised. A lease
//!   that has a checkpoint, or one on its way, needs a checkpoint clear through raft before the
//!   renewal is acknowledged (`Renewal::Renewed::needs_checkpoint_clear`).
//! - A follower never expires anything; the leader's expiry task (`lease_expiry.rs`) asks this
//!   map which leases are past their deadline and proposes their revokes through raft.
//!
//! The map holds at most `Limits::max_leases` entries, because it mirrors the store, which
//! refuses grants beyond that.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::Instant;
use revkv_storage::{CheckpointedLease, LeaseInfo};

/// A checkpoint this member applied (or loaded from its store).
#[derive(Clone, Copy, Debug)]
struct AppliedCheckpoint {
    remaining: Duration,
    /// When this member applied it (or loaded it, which is later): the remaining TTL counts from
    /// here, which is no earlier than when the leader measured it.
    applied_at: Instant,
}

/// One lease's clock.
#[derive(Clone, Copy, Debug)]
struct LeaseClock {
    granted_ttl: Duration,
    deadline: Instant,
    /// When a revoke of this expired lease was last proposed, so it is not proposed again on every
    /// check while the first is still on its way.
    revoke_proposed_at: Option<Instant>,
    /// The store's checkpoint of this lease, if it has one.
    checkpoint: Option<AppliedCheckpoint>,
    /// When the leader should checkpoint this lease (`None`: not until it is renewed).
    checkpoint_due_at: Option<Instant>,
    /// Checkpoints of this lease this member proposed that it has not applied yet.
    checkpoints_in_flight: u32,
}

impl LeaseClock {
    fn new(granted_ttl: Duration, now: Instant) -> Self {
        LeaseClock {
            granted_ttl,
            deadline: now + granted_ttl,
            revoke_proposed_at: None,
            checkpoint: None,
            checkpoint_due_at: None,
            checkpoints_in_flight: 0,
        }
    }
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
        /// The lease has a checkpoint (or one is on its way): the renewal must clear it through
        /// raft before it is acknowledged, or a new leader would restart the lease from the older
        /// checkpoint and expire it early.
        needs_checkpoint_clear: bool,
    },
    /// Unknown (never granted, or its revoke is applied).
    NotFound,
    /// Past its deadline, its revoke not applied yet. It cannot be renewed; as in etcd, the
    /// caller waits for the revoke before it answers "not found", so that a client told its
    /// lease is gone finds its keys gone too.
    Expired,
    /// This member stopped leading.
    NotLeading,
}

/// Where this member stands towards leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseRole {
    /// Leads, and has reset every deadline for its term.
    Leading,
    /// Leads, and has reset every deadline for its term in this very call: leases without a
    /// checkpoint are due for one now.
    TookOver,
    /// Leads, but has not applied an entry of its term yet: deadlines are not reset, nothing
    /// expires, and renewals must wait.
    CatchingUp,
    NotLeading,
}

#[derive(Debug, Default)]
struct LessorState {
    /// Ordered by lease id, so that which leases expire or are checkpointed first, and so the
    /// order of the proposals that follow, is the same on every run: a hash map's order changes
    /// with its random seed, and the simulator (issue 37) replays runs entry for entry.
    leases: BTreeMap<i64, LeaseClock>,
    /// The term in which this member leads and has reset every deadline; `None` when it does not.
    leading_term: Option<u64>,
    /// How long after a grant or renewal the leader checkpoints a lease (`None`: never).
    checkpoint_interval: Option<Duration>,
}

impl LessorState {
    /// When a lease granted or renewed at `now` is due for a checkpoint.
    fn due_after_renewal(&self, now: Instant) -> Option<Instant> {
        self.checkpoint_interval.map(|interval| now + interval)
    }
}

/// Every lease's deadline. Cheap to share (`Arc`); every method takes the one lock briefly.
#[derive(Debug, Default)]
pub struct Lessor {
    state: Mutex<LessorState>,
}

/// How far a renewal moves a lease's deadline past the leader's confirmation: its granted TTL
/// (half of it when the simulator's test plants that bug).
fn renewal_length(granted_ttl: Duration) -> Duration {
    #[cfg(feature = "planted-bugs")]
    if crate::planted_bugs::leases_are_renewed_to_half_their_ttl() {
        return granted_ttl / 2;
    }
    granted_ttl
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

    /// Turns checkpoints on (`Some(interval)`) or off. Set once, before the member starts.
    pub fn set_checkpoint_interval(&self, interval: Option<Duration>) {
        self.state().checkpoint_interval = interval;
    }

    /// Replaces every lease with the store's (at start and after installing a snapshot). A stored
    /// checkpoint counts from now: later than when it was applied, so never early.
    pub fn load(&self, leases: &[LeaseInfo], now: Instant) {
        let mut state = self.state();
        let due = state.due_after_renewal(now);
        state.leases = leases
            .iter()
            .map(|lease| {
                let mut clock = LeaseClock::new(ttl_of(lease.granted_ttl_seconds), now);
                clock.checkpoint = lease.checkpointed_remaining_ms.map(|millis| {
                    let remaining = Duration::from_millis(millis);
                    AppliedCheckpoint {
                        remaining,
                        applied_at: now,
                    }
                });
                clock.checkpoint_due_at = due.filter(|_| clock.checkpoint.is_none());
                (lease.id, clock)
            })
            .collect();
    }

    /// A grant was applied.
    pub fn granted(&self, id: i64, granted_ttl_seconds: i64, now: Instant) {
        let mut state = self.state();
        let mut clock = LeaseClock::new(ttl_of(granted_ttl_seconds), now);
        clock.checkpoint_due_at = state.due_after_renewal(now);
        state.leases.insert(id, clock);
    }

    /// A revoke (or an expiry, which is a revoke) was applied.
    pub fn revoked(&self, id: i64) {
        self.state().leases.remove(&id);
    }

    /// A checkpoint was applied: `recorded` are the ids the store recorded (the others it
    /// skipped). Either way the checkpoint is no longer on its way.
    pub fn checkpoint_applied(&self, leases: &[CheckpointedLease], recorded: &[i64], now: Instant) {
        let recorded: HashSet<i64> = recorded.iter().copied().collect();
        let mut state = self.state();
        for lease in leases {
            let Some(clock) = state.leases.get_mut(&lease.id) else {
                continue;
            };
            clock.checkpoints_in_flight = clock.checkpoints_in_flight.saturating_sub(1);
            if recorded.contains(&lease.id) {
                clock.checkpoint = Some(AppliedCheckpoint {
                    remaining: Duration::from_millis(lease.remaining_ttl_ms),
                    applied_at: now,
                });
            }
        }
    }

    /// A checkpoint clear (a renewal) was applied: the lease has no checkpoint, and is due for one
    /// a checkpoint interval from now.
    pub fn checkpoint_cleared(&self, id: i64, now: Instant) {
        let mut state = self.state();
        let due = state.due_after_renewal(now);
        if let Some(clock) = state.leases.get_mut(&id) {
            clock.checkpoint = None;
            clock.checkpoint_due_at = due;
        }
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

    /// Follows this member's role. The first time it is seen leading `term` with an entry of
    /// `term` applied (`caught_up`), every deadline is reset (see the module comment); when it
    /// does not lead, deadlines are left alone and nothing expires.
    /// Answers `TookOver` from the call that resets.
    pub fn follow_role(&self, leads: bool, caught_up: bool, term: u64, now: Instant) -> LeaseRole {
        let mut state = self.state();
        if !leads {
            state.leading_term = None;
            return LeaseRole::NotLeading;
        }
        if state.leading_term == Some(term) {
            return LeaseRole::Leading;
        }
        if !caught_up {
            state.leading_term = None;
            return LeaseRole::CatchingUp;
        }
        let checkpoints_on = state.checkpoint_interval.is_some();
        for clock in state.leases.values_mut() {
            clock.revoke_proposed_at = None;
            clock.checkpoints_in_flight = 0;
            match clock.checkpoint {
                Some(checkpoint) => {
                    clock.deadline = checkpoint.applied_at + checkpoint.remaining;
                    clock.checkpoint_due_at = None;
                }
                None => {
                    clock.deadline = now + clock.granted_ttl;
                    clock.checkpoint_due_at = checkpoints_on.then_some(now);
                }
            }
        }
        state.leading_term = Some(term);
        LeaseRole::TookOver
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
        let due = state.due_after_renewal(now);
        let Some(clock) = state.leases.get_mut(&id) else {
            return Renewal::NotFound;
        };
        if clock.deadline <= now {
            return Renewal::Expired;
        }
        clock.deadline = clock
            .deadline
            .max(confirmed_at + renewal_length(clock.granted_ttl));
        let needs_checkpoint_clear = clock.checkpoint.is_some() || clock.checkpoints_in_flight > 0;
        if !needs_checkpoint_clear {
            // Without a checkpoint the renewal lives only here; the clear's apply reschedules
            // the next checkpoint otherwise.
            clock.checkpoint_due_at = due;
        }
        Renewal::Renewed {
            granted_ttl_seconds: clock.granted_ttl.as_secs() as i64,
            needs_checkpoint_clear,
        }
    }

    /// The granted and remaining TTL of lease `id`, or `None` when it is unknown. The remaining
    /// TTL is in whole seconds rounded down, as etcd shows it (`int64(Remaining().Seconds())`):
    /// right after a 60 s grant it is 59, and a lease about to expire shows 0.
    pub fn reading(&self, id: i64, now: Instant) -> Option<LeaseClockReading> {
        let state = self.state();
        let clock = state.leases.get(&id)?;
        let remaining = clock.deadline.saturating_duration_since(now);
        Some(LeaseClockReading {
            granted_ttl_seconds: clock.granted_ttl.as_secs() as i64,
            remaining_ttl_seconds: remaining.as_secs() as i64,
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

    /// A revoke proposal of lease `id` came back with an error (this member stopped leading for a
    /// moment, no quorum, a timeout): the next check proposes it again, instead of waiting out
    /// `retry_after`, which is for revokes still on their way. Proposing again is safe even if
    /// the failed one commits after all: the store refuses the revoke of a lease already gone.
    pub fn revoke_failed(&self, id: i64) {
        if let Some(clock) = self.state().leases.get_mut(&id) {
            clock.revoke_proposed_at = None;
        }
    }

    /// Up to `max` live leases due for a checkpoint, with their remaining TTL now, marked as on
    /// their way. Empty unless this member leads. The caller must have read its applied index
    /// before calling, and propose it as the checkpoint's `computed_at_index`.
    pub fn take_due_checkpoints(&self, now: Instant, max: usize) -> Vec<CheckpointedLease> {
        let mut state = self.state();
        if state.leading_term.is_none() {
            return Vec::new();
        }
        let mut due = Vec::new();
        for (id, clock) in state.leases.iter_mut() {
            if due.len() >= max {
                break;
            }
            let is_due = clock.checkpoint_due_at.is_some_and(|at| at <= now);
            if !is_due || clock.deadline <= now {
                continue;
            }
            clock.checkpoint_due_at = None;
            clock.checkpoints_in_flight = clock.checkpoints_in_flight.saturating_add(1);
            // Rounded up: a member that restarts the lease from this checkpoint must not end
            // it even a fraction of a millisecond before this leader would.
            let remaining_nanos = (clock.deadline - now).as_nanos();
            let remaining_ttl_ms = u64::try_from(remaining_nanos.div_ceil(1_000_000));
            due.push(CheckpointedLease {
                id: *id,
                remaining_ttl_ms: remaining_ttl_ms.unwrap_or(u64::MAX),
            });
        }
        due
    }

    /// A proposed checkpoint failed (no answer): its leases are due again at `now`. It may still
    /// be applied later, so they stay counted as in flight until it is, or until a new term.
    pub fn checkpoint_failed(&self, leases: &[CheckpointedLease], now: Instant) {
        let mut state = self.state();
        for lease in leases {
            if let Some(clock) = state.leases.get_mut(&lease.id) {
                clock.checkpoint_due_at.get_or_insert(now);
            }
        }
    }
}

#[cfg(test)]
mod tests;
