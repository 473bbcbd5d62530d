//! The lease checker: did every leased key go when its lease ended, and only then?
//!
//! It reads the store's history (every revision's changes, from the recording watch), the
//! recorded operations (grants, keep-alives, revokes, leased puts, and every linearizable
//! key-value operation as a clock), when each revision first reached a watch, and the leader
//! changes the harness saw. The bounds are the documented ones (docs/design/leases.md, "The bound"):
//! with r the send time of the lease's last acknowledged renewal (or grant) and T its TTL,
//!
//! - **never early**: no key is deleted by expiry before r + T;
//! - **not late**: every attached key is deleted by p + T + slack, where p is the later of the
//!   last renewal that may have taken effect and the takeover of the last leader before the
//!   expiry (each leader change may add one TTL), or the end of a time in which the nemesis left
//!   no majority anywhere (nothing commits then, so the revoke waits for it).
//!
//! Time is the harness's monotonic clock, which every member shares (one machine). A revision's
//! time is never known exactly, only bounded by what was seen:
//!
//! - a linearizable operation answered at revision `v` was linearized inside `[invoked,
//!   completed]` with the store at `v`; so anything at a revision `<= v` happened before its
//!   `completed`, and anything at a revision `> v` happened after its `invoked`;
//! - a watch event of revision `v` arrived after revision `v` happened (never before), so an
//!   arrival time bounds a revision from above only. That is why a late DELETE event alone proves
//!   nothing: the member may have sent it late. Lateness is shown by an operation that began after
//!   the bound and still saw the key attached.
//!
//! Rules, each with why it cannot raise a false alarm on an ambiguous history:
//!
//! 1. `lease-outlived`: a key attached to lease L at revision P (until revision D, or still at the
//!    end) while some linearizable operation invoked after L's late bound answered at a revision in
//!    `P..D`, or the put that attached it was itself sent after the bound. The late bound counts
//!    every renewal that may have happened (an unanswered keep-alive or grant as late as its
//!    completion plus a margin for a request still in flight), the longest TTL the lease may have,
//!    and every leader change seen before the bound (each observed change is taken to have
//!    happened as late as its observation, and to count when it may have happened before the
//!    bound).
//! 2. `lease-expired-early`: a revision deleting L's keys that no revoke of L can explain (no
//!    revoke of L that may have happened was sent before the revision's latest possible time),
//!    seen (by an operation that completed, or a watch event that arrived) before the send time of
//!    L's last acknowledged keep-alive or of its grant, plus L's shortest possible TTL. Only
//!    acknowledged keep-alives move that bound, and an acknowledged renewal renewed from a moment
//!    no earlier than its send time, so the lease cannot legally have ended before it.
//! 3. `lease-partial-delete`: a revoke or expiry deletes every key attached to its lease at one
//!    revision; a revision deleting some of a lease's keys but not others breaks that.
//! 4. `lease-phantom-delete`: a revision deleting a leased key that no lease explains (its value
//!    was not written by a leased put), or keys of two leases at once.
//!
//! The workload never deletes a key under [`LEASE_KEY_PREFIX`] other than by revoking its lease,
//! so every revision that deletes only such keys is a revoke's or an expiry's.

use std::collections::BTreeMap;
use std::time::Duration;

use super::revision_clock::{RevisionClock, Witness};
use super::states::{Change, History, Kind};
use super::Violation;
use crate::chaos::history::{Answer, Operation, Outcome, Request};
use crate::chaos::leaderships::{LeadershipSeen, QuorumLoss};
use crate::chaos::workload::LEASE_KEY_PREFIX;

/// The documented slack and the harness's own margins.
#[derive(Clone, Copy, Debug)]
pub struct LeaseBounds {
    /// After a lease's deadline, how long its revoke may take: one expiry check (250 ms) plus a
    /// raft round to commit and apply it, on a loaded machine.
    pub slack: Duration,
    /// How long after a new leader is seen it may still restart the deadlines (it does so within
    /// one expiry check of its election).
    pub takeover: Duration,
    /// How long after its answer was lost (or it failed ambiguously) a grant or keep-alive may
    /// still take effect: the members' request timeouts plus the longest pause the nemesis
    /// injects, during which a member may hold the request.
    pub unknown_effect: Duration,
}

impl Default for LeaseBounds {
    fn default() -> Self {
        LeaseBounds {
            slack: Duration::from_secs(3),
            takeover: Duration::from_millis(250),
            unknown_effect: Duration::from_secs(8),
        }
    }
}

/// Everything the lease checker reads.
pub struct LeaseObservations<'a> {
    pub history: &'a History,
    /// Indexed by id.
    pub operations: &'a [Operation],
    /// When each revision's events first reached a watch, since the run started.
    pub first_seen: &'a BTreeMap<u64, Duration>,
    pub leaderships: &'a [LeadershipSeen],
    /// When the nemesis left no majority anywhere.
    pub quorum_losses: &'a [QuorumLoss],
}

/// Whether a revision only deletes keys the lease workload attaches to leases: a revoke's or an
/// expiry's (the key-value checker leaves these revisions to this one).
pub fn only_deletes_leased_keys(changes: &[Change]) -> bool {
    !changes.is_empty()
        && changes
            .iter()
            .all(|change| change.kind == Kind::Delete && change.key.starts_with(LEASE_KEY_PREFIX))
}

/// Runs every lease rule; every violation found is returned.
pub fn check_leases(observed: &LeaseObservations, bounds: &LeaseBounds) -> Vec<Violation> {
    let leases = LeaseFacts::gather(observed.operations);
    let attachments = attachments(observed.history, observed.operations);
    let clock = RevisionClock::new(observed.operations, observed.first_seen);
    let mut violations = Vec::new();
    for attachment in &attachments {
        check_not_late(
            observed,
            bounds,
            &leases,
            &clock,
            attachment,
            &mut violations,
        );
    }
    for revision in observed.history.first() + 1..=observed.history.last() {
        let changes = observed.history.changes_at(revision);
        if only_deletes_leased_keys(changes) {
            check_lease_delete(
                observed,
                &leases,
                &attachments,
                &clock,
                revision,
                &mut violations,
            );
        }
    }
    violations
}

/// One key attached to one lease over a span of revisions.
#[derive(Debug)]
struct Attachment<'a> {
    key: &'a str,
    lease: i64,
    /// The leased put that attached it, and the revision it took effect at.
    put: usize,
    from: u64,
    /// The revision that changed the key next (a delete or another put), if any.
    until: Option<u64>,
}

/// Every span of the history in which a leased key held a leased put's value.
fn attachments<'a>(history: &'a History, operations: &[Operation]) -> Vec<Attachment<'a>> {
    let mut found = Vec::new();
    for (key, versions) in history.versions_under(LEASE_KEY_PREFIX) {
        for (index, (revision, value)) in versions.iter().enumerate() {
            let Some(writer) = value.as_ref().and_then(|kv| kv.writer()) else {
                continue;
            };
            let Some(Request::LeasedPut { lease, .. }) =
                operations.get(writer).map(|operation| &operation.request)
            else {
                continue;
            };
            found.push(Attachment {
                key,
                lease: *lease,
                put: writer,
                from: *revision,
                until: versions.get(index + 1).map(|(next, _)| *next),
            });
        }
    }
    found
}

/// What the operations say about each lease.
#[derive(Default)]
struct LeaseFacts {
    by_lease: BTreeMap<i64, LeaseRecord>,
    /// The longest TTL any grant or keep-alive answered (a grant below the minimum gets it).
    longest_granted_ttl: i64,
}

#[derive(Default)]
struct LeaseRecord {
    grant: Option<usize>,
    requested_ttl: i64,
    granted_ttl: Option<i64>,
    keep_alives: Vec<usize>,
    revokes: Vec<usize>,
}

impl LeaseFacts {
    fn gather(operations: &[Operation]) -> LeaseFacts {
        let mut facts = LeaseFacts::default();
        for operation in operations {
            let Some(lease) = operation.request.lease() else {
                continue;
            };
            if let Outcome::Ok {
                answer: Answer::Lease { ttl_seconds },
                ..
            } = operation.outcome
            {
                facts.longest_granted_ttl = facts.longest_granted_ttl.max(ttl_seconds);
            }
            let record = facts.by_lease.entry(lease).or_default();
            match (&operation.request, &operation.outcome) {
                (Request::LeaseGrant { ttl_seconds, .. }, outcome) => {
                    record.grant = Some(operation.id);
                    record.requested_ttl = *ttl_seconds;
                    if let Outcome::Ok {
                        answer: Answer::Lease { ttl_seconds },
                        ..
                    } = outcome
                    {
                        record.granted_ttl = Some(*ttl_seconds);
                    }
                }
                (Request::LeaseKeepAlive { .. }, _) => record.keep_alives.push(operation.id),
                (Request::LeaseRevoke { .. }, _) => record.revokes.push(operation.id),
                _ => {}
            }
        }
        facts
    }

    /// The shortest TTL the lease may have: what its grant asked for (a grant gets at least that).
    fn shortest_ttl(&self, record: &LeaseRecord) -> Duration {
        seconds(record.granted_ttl.unwrap_or(record.requested_ttl))
    }

    /// The longest TTL the lease may have: what its grant answered, or else the longest any
    /// grant was given in this run (a grant below the minimum gets the minimum).
    fn longest_ttl(&self, record: &LeaseRecord) -> Duration {
        seconds(
            record
                .granted_ttl
                .unwrap_or(record.requested_ttl.max(self.longest_granted_ttl)),
        )
    }
}

fn seconds(ttl: i64) -> Duration {
    Duration::from_secs(ttl.max(0) as u64)
}

/// The latest moment lease `lease`'s keys may legally still exist (rule 1's bound).
fn late_bound(
    leases: &LeaseFacts,
    record: &LeaseRecord,
    operations: &[Operation],
    leaderships: &[LeadershipSeen],
    quorum_losses: &[QuorumLoss],
    bounds: &LeaseBounds,
) -> Duration {
    let ttl = leases.longest_ttl(record);
    let renewals = record.grant.iter().chain(&record.keep_alives);
    let last_renewal = renewals
        .filter_map(|id| latest_effect(&operations[*id], bounds))
        .max()
        .unwrap_or(Duration::ZERO);
    let mut bound = last_renewal + ttl + bounds.slack;
    // A leader that took over while the lease lived restarted its TTL, and while no majority
    // existed nothing could revoke the lease: it goes within the slack once a majority is back.
    // Each of these may move the bound past a later one, so they are applied until none moves it
    // (at most once per event, since each only ever raises the bound to a fixed value).
    for _ in 0..=leaderships.len() + quorum_losses.len() {
        let before = bound;
        for leadership in leaderships {
            if leadership.after < bound {
                bound = bound.max(leadership.by + bounds.takeover + ttl + bounds.slack);
            }
        }
        for loss in quorum_losses {
            if loss.from < bound {
                bound = bound.max(loss.until + bounds.slack);
            }
        }
        if bound == before {
            break;
        }
    }
    bound
}

/// The latest moment a grant or keep-alive may have set the lease's deadline from; `None` for one
/// that certainly did not (refused connection, the lease gone).
fn latest_effect(operation: &Operation, bounds: &LeaseBounds) -> Option<Duration> {
    match &operation.outcome {
        Outcome::Ok {
            answer: Answer::Lease { ttl_seconds },
            ..
        } if *ttl_seconds > 0 => Some(operation.completed),
        Outcome::NotFound => None,
        Outcome::Failed { reason } if reason.starts_with("connect error") => None,
        _ => Some(operation.completed + bounds.unknown_effect),
    }
}

/// Rule 1: the attachment must not be seen after its lease's late bound.
fn check_not_late(
    observed: &LeaseObservations,
    bounds: &LeaseBounds,
    leases: &LeaseFacts,
    clock: &RevisionClock,
    attachment: &Attachment,
    violations: &mut Vec<Violation>,
) {
    let Some(record) = leases.by_lease.get(&attachment.lease) else {
        return;
    };
    let operations = observed.operations;
    let bound = late_bound(
        leases,
        record,
        operations,
        observed.leaderships,
        observed.quorum_losses,
        bounds,
    );
    let put = &operations[attachment.put];
    let describe_span = || match attachment.until {
        Some(until) => {
            let seen = clock.happened_by(until).map_or(String::new(), |(at, _)| {
                format!(", seen by {:.3}s", at.as_secs_f64())
            });
            format!(
                "revisions {}..{until} (ended at {until}{seen})",
                attachment.from
            )
        }
        None => format!("revision {} to the end of the history", attachment.from),
    };
    if put.invoked > bound {
        violations.push(Violation::new(
            "lease-outlived",
            format!(
                "{:?} was attached to lease {} over {} by a put sent at {:.3}s, after the \
                 lease's latest expiry {:.3}s",
                attachment.key,
                attachment.lease,
                describe_span(),
                put.invoked.as_secs_f64(),
                bound.as_secs_f64()
            ),
            &lease_slice(operations, record, &[put]),
        ));
        return;
    }
    // Operations invoked after the put completed and after the bound: the lowest revision any of
    // them answered was the store's revision at some moment past the bound.
    let Some((revision, witness)) = clock.lowest_revision_after(bound.max(put.completed)) else {
        return;
    };
    let still_attached =
        revision >= attachment.from && attachment.until.is_none_or(|until| revision < until);
    if still_attached {
        violations.push(Violation::new(
            "lease-outlived",
            format!(
                "{:?} stayed attached to lease {} over {}; operation {} invoked at {:.3}s, \
                 after the lease's latest expiry {:.3}s, answered at revision {revision}",
                attachment.key,
                attachment.lease,
                describe_span(),
                witness.id,
                witness.invoked.as_secs_f64(),
                bound.as_secs_f64()
            ),
            &lease_slice(operations, record, &[put, witness]),
        ));
    }
}

/// Rules 2, 3 and 4 for one revision that deletes only leased keys.
fn check_lease_delete(
    observed: &LeaseObservations,
    leases: &LeaseFacts,
    attachments: &[Attachment],
    clock: &RevisionClock,
    revision: u64,
    violations: &mut Vec<Violation>,
) {
    let ended: Vec<&Attachment> = attachments
        .iter()
        .filter(|attachment| attachment.until == Some(revision))
        .collect();
    let deleted = observed.history.changes_at(revision);
    let mut lease_ids: Vec<i64> = ended.iter().map(|attachment| attachment.lease).collect();
    lease_ids.sort();
    lease_ids.dedup();
    let [lease] = lease_ids[..] else {
        violations.push(Violation::new(
            "lease-phantom-delete",
            format!(
                "revision {revision} deletes {:?}, attached to leases {lease_ids:?}: a revoke or \
                 expiry deletes the keys of exactly one lease",
                deleted.iter().map(|change| &change.key).collect::<Vec<_>>()
            ),
            &[],
        ));
        return;
    };
    if ended.len() != deleted.len() {
        violations.push(Violation::new(
            "lease-phantom-delete",
            format!(
                "revision {revision} deletes {} keys but only {} held a put of lease {lease}",
                deleted.len(),
                ended.len()
            ),
            &[],
        ));
    }
    let left_behind: Vec<&str> = attachments
        .iter()
        .filter(|attachment| attachment.lease == lease && attachment.from < revision)
        .filter(|attachment| attachment.until.is_none_or(|until| until > revision))
        .map(|attachment| attachment.key)
        .collect();
    if !left_behind.is_empty() {
        violations.push(Violation::new(
            "lease-partial-delete",
            format!(
                "revision {revision} deleted some keys of lease {lease} but left {left_behind:?} \
                 attached"
            ),
            &[],
        ));
    }
    if let Some(record) = leases.by_lease.get(&lease) {
        check_not_early(observed, leases, record, clock, revision, lease, violations);
    }
}

/// Rule 2: an expiry (a lease delete no revoke explains) no earlier than the lease allowed.
fn check_not_early(
    observed: &LeaseObservations,
    leases: &LeaseFacts,
    record: &LeaseRecord,
    clock: &RevisionClock,
    revision: u64,
    lease: i64,
    violations: &mut Vec<Violation>,
) {
    let operations = observed.operations;
    let Some((happened_by, witness)) = clock.happened_by(revision) else {
        return;
    };
    let revoke_may_explain = record.revokes.iter().any(|id| {
        let revoke = &operations[*id];
        revoke.invoked < happened_by && may_have_revoked(revoke)
    });
    if revoke_may_explain {
        return;
    }
    let acknowledged_renewals = record.keep_alives.iter().filter(|id| {
        matches!(
            operations[**id].outcome,
            Outcome::Ok { answer: Answer::Lease { ttl_seconds }, .. } if ttl_seconds > 0
        )
    });
    let Some(last_sent) = record
        .grant
        .iter()
        .chain(acknowledged_renewals)
        .map(|id| operations[*id].invoked)
        .max()
    else {
        return;
    };
    let earliest_expiry = last_sent + leases.shortest_ttl(record);
    if happened_by < earliest_expiry {
        let seen = match witness {
            Witness::Operation(id) => format!("operation {id} completed at revision >= it"),
            Witness::WatchEvent(at) => format!("a watch received revision {at}"),
        };
        let mut shown: Vec<&Operation> = Vec::new();
        if let Witness::Operation(id) = witness {
            shown.push(&operations[id]);
        }
        violations.push(Violation::new(
            "lease-expired-early",
            format!(
                "revision {revision} deleted the keys of lease {lease} by {:.3}s ({seen}), but \
                 with no revoke sent before then the lease could not expire before {:.3}s",
                happened_by.as_secs_f64(),
                earliest_expiry.as_secs_f64()
            ),
            &lease_slice(operations, record, &shown),
        ));
    }
}

/// Whether a revoke may have happened: anything but a refused connection, a 404 (the lease was
/// already gone) or a 503 (the contract's "did not happen").
fn may_have_revoked(revoke: &Operation) -> bool {
    match &revoke.outcome {
        Outcome::NotFound => false,
        Outcome::Failed { reason } => {
            !(reason.starts_with("connect error")
                || reason.starts_with("503")
                || reason.starts_with("400"))
        }
        _ => true,
    }
}

/// The lease's grant, keep-alives and revokes (at most a dozen), then `extra`.
fn lease_slice<'a>(
    operations: &'a [Operation],
    record: &LeaseRecord,
    extra: &[&'a Operation],
) -> Vec<&'a Operation> {
    const SHOWN: usize = 12;
    let mut ids: Vec<usize> = record.grant.iter().copied().collect();
    ids.extend(&record.keep_alives);
    ids.extend(&record.revokes);
    ids.sort();
    let skip = ids.len().saturating_sub(SHOWN);
    let mut slice: Vec<&Operation> = ids[skip..].iter().map(|id| &operations[*id]).collect();
    slice.extend(extra);
    slice
}
