//! Which events a watch wants: a key, prefix or range, optionally without puts or without deletes.

use revkv_storage::{Event, EventKind, KeyRange};

/// The events one watch selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFilter {
    pub range: KeyRange,
    /// `filter=noput`: leave out PUT events.
    pub no_put: bool,
    /// `filter=nodelete`: leave out DELETE events.
    pub no_delete: bool,
}

impl EventFilter {
    /// Every event on the keys of `range`.
    pub fn of(range: KeyRange) -> Self {
        EventFilter {
            range,
            no_put: false,
            no_delete: false,
        }
    }

    /// True when the watch wants this event.
    pub fn matches(&self, event: &Event) -> bool {
        let kind_wanted = match event.kind {
            EventKind::Put => !self.no_put,
            EventKind::Delete => !self.no_delete,
        };
        kind_wanted && self.range.contains(&event.kv.key)
    }

    /// The positions of the events this watch wants, `None` when it wants every one of them (the
    /// common case of a prefix watch, which then shares the revision's events without a copy), or
    /// an empty list when it wants none.
    pub fn select(&self, events: &[Event]) -> Option<Vec<u32>> {
        let wanted: Vec<u32> = (0..events.len())
            .filter(|&position| self.matches(&events[position]))
            .map(|position| u32::try_from(position).expect("a revision holds < 2^32 events"))
            .collect();
        if wanted.len() == events.len() && !events.is_empty() {
            None
        } else {
            Some(wanted)
        }
    }
}

#[cfg(test)]
mod tests {
    use revkv_storage::KeyValue;

    use super::*;

    fn event(kind: EventKind, key: &str) -> Event {
        Event {
            kind,
            kv: KeyValue {
                key: key.as_bytes().to_vec(),
                value: Vec::new(),
                create_revision: 2,
                mod_revision: 2,
                version: 1,
                lease: 0,
            },
            prev_kv: None,
        }
    }

    #[test]
    fn a_single_key_watch_sees_only_that_key() {
        let filter = EventFilter::of(KeyRange::single("a"));
        assert!(filter.matches(&event(EventKind::Put, "a")));
        assert!(!filter.matches(&event(EventKind::Put, "ab")));
        assert!(!filter.matches(&event(EventKind::Delete, "b")));
    }

    #[test]
    fn a_prefix_watch_sees_keys_under_the_prefix_only() {
        let filter = EventFilter::of(KeyRange::prefix("app/"));
        assert!(filter.matches(&event(EventKind::Put, "app/x")));
        assert!(filter.matches(&event(EventKind::Delete, "app/")));
        assert!(!filter.matches(&event(EventKind::Put, "app")));
        assert!(!filter.matches(&event(EventKind::Put, "apq/x")));
    }

    #[test]
    fn a_range_watch_excludes_its_end() {
        let filter = EventFilter::of(KeyRange::between("b", "d"));
        assert!(filter.matches(&event(EventKind::Put, "b")));
        assert!(filter.matches(&event(EventKind::Put, "cz")));
        assert!(!filter.matches(&event(EventKind::Put, "d")));
        assert!(!filter.matches(&event(EventKind::Put, "a")));
    }

    #[test]
    fn kind_filters_drop_puts_or_deletes() {
        let no_put = EventFilter {
            no_put: true,
            ..EventFilter::of(KeyRange::prefix(""))
        };
        assert!(!no_put.matches(&event(EventKind::Put, "a")));
        assert!(no_put.matches(&event(EventKind::Delete, "a")));
        let no_delete = EventFilter {
            no_delete: true,
            ..EventFilter::of(KeyRange::prefix(""))
        };
        assert!(no_delete.matches(&event(EventKind::Put, "a")));
        assert!(!no_delete.matches(&event(EventKind::Delete, "a")));
    }

    #[test]
    fn selection_is_none_for_all_and_positions_in_order_otherwise() {
        let events = vec![
            event(EventKind::Put, "app/1"),
            event(EventKind::Put, "other"),
            event(EventKind::Delete, "app/2"),
        ];
        let prefix = EventFilter::of(KeyRange::prefix("app/"));
        assert_eq!(prefix.select(&events), Some(vec![0, 2]));
        let everything = EventFilter::of(KeyRange::prefix(""));
        assert_eq!(everything.select(&events), None);
        let nothing = EventFilter::of(KeyRange::single("zzz"));
        assert_eq!(nothing.select(&events), Some(vec![]));
    }
}
