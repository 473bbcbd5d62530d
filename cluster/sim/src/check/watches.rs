//! Watches against the store's history: each watch must deliver, from its start revision on,
//! every change under its prefix, once each, in revision order, with no gap; and a bookmark at
//! revision R promises that every change up to R was already delivered, so it may neither come
//! before those changes, nor be followed by one of them, nor name a revision the store never
//! reached. A watch may end early (its member stopped); what it delivered until then must still
//! be a gapless start of what it owed.
//!
//! One exception, etcd's too: compaction to revision C drops a delete at C along with everything
//! older (only a put at C survives), so a watch that starts at exactly a compact revision is not
//! owed the deletes at that revision, unless it opened before the compaction applied.

use std::collections::BTreeSet;

use super::linearizability::Histories;
use super::{Violation, Violations};
use crate::history::{WatchReceived, WatchRecord};

/// One change a watch owes: revision, key, new value (`None`: deleted).
type Owed = (u64, String, Option<String>);

/// Checks every watch; `compact_revisions` are the revisions the run asked to compact to.
pub fn check(
    watches: &[WatchRecord],
    histories: &Histories,
    final_revision: u64,
    compact_revisions: &BTreeSet<u64>,
) -> Vec<Violation> {
    let mut violations = Violations::default();
    for (number, watch) in watches.iter().enumerate() {
        // Whether the deletes at the start revision were compacted away depends on whether the
        // compaction applied before the watch opened: either is right, so the watch's own
        // messages say which it is.
        let starts_at_compaction = compact_revisions.contains(&watch.start_revision)
            && !delivered_a_delete_at_its_start(watch);
        let owed = owed_changes(watch, histories, starts_at_compaction);
        check_one(number, watch, &owed, final_revision, &mut violations);
    }
    violations.into_vec()
}

fn delivered_a_delete_at_its_start(watch: &WatchRecord) -> bool {
    watch.messages.iter().any(|message| {
        matches!(message, WatchReceived::Event { revision, value: None, .. }
            if *revision == watch.start_revision)
    })
}

/// The changes under the watch's prefix from its start revision on, in revision order (without
/// the deletes at the start revision when it is a compact revision).
fn owed_changes(
    watch: &WatchRecord,
    histories: &Histories,
    starts_at_compaction: bool,
) -> Vec<Owed> {
    let mut owed: Vec<Owed> = histories
        .iter()
        .filter(|(key, _)| key.starts_with(&watch.prefix))
        .flat_map(|(key, versions)| {
            versions
                .iter()
                .filter(|version| version.revision >= watch.start_revision)
                .filter(move |version| {
                    let compacted_delete = version.value.is_none()
                        && version.revision == watch.start_revision
                        && starts_at_compaction;
                    !compacted_delete
                })
                .map(move |version| (version.revision, key.clone(), version.value.clone()))
        })
        .collect();
    owed.sort();
    owed
}

fn check_one(
    number: usize,
    watch: &WatchRecord,
    owed: &[Owed],
    final_revision: u64,
    violations: &mut Violations,
) {
    let name = format!(
        "watch {number} (member {}, prefix {:?}, from {})",
        watch.member, watch.prefix, watch.start_revision
    );
    // How many owed changes were delivered so far, and the highest revision a bookmark promised.
    let mut delivered = 0;
    let mut promised = 0;
    for message in &watch.messages {
        match message {
            WatchReceived::Event {
                revision,
                key,
                value,
            } => {
                let received = (*revision, key.clone(), value.clone());
                if *revision <= promised {
                    violations.add(
                        "event behind a bookmark",
                        format!("{name}: revision {revision} after a bookmark at {promised}"),
                    );
                }
                match owed.get(delivered) {
                    Some(next) if *next == received => delivered += 1,
                    Some(next) if next.0 < *revision => {
                        violations.add(
                            "watch skipped a change",
                            format!("{name}: got {received:?} before {next:?}"),
                        );
                        return;
                    }
                    next => {
                        violations.add(
                            "watch delivered what it did not owe",
                            format!("{name}: got {received:?}, owed {next:?} next"),
                        );
                        return;
                    }
                }
            }
            WatchReceived::Bookmark { revision } => {
                if *revision > final_revision {
                    violations.add(
                        "bookmark ahead of the store",
                        format!("{name}: bookmark {revision}, the store ended at {final_revision}"),
                    );
                }
                if let Some(next) = owed.get(delivered).filter(|next| next.0 <= *revision) {
                    violations.add(
                        "bookmark ahead of its events",
                        format!("{name}: bookmark {revision} before {next:?}"),
                    );
                }
                promised = promised.max(*revision);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Version;

    fn histories() -> Histories {
        let version = |revision, value: Option<&str>| Version {
            revision,
            value: value.map(str::to_owned),
        };
        Histories::from([
            (
                "w/a".to_owned(),
                vec![version(2, Some("1")), version(4, None)],
            ),
            ("w/b".to_owned(), vec![version(3, Some("2"))]),
            ("other".to_owned(), vec![version(5, Some("3"))]),
        ])
    }

    fn event(revision: u64, key: &str, value: Option<&str>) -> WatchReceived {
        WatchReceived::Event {
            revision,
            key: key.into(),
            value: value.map(str::to_owned),
        }
    }

    fn watch(start_revision: u64, messages: Vec<WatchReceived>) -> WatchRecord {
        WatchRecord {
            member: 1,
            prefix: "w/".into(),
            start_revision,
            messages,
        }
    }

    fn kinds(watch: WatchRecord) -> Vec<&'static str> {
        kinds_with_compactions(watch, &[])
    }

    fn kinds_with_compactions(watch: WatchRecord, compactions: &[u64]) -> Vec<&'static str> {
        let compactions = compactions.iter().copied().collect();
        check(&[watch], &histories(), 5, &compactions)
            .iter()
            .map(|violation| violation.kind)
            .collect()
    }

    #[test]
    fn a_watch_from_a_compact_revision_is_not_owed_that_revisions_delete_but_the_rest() {
        let from_compaction = watch(4, vec![WatchReceived::Bookmark { revision: 5 }]);
        assert_eq!(
            kinds_with_compactions(from_compaction.clone(), &[4]),
            Vec::<&str>::new()
        );
        assert_eq!(kinds(from_compaction), vec!["bookmark ahead of its events"]);
        let opened_before_the_compaction = watch(4, vec![event(4, "w/a", None)]);
        assert_eq!(
            kinds_with_compactions(opened_before_the_compaction, &[4]),
            Vec::<&str>::new()
        );
        let missing_the_put = watch(3, vec![WatchReceived::Bookmark { revision: 5 }]);
        assert_eq!(
            kinds_with_compactions(missing_the_put, &[3]),
            vec!["bookmark ahead of its events"]
        );
    }

    #[test]
    fn a_complete_ordered_watch_with_honest_bookmarks_passes() {
        let messages = vec![
            event(2, "w/a", Some("1")),
            WatchReceived::Bookmark { revision: 2 },
            event(3, "w/b", Some("2")),
            event(4, "w/a", None),
            WatchReceived::Bookmark { revision: 5 },
        ];
        assert_eq!(kinds(watch(1, messages)), Vec::<&str>::new());
        // A watch that ended early, or started later, owes only its part.
        assert_eq!(
            kinds(watch(3, vec![event(3, "w/b", Some("2"))])),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn a_skipped_revision_is_caught() {
        let messages = vec![event(2, "w/a", Some("1")), event(4, "w/a", None)];
        assert_eq!(kinds(watch(1, messages)), vec!["watch skipped a change"]);
    }

    #[test]
    fn a_duplicated_or_reordered_event_is_caught() {
        let duplicated = vec![event(2, "w/a", Some("1")), event(2, "w/a", Some("1"))];
        assert_eq!(
            kinds(watch(1, duplicated)),
            vec!["watch delivered what it did not owe"]
        );
        let reordered = vec![event(3, "w/b", Some("2")), event(2, "w/a", Some("1"))];
        assert_eq!(kinds(watch(1, reordered)), vec!["watch skipped a change"]);
    }

    #[test]
    fn a_bookmark_ahead_of_its_events_or_the_store_is_caught() {
        let early = vec![
            event(2, "w/a", Some("1")),
            WatchReceived::Bookmark { revision: 3 },
        ];
        assert_eq!(kinds(watch(1, early)), vec!["bookmark ahead of its events"]);
        let future = vec![
            event(2, "w/a", Some("1")),
            event(3, "w/b", Some("2")),
            event(4, "w/a", None),
            WatchReceived::Bookmark { revision: 9 },
        ];
        assert_eq!(kinds(watch(1, future)), vec!["bookmark ahead of the store"]);
    }

    #[test]
    fn a_wrong_value_is_caught() {
        assert_eq!(
            kinds(watch(1, vec![event(2, "w/a", Some("x"))])),
            vec!["watch delivered what it did not owe"]
        );
    }
}
