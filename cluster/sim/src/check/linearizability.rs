//! Linearizability of single-key operations, checked through revisions.
//!
//! A general checker (Wing and Gong's search, as porcupine does it) looks for an order of the
//! operations that a sequential register would accept; that search is exponential in the
//! operations that overlap. revkv gives every change a store-wide revision and every answer the
//! revision it reflects, and the store's own history (read back after the run) records what
//! each revision changed. So the order is not searched for: it is read off. Changes take the
//! order of their revisions, and an answer that observed the store (a read, a failed
//! compare-and-swap, a delete of an absent key) comes right after the revision it names. The
//! history is linearizable exactly when that order
//! - agrees with real time: an operation answered before another was invoked comes first;
//! - gives every observation what the history held at its revision;
//! - and gives every compare-and-swap the outcome its compare had at that point;
//!
//! and the history itself holds every acknowledged change at its revision, nothing nobody
//! wrote, and nothing twice. Changes whose outcome the client never learned (a timeout) are
//! placed where the history shows them, or nowhere if it does not. A delete whose outcome is
//! unknown cannot be told apart from another delete of the same key, so its tombstone is only
//! checked to exist for some delete of that key.

use std::collections::{BTreeMap, BTreeSet};

use super::{Violation, Violations};
use crate::history::{Observed, Operation, Outcome, Record, Version};

/// A key's history after the run, oldest first, by key.
pub type Histories = BTreeMap<String, Vec<Version>>;

/// Checks the client records against the store's history. `final_revision` is the store's
/// revision when the history was read.
pub fn check(records: &[Record], histories: &Histories, final_revision: u64) -> Vec<Violation> {
    let mut violations = Violations::default();
    let changes = changes_by_revision(histories, &mut violations);
    let positions = place_operations(records, &changes, &mut violations);
    check_real_time_order(records, &positions, &mut violations);
    for (record, position) in records.iter().zip(&positions) {
        if position.is_some() || is_serializable_read(record) {
            check_observation(record, histories, final_revision, &mut violations);
        }
    }
    check_serializable_reads_never_go_back(records, &mut violations);
    check_every_change_was_asked_for(records, &changes, &mut violations);
    violations.into_vec()
}

/// One revision's change: the key and its new value (`None`: deleted).
type Change = (String, Option<String>);

/// Every change of the history by revision; two changes at one revision (single-key operations
/// never make that) and a value written twice are violations.
fn changes_by_revision(
    histories: &Histories,
    violations: &mut Violations,
) -> BTreeMap<u64, Change> {
    let mut changes: BTreeMap<u64, Change> = BTreeMap::new();
    let mut values_seen = BTreeSet::new();
    for (key, versions) in histories {
        for version in versions {
            if let Some(value) = &version.value {
                if !values_seen.insert(value.clone()) {
                    violations.add(
                        "duplicated write",
                        format!("{value:?} is in the history twice"),
                    );
                }
            }
            let change = (key.clone(), version.value.clone());
            if let Some(other) = changes.insert(version.revision, change) {
                violations.add(
                    "shared revision",
                    format!(
                        "revision {} changed {key:?} and {:?}",
                        version.revision, other.0
                    ),
                );
            }
        }
    }
    changes
}

/// Where each operation falls in the order (twice a change's revision; twice an observed
/// revision plus one), or `None` for an operation that has no place: a read or delete that
/// got no answer, or a change the history does not show. Checks that every acknowledged change
/// is in the history where its answer said.
fn place_operations(
    records: &[Record],
    changes: &BTreeMap<u64, Change>,
    violations: &mut Violations,
) -> Vec<Option<u64>> {
    let revision_of_value: BTreeMap<&str, u64> = changes
        .iter()
        .filter_map(|(revision, (_, value))| value.as_deref().map(|value| (value, *revision)))
        .collect();
    records
        .iter()
        .map(|record| {
            let found = record
                .operation
                .written_value()
                .and_then(|value| revision_of_value.get(value).copied());
            match (&record.outcome, found) {
                (Outcome::Changed { revision }, _) => {
                    check_acknowledged_change(record, *revision, changes, violations);
                    Some(2 * revision)
                }
                // A serializable read may be stale: it has no place in the real-time order, only
                // its member's own order (`check_serializable_reads_never_go_back`).
                (Outcome::Observed { .. }, _) if is_serializable_read(record) => None,
                (Outcome::Observed { revision, .. }, found) => {
                    if found.is_some() {
                        violations.add("failed write took effect", describe(record));
                    }
                    Some(2 * revision + 1)
                }
                (Outcome::Unknown, Some(revision)) => Some(2 * revision),
                (Outcome::Unknown, None) => None,
            }
        })
        .collect()
}

/// An acknowledged change must be in the history at its revision, as asked.
fn check_acknowledged_change(
    record: &Record,
    revision: u64,
    changes: &BTreeMap<u64, Change>,
    violations: &mut Violations,
) {
    let expected = (
        record.operation.key().to_owned(),
        record.operation.written_value().map(str::to_owned),
    );
    match changes.get(&revision) {
        Some(change) if *change == expected => {}
        Some(change) => violations.add(
            "lost write",
            format!(
                "{}; revision {revision} holds {change:?} instead",
                describe(record)
            ),
        ),
        None => violations.add(
            "lost write",
            format!(
                "{}; revision {revision} is not in the history",
                describe(record)
            ),
        ),
    }
}

/// An operation answered before another was invoked must come first.
fn check_real_time_order(
    records: &[Record],
    positions: &[Option<u64>],
    violations: &mut Violations,
) {
    let mut by_invocation: Vec<usize> = (0..records.len())
        .filter(|&i| positions[i].is_some())
        .collect();
    by_invocation.sort_by_key(|&i| records[i].invoked_at);
    let mut by_answer: Vec<usize> = by_invocation
        .iter()
        .copied()
        // A change whose outcome is unknown may take effect after its error was answered, so
        // only its invocation bounds it.
        .filter(|&i| records[i].answered_at.is_some() && records[i].outcome != Outcome::Unknown)
        .collect();
    by_answer.sort_by_key(|&i| records[i].answered_at);
    let mut answered = by_answer.into_iter().peekable();
    // The latest place among operations answered so far, and which operation holds it.
    let mut latest: Option<(u64, usize)> = None;
    for index in by_invocation {
        let invoked_at = records[index].invoked_at;
        while let Some(&earlier) = answered.peek() {
            if records[earlier].answered_at >= Some(invoked_at) {
                break;
            }
            let place = positions[earlier].unwrap_or(0);
            if latest.is_none_or(|(latest_place, _)| place > latest_place) {
                latest = Some((place, earlier));
            }
            answered.next();
        }
        let place = positions[index].unwrap_or(0);
        if let Some((latest_place, earlier)) = latest {
            if latest_place > place {
                violations.add(
                    "real-time order",
                    format!(
                        "{} was answered before {} was invoked, but comes after it",
                        describe(&records[earlier]),
                        describe(&records[index])
                    ),
                );
            }
        }
    }
}

fn is_serializable_read(record: &Record) -> bool {
    matches!(record.operation, Operation::SerializableGet { .. })
        && matches!(record.outcome, Outcome::Observed { .. })
}

/// A member never answers a serializable read from an older revision than one it answered
/// before the read was sent (etcd's promise for serializable reads from one member).
fn check_serializable_reads_never_go_back(records: &[Record], violations: &mut Violations) {
    let mut by_member: BTreeMap<u64, Vec<&Record>> = BTreeMap::new();
    for record in records.iter().filter(|record| is_serializable_read(record)) {
        by_member.entry(record.member).or_default().push(record);
    }
    for reads in by_member.values_mut() {
        // One sweep, as for the real-time order: reads by invocation, with the highest revision
        // among the reads answered before each one was sent.
        let mut by_answer = reads.clone();
        by_answer.sort_by_key(|read| read.answered_at);
        reads.sort_by_key(|read| read.invoked_at);
        let mut answered = by_answer.into_iter().peekable();
        let mut highest: Option<&Record> = None;
        for later in reads.iter() {
            while let Some(earlier) =
                answered.next_if(|earlier| earlier.answered_at < Some(later.invoked_at))
            {
                if highest
                    .is_none_or(|highest| observed_revision(earlier) > observed_revision(highest))
                {
                    highest = Some(earlier);
                }
            }
            if let Some(earlier) =
                highest.filter(|earlier| observed_revision(earlier) > observed_revision(later))
            {
                violations.add(
                    "serializable read went back",
                    format!("{} then {}", describe(earlier), describe(later)),
                );
            }
        }
    }
}

fn observed_revision(record: &Record) -> u64 {
    match record.outcome {
        Outcome::Observed { revision, .. } | Outcome::Changed { revision } => revision,
        Outcome::Unknown => 0,
    }
}

/// What `key` held right after `revision`, by the history.
fn state_at(histories: &Histories, key: &str, revision: u64) -> Option<Observed> {
    let versions = histories.get(key)?;
    let latest = versions
        .iter()
        .take_while(|version| version.revision <= revision)
        .last()?;
    latest.value.as_ref().map(|value| Observed {
        value: value.clone(),
        mod_revision: latest.revision,
    })
}

/// An observation must match the history at its revision, and a compare-and-swap's outcome
/// must match its compare there.
fn check_observation(
    record: &Record,
    histories: &Histories,
    final_revision: u64,
    violations: &mut Violations,
) {
    let key = record.operation.key();
    match &record.outcome {
        Outcome::Observed { revision, value } => {
            if *revision > final_revision {
                violations.add(
                    "answer from the future",
                    format!("{}; the store ended at {final_revision}", describe(record)),
                );
            }
            let expected = state_at(histories, key, *revision);
            if *value != expected {
                violations.add(
                    "stale or wrong read",
                    format!("{}; the history held {expected:?} there", describe(record)),
                );
            }
            if let Operation::CompareAndSwap {
                expected_mod_revision,
                ..
            } = &record.operation
            {
                let actual = expected.map_or(0, |observed| observed.mod_revision);
                if actual == *expected_mod_revision {
                    violations.add("compare-and-swap failed though it held", describe(record));
                }
            }
        }
        Outcome::Changed { revision } => {
            if let Operation::CompareAndSwap {
                expected_mod_revision,
                ..
            } = &record.operation
            {
                let before = state_at(histories, key, revision - 1);
                let actual = before.map_or(0, |observed| observed.mod_revision);
                if actual != *expected_mod_revision {
                    violations.add(
                        "compare-and-swap succeeded though it did not hold",
                        format!("{}; the mod revision was {actual}", describe(record)),
                    );
                }
            }
        }
        Outcome::Unknown => {}
    }
}

/// Every value in the history was written by some client, and every tombstone by some delete
/// of that key.
fn check_every_change_was_asked_for(
    records: &[Record],
    changes: &BTreeMap<u64, Change>,
    violations: &mut Violations,
) {
    let written: BTreeSet<&str> = records
        .iter()
        .filter_map(|record| record.operation.written_value())
        .collect();
    let deleted: BTreeSet<&str> = records
        .iter()
        .filter(|record| matches!(record.operation, Operation::Delete { .. }))
        .map(|record| record.operation.key())
        .collect();
    for (revision, (key, value)) in changes {
        let asked = match value {
            Some(value) => written.contains(value.as_str()),
            None => deleted.contains(key.as_str()),
        };
        if !asked {
            violations.add(
                "phantom change",
                format!("revision {revision} set {key:?} to {value:?}, which no client asked for"),
            );
        }
    }
}

/// One line naming an operation and its outcome, for a violation's detail.
fn describe(record: &Record) -> String {
    let answered = record
        .answered_at
        .map_or("never".to_owned(), |at| format!("{:.6}s", at.as_secs_f64()));
    format!(
        "client {} at m{} {:?} -> {:?} (invoked {:.6}s, answered {answered})",
        record.client,
        record.member,
        record.operation,
        record.outcome,
        record.invoked_at.as_secs_f64()
    )
}

#[cfg(test)]
mod tests;
