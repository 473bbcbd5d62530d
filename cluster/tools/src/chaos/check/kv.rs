//! The key-value checker: is the recorded history of operations linearizable against the store's
//! history, and did every acknowledged write survive?
//!
//! revkv gives every change a unique revision, and every workload value names the operation that
//! wrote it, so the check needs no search over orderings (Wing–Gong–Lowe's search is only needed
//! when a history cannot say which write produced what). Instead:
//!
//! 1. **Attribution.** Each revision of the store's history is traced to the one operation that
//!    made it: by the tag in its values, or, for a delete, by the acknowledged revision, or else by
//!    a delete of that key whose outcome is unknown. A revision no issued operation explains is a
//!    phantom write; an operation found at two revisions was applied twice; a write reported as
//!    failed that is found anyway broke the outcome rules; an acknowledged write whose revision
//!    does not hold it was lost. The changes must be exactly what the request asked for, and a
//!    compare-and-swap must have found the `mod_revision` it compared.
//! 2. **Answers.** Every answer that carries a header revision must equal the history at that
//!    revision (a read's value, a range's keys, a patch's result, a delete of nothing). An answer
//!    without one (404, 409 with `current`) must match the history at some revision the operation
//!    could have been ordered at.
//! 3. **Real time.** Linearizable operations take effect in their real-time order: an operation
//!    invoked after another completed has a revision at least as high (strictly higher if it
//!    wrote). Serializable reads may lag, but never go backwards on one member.
//!
//! Lease grants, keep-alives and revokes are left to the lease checker ([`super::leases`]), and so
//! are the revisions that only delete leased keys (a revoke's or an expiry's): no key-value
//! operation of the workload deletes a key under the lease prefix. Puts that attach a key to a
//! lease are ordinary writes here. Since no operation holds such a revision, a 404's window
//! extends through the ones right above it: the member may have expired a lease before the read.

use std::collections::BTreeMap;

use super::leases::only_deletes_leased_keys;
use super::states::{History, Kind};
use super::Violation;
use crate::chaos::history::{Answer, Operation, Outcome, Request};

/// Checks `operations` against `history`; every violation found is returned.
///
/// `operations[i]` must be the operation with id `i`.
pub fn check_operations(history: &History, operations: &[Operation]) -> Vec<Violation> {
    assert!(
        operations
            .iter()
            .enumerate()
            .all(|(index, operation)| operation.id == index),
        "operations are indexed by their ids"
    );
    let mut violations = Vec::new();
    let attribution = attribute(history, operations, &mut violations);
    let positions = positions(operations, &attribution);
    let order = RealTimeOrder::new(operations, &positions);
    for operation in operations {
        if !operation.request.is_lease_operation() {
            check_answer(history, operation, &attribution, &order, &mut violations);
        }
    }
    order.check(operations, &positions, &attribution, &mut violations);
    check_serializable_reads(operations, &mut violations);
    violations
}

/// Which operation made each revision, and at which revision each write took effect.
struct Attribution {
    applied_at: BTreeMap<usize, u64>,
}

fn attribute(
    history: &History,
    operations: &[Operation],
    violations: &mut Vec<Violation>,
) -> Attribution {
    let claimed = claimed_revisions(operations, violations);
    let mut applied_at: BTreeMap<usize, u64> = BTreeMap::new();
    let mut unknown_deletes: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for operation in operations {
        if let (Request::Delete { key }, Outcome::Unknown { .. }) =
            (&operation.request, &operation.outcome)
        {
            unknown_deletes.entry(key).or_default().push(operation.id);
        }
    }
    for revision in history.first() + 1..=history.last() {
        let Some(id) = writer_of(
            history,
            revision,
            &claimed,
            &mut unknown_deletes,
            violations,
        ) else {
            continue;
        };
        let Some(operation) = operations.get(id) else {
            violations.push(Violation::new(
                "phantom-write",
                format!("revision {revision} holds the value of operation {id}, never issued"),
                &[],
            ));
            continue;
        };
        if let Some(earlier) = applied_at.insert(id, revision) {
            violations.push(Violation::new(
                "applied-twice",
                format!("operation {id} took effect at revisions {earlier} and {revision}"),
                &[operation],
            ));
        }
        check_effect(history, revision, operation, violations);
    }
    Attribution { applied_at }
}

/// The revisions acknowledged writes claim; two acknowledged writes at one revision is a fault.
fn claimed_revisions(
    operations: &[Operation],
    violations: &mut Vec<Violation>,
) -> BTreeMap<u64, usize> {
    let mut claimed: BTreeMap<u64, usize> = BTreeMap::new();
    for operation in operations {
        let Some(revision) = created_revision(operation) else {
            continue;
        };
        if let Some(other) = claimed.insert(revision, operation.id) {
            violations.push(Violation::new(
                "duplicate-revision",
                format!("two acknowledged writes report revision {revision}"),
                &[&operations[other], operation],
            ));
        }
    }
    claimed
}

/// The revision an acknowledged write says it created (a delete of nothing creates none).
fn created_revision(operation: &Operation) -> Option<u64> {
    match (&operation.request, &operation.outcome) {
        (request, _) if request.is_lease_operation() => None,
        (Request::Delete { .. }, Outcome::Ok { answer, revision }) => {
            matches!(answer, Answer::Deleted { deleted } if *deleted > 0).then_some(*revision)
        }
        (request, Outcome::Ok { revision, .. }) if request.is_write() => Some(*revision),
        _ => None,
    }
}

/// The operation whose effect `revision` holds.
fn writer_of(
    history: &History,
    revision: u64,
    claimed: &BTreeMap<u64, usize>,
    unknown_deletes: &mut BTreeMap<&str, Vec<usize>>,
    violations: &mut Vec<Violation>,
) -> Option<usize> {
    let changes = history.changes_at(revision);
    let mut tags: Vec<Option<usize>> = changes
        .iter()
        .filter(|change| change.kind == Kind::Put)
        .map(|change| change.kv.writer())
        .collect();
    tags.dedup();
    let phantom = |detail: String| Violation {
        kind: "phantom-write",
        detail,
        operations: Vec::new(),
    };
    match tags.as_slice() {
        [Some(id)] => Some(*id),
        [] => {
            if let Some(id) = claimed.get(&revision) {
                return Some(*id);
            }
            if only_deletes_leased_keys(changes) {
                return None;
            }
            let key = changes.first()?.key.as_str();
            let candidates = unknown_deletes.get_mut(key).filter(|ids| !ids.is_empty());
            match candidates {
                Some(ids) => Some(ids.remove(0)),
                None => {
                    violations.push(phantom(format!(
                        "revision {revision} deletes {key:?}, which no issued delete explains"
                    )));
                    None
                }
            }
        }
        _ => {
            violations.push(phantom(format!(
                "revision {revision} holds values of no single workload operation: {changes:?}"
            )));
            None
        }
    }
}

/// The changes of `revision` must be exactly what `operation` asked for, and it must be allowed to
/// have happened at all.
fn check_effect(
    history: &History,
    revision: u64,
    operation: &Operation,
    violations: &mut Vec<Violation>,
) {
    let mut fail = |kind: &'static str, detail: String| {
        violations.push(Violation::new(kind, detail, &[operation]));
    };
    if !operation.may_have_written() {
        fail(
            "failed-write-applied",
            format!(
                "revision {revision} holds operation {} although it ended as {:?}",
                operation.id, operation.outcome
            ),
        );
    }
    let changes = history.changes_at(revision);
    let found: Vec<(Kind, &str)> = changes
        .iter()
        .map(|change| (change.kind, change.key.as_str()))
        .collect();
    let expected: Vec<(Kind, &str)> = match &operation.request {
        Request::Put { key, .. } | Request::Patch { key } | Request::LeasedPut { key, .. } => {
            vec![(Kind::Put, key)]
        }
        Request::Delete { key } => vec![(Kind::Delete, key)],
        Request::Txn { keys } => {
            let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            keys.sort();
            keys.into_iter().map(|key| (Kind::Put, key)).collect()
        }
        Request::Get { .. }
        | Request::Range { .. }
        | Request::LeaseGrant { .. }
        | Request::LeaseKeepAlive { .. }
        | Request::LeaseRevoke { .. } => Vec::new(),
    };
    if found != expected {
        fail(
            "wrong-effect",
            format!("revision {revision} changed {found:?}; the request asked for {expected:?}"),
        );
    }
    if let Request::Put {
        key,
        if_mod_revision: Some(expected_revision),
    } = &operation.request
    {
        let before = history
            .value_at(key, revision - 1)
            .map_or(0, |kv| kv.mod_revision);
        if before != *expected_revision {
            fail(
                "cas-applied-on-mismatch",
                format!(
                    "a compare-and-swap on {key:?} expecting mod_revision {expected_revision} \
                     applied at {revision} over mod_revision {before}"
                ),
            );
        }
    }
}

/// Each operation's place in the revision order: where its write took effect, or the header
/// revision of its answer.
fn positions(operations: &[Operation], attribution: &Attribution) -> Vec<Option<u64>> {
    operations
        .iter()
        .map(|operation| {
            if operation.request.is_lease_operation() {
                return None;
            }
            if let Some(revision) = attribution.applied_at.get(&operation.id) {
                return Some(*revision);
            }
            match operation.outcome {
                Outcome::Ok { revision, .. } if created_revision(operation).is_none() => {
                    Some(revision)
                }
                _ => None,
            }
        })
        .collect()
}

/// The real-time order of linearizable operations, for "what must this one have seen".
struct RealTimeOrder {
    /// Linearizable operations that completed with a position, by completion time.
    completed: Vec<(std::time::Duration, u64, usize)>,
    /// The running maximum of `completed`'s positions, with the operation that set it.
    running_max: Vec<(u64, usize)>,
    /// Every position any operation holds, by invocation time (for the latest an answer could be).
    invoked: Vec<(std::time::Duration, u64)>,
    invoked_max: Vec<u64>,
}

impl RealTimeOrder {
    fn new(operations: &[Operation], positions: &[Option<u64>]) -> RealTimeOrder {
        let mut completed: Vec<_> = operations
            .iter()
            .filter(|operation| operation.request.is_linearizable())
            .filter(|operation| !matches!(operation.outcome, Outcome::Unknown { .. }))
            .filter_map(|operation| {
                Some((operation.completed, positions[operation.id]?, operation.id))
            })
            .collect();
        completed.sort();
        let mut running_max = Vec::with_capacity(completed.len());
        let mut best = (0, usize::MAX);
        for (_, position, id) in &completed {
            if *position > best.0 {
                best = (*position, *id);
            }
            running_max.push(best);
        }
        let mut invoked: Vec<_> = operations
            .iter()
            .filter_map(|operation| Some((operation.invoked, positions[operation.id]?)))
            .collect();
        invoked.sort();
        let mut highest = 0;
        let invoked_max = invoked
            .iter()
            .map(|(_, position)| {
                highest = highest.max(*position);
                highest
            })
            .collect();
        RealTimeOrder {
            completed,
            running_max,
            invoked,
            invoked_max,
        }
    }

    /// The highest position of a linearizable operation that completed before `operation` was
    /// invoked, and which operation that was.
    fn floor(&self, operation: &Operation) -> Option<(u64, usize)> {
        let count = self
            .completed
            .partition_point(|(completed, _, _)| *completed < operation.invoked);
        count.checked_sub(1).map(|index| self.running_max[index])
    }

    /// `ceiling`, raised through the revisions right above it that only delete leased keys (a
    /// lease expiry or revoke). No key-value operation holds such a revision (their timing is the
    /// lease checker's), so the operations' positions do not bound when one happened: it may
    /// precede an operation that completed before any later operation was invoked, and a read
    /// that saw it is not stale.
    fn through_lease_deletes(history: &History, mut ceiling: u64) -> u64 {
        while ceiling < history.last() && only_deletes_leased_keys(history.changes_at(ceiling + 1))
        {
            ceiling += 1;
        }
        ceiling
    }

    /// The highest revision any operation invoked before `operation` completed could have made.
    fn ceiling(&self, operation: &Operation) -> u64 {
        let count = self
            .invoked
            .partition_point(|(invoked, _)| *invoked <= operation.completed);
        count
            .checked_sub(1)
            .map_or(0, |index| self.invoked_max[index])
    }

    fn check(
        &self,
        operations: &[Operation],
        positions: &[Option<u64>],
        attribution: &Attribution,
        violations: &mut Vec<Violation>,
    ) {
        for operation in operations {
            if !operation.request.is_linearizable() {
                continue;
            }
            let (Some(position), Some((floor, setter))) =
                (positions[operation.id], self.floor(operation))
            else {
                continue;
            };
            // An operation found in the history made its revision; any other one read it.
            let wrote = attribution.applied_at.contains_key(&operation.id);
            if position < floor || (wrote && position == floor) {
                violations.push(Violation::new(
                    "real-time-order",
                    format!(
                        "operation {} is at revision {position} but was invoked after operation \
                         {setter} completed at revision {floor}",
                        operation.id
                    ),
                    &[&operations[setter], operation],
                ));
            }
        }
    }
}

/// An answer must match the history at the revision the operation is ordered at.
fn check_answer(
    history: &History,
    operation: &Operation,
    attribution: &Attribution,
    order: &RealTimeOrder,
    violations: &mut Vec<Violation>,
) {
    let mut fail = |kind: &'static str, detail: String| {
        violations.push(Violation::new(kind, detail, &[operation]));
    };
    let Outcome::Ok { revision, answer } = &operation.outcome else {
        check_answer_without_revision(history, operation, order, &mut fail);
        return;
    };
    let revision = *revision;
    if revision > history.last() || revision < history.first() {
        fail(
            "revision-out-of-history",
            format!(
                "answered at revision {revision}, outside the recorded history {}..={}",
                history.first(),
                history.last()
            ),
        );
        return;
    }
    if created_revision(operation).is_some()
        && attribution.applied_at.get(&operation.id) != Some(&revision)
    {
        fail(
            "lost-write",
            format!(
                "acknowledged at revision {revision}, but the history holds it at {:?}",
                attribution.applied_at.get(&operation.id)
            ),
        );
    }
    match (&operation.request, answer) {
        (Request::Get { key, .. }, Answer::Value(kv))
            if history.value_at(key, revision) != Some(kv) =>
        {
            fail(
                "stale-read",
                format!(
                    "read {key:?} = {kv:?} at revision {revision}; the history says {:?}",
                    history.value_at(key, revision)
                ),
            );
        }
        (Request::Range { prefix, .. }, Answer::Range(kvs))
            if &history.range_at(prefix, revision) != kvs =>
        {
            fail(
                "stale-range",
                format!(
                    "range {prefix:?} at revision {revision} returned {kvs:?}; the history says \
                     {:?}",
                    history.range_at(prefix, revision)
                ),
            );
        }
        (Request::Delete { key }, Answer::Deleted { deleted: 0 })
            if history.value_at(key, revision).is_some() =>
        {
            fail(
                "stale-delete",
                format!("deleted nothing at revision {revision}, but {key:?} existed"),
            );
        }
        (Request::Patch { key }, Answer::Patched(kv))
            if history.value_at(key, revision) != Some(kv) =>
        {
            fail(
                "wrong-patch-answer",
                format!("patch answered {kv:?} at revision {revision}"),
            );
        }
        _ => {}
    }
}

/// A 404 or a 409 carries no revision: it must match the history at some revision between what
/// the operation must have seen and what could exist when it completed.
fn check_answer_without_revision(
    history: &History,
    operation: &Operation,
    order: &RealTimeOrder,
    fail: &mut impl FnMut(&'static str, String),
) {
    let floor = if operation.request.is_linearizable() {
        order
            .floor(operation)
            .map_or(history.first(), |(floor, _)| floor)
    } else {
        history.first()
    };
    let ceiling =
        RealTimeOrder::through_lease_deletes(history, order.ceiling(operation).max(floor));
    match (&operation.request, &operation.outcome) {
        (Request::Get { key, .. }, Outcome::NotFound)
            if !history.held_between(key, None, floor, ceiling) =>
        {
            fail(
                "stale-not-found",
                format!("404 for {key:?}, which existed throughout {floor}..={ceiling}"),
            );
        }
        (
            Request::Put {
                key,
                if_mod_revision: Some(expected),
            },
            Outcome::Conflict { current },
        ) => {
            let current_revision = current.as_ref().map_or(0, |kv| kv.mod_revision);
            if current_revision == *expected {
                fail(
                    "false-conflict",
                    format!("409 on {key:?} although the current mod_revision is the expected {expected}"),
                );
            } else if !history.held_between(key, current.as_ref(), floor, ceiling) {
                fail(
                    "stale-conflict",
                    format!(
                        "409 on {key:?} reported {current:?}, which it never held in \
                         {floor}..={ceiling}"
                    ),
                );
            }
        }
        _ => {}
    }
}

/// Serializable reads through one member never go backwards.
fn check_serializable_reads(operations: &[Operation], violations: &mut Vec<Violation>) {
    let mut by_member: BTreeMap<u64, Vec<&Operation>> = BTreeMap::new();
    for operation in operations {
        let serializable_read = !operation.request.is_write()
            && !operation.request.is_linearizable()
            && !operation.request.is_lease_operation();
        if serializable_read && operation.revision().is_some() {
            by_member
                .entry(operation.member)
                .or_default()
                .push(operation);
        }
    }
    for reads in by_member.values_mut() {
        reads.sort_by_key(|operation| operation.completed);
        // The running maximum of revisions answered so far, in completion order.
        let mut highest: Vec<&Operation> = Vec::with_capacity(reads.len());
        for read in reads.iter() {
            match highest.last() {
                Some(best) if best.revision() >= read.revision() => highest.push(best),
                _ => highest.push(read),
            }
        }
        for later in reads.iter() {
            let count = reads.partition_point(|earlier| earlier.completed < later.invoked);
            let Some(earlier) = count.checked_sub(1).map(|index| highest[index]) else {
                continue;
            };
            if earlier.revision() > later.revision() {
                violations.push(Violation::new(
                    "serializable-read-went-backwards",
                    format!(
                        "member {} answered revision {:?} after it had answered {:?}",
                        later.member,
                        later.revision(),
                        earlier.revision()
                    ),
                    &[earlier, later],
                ));
            }
        }
    }
}
