//! Turning history into stream messages: one revision's events as a watcher's filter sees them,
//! and history split into revisions. Shared by the broadcast, the catch-up and the hand-over.

use std::sync::Arc;

use revkv_storage::Event;

use super::filter::EventFilter;
use super::message::{Delivery, RevisionEvents};

/// One revision's events as `filter` sees them, or `None` when none match.
pub(super) fn revision_events_for(
    filter: &EventFilter,
    prev_kv: bool,
    revision: u64,
    events: &Arc<Vec<Event>>,
) -> Option<RevisionEvents> {
    let selected = filter.select(events);
    if selected.as_ref().is_some_and(Vec::is_empty) {
        return None;
    }
    Some(RevisionEvents::new(
        revision,
        events.clone(),
        selected,
        prev_kv,
    ))
}

/// History (in revision order) as one delivery for a watcher, or `None` when nothing matches.
pub(super) fn history_for(
    filter: &EventFilter,
    prev_kv: bool,
    events: Vec<Event>,
) -> Option<Delivery> {
    let revisions: Vec<RevisionEvents> = group_by_revision(events)
        .into_iter()
        .filter_map(|(revision, events)| revision_events_for(filter, prev_kv, revision, &events))
        .collect();
    (!revisions.is_empty()).then_some(Delivery::History(revisions))
}

/// Splits history (in revision order) into one shared list of events per revision. Every event
/// of a revision carries that revision as its `mod_revision`, deletes included.
pub(super) fn group_by_revision(events: Vec<Event>) -> Vec<(u64, Arc<Vec<Event>>)> {
    let mut groups: Vec<(u64, Vec<Event>)> = Vec::new();
    for event in events {
        let revision = event.kv.mod_revision;
        match groups.last_mut() {
            Some((last, group)) if *last == revision => group.push(event),
            Some((last, _)) => {
                assert!(*last < revision, "history comes in revision order");
                groups.push((revision, vec![event]));
            }
            None => groups.push((revision, vec![event])),
        }
    }
    groups
        .into_iter()
        .map(|(revision, events)| (revision, Arc::new(events)))
        .collect()
}
