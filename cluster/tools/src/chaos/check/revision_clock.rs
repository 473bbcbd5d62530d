//! When revisions happened, as far as the record shows: the harness never knows a revision's time
//! exactly, only bounds on it, and the lease checker needs both kinds.
//!
//! - A linearizable operation answered at revision `v` was linearized inside `[invoked,
//!   completed]` with the store at `v`: anything at a revision `<= v` happened before its
//!   `completed`, and the store was still at `v` (so anything above `v` had not happened) at some
//!   moment after its `invoked`.
//! - A watch event of revision `v` arrived after revision `v` happened, never before: an arrival
//!   bounds a revision from above only.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::chaos::history::Operation;

/// Bounds on when revisions happened, from linearizable operations and watch arrivals.
pub struct RevisionClock<'a> {
    operations: &'a [Operation],
    /// Linearizable key-value operations answered with a revision, by invocation time, with the
    /// lowest revision answered by any operation from there on (and which one answered it).
    by_invocation: Vec<(Duration, u64, usize)>,
    lowest_from: Vec<(u64, usize)>,
    /// Revisions seen (by an operation's completion or a watch event's arrival), in revision
    /// order, with the earliest time any revision from there on was seen (and by what).
    by_revision: Vec<(u64, Duration, Witness)>,
    earliest_from: Vec<(Duration, Witness)>,
}

/// What showed that a revision had happened by some time.
#[derive(Clone, Copy, Debug)]
pub enum Witness {
    Operation(usize),
    WatchEvent(u64),
}

impl<'a> RevisionClock<'a> {
    pub fn new(operations: &'a [Operation], first_seen: &BTreeMap<u64, Duration>) -> Self {
        let answered: Vec<&Operation> = operations
            .iter()
            .filter(|operation| {
                operation.request.is_linearizable() && !operation.request.is_lease_operation()
            })
            .filter(|operation| operation.revision().is_some())
            .collect();
        let mut by_invocation: Vec<(Duration, u64, usize)> = answered
            .iter()
            .map(|operation| {
                (
                    operation.invoked,
                    operation.revision().unwrap_or(0),
                    operation.id,
                )
            })
            .collect();
        by_invocation.sort();
        let mut lowest_from = vec![(u64::MAX, usize::MAX); by_invocation.len()];
        let mut lowest = (u64::MAX, usize::MAX);
        for (index, (_, revision, id)) in by_invocation.iter().enumerate().rev() {
            if *revision < lowest.0 {
                lowest = (*revision, *id);
            }
            lowest_from[index] = lowest;
        }
        let mut by_revision: Vec<(u64, Duration, Witness)> = answered
            .iter()
            .map(|operation| {
                let revision = operation.revision().unwrap_or(0);
                (
                    revision,
                    operation.completed,
                    Witness::Operation(operation.id),
                )
            })
            .chain(
                first_seen
                    .iter()
                    .map(|(revision, at)| (*revision, *at, Witness::WatchEvent(*revision))),
            )
            .collect();
        by_revision.sort_by_key(|(revision, at, _)| (*revision, *at));
        let mut earliest_from = vec![(Duration::MAX, Witness::WatchEvent(0)); by_revision.len()];
        let mut earliest = (Duration::MAX, Witness::WatchEvent(0));
        for (index, (_, at, witness)) in by_revision.iter().enumerate().rev() {
            if *at < earliest.0 {
                earliest = (*at, *witness);
            }
            earliest_from[index] = earliest;
        }
        RevisionClock {
            operations,
            by_invocation,
            lowest_from,
            by_revision,
            earliest_from,
        }
    }

    /// Of the linearizable operations invoked after `time`, the one answered at the lowest
    /// revision: the store was at that revision at some moment after `time`.
    pub fn lowest_revision_after(&self, time: Duration) -> Option<(u64, &'a Operation)> {
        let index = self
            .by_invocation
            .partition_point(|(invoked, _, _)| *invoked <= time);
        let (revision, id) = *self.lowest_from.get(index)?;
        Some((revision, &self.operations[id]))
    }

    /// The earliest time revision `revision` is known to have happened by, and what showed it.
    pub fn happened_by(&self, revision: u64) -> Option<(Duration, Witness)> {
        let index = self
            .by_revision
            .partition_point(|(seen, _, _)| *seen < revision);
        self.earliest_from.get(index).copied()
    }
}
