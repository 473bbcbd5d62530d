//! The store's history as the checkers know it: the changes of every revision, and every key's
//! value at any revision, built either from full states read at each revision (historical range
//! reads) or from the changes a recording watch received.
//!
//! Built from changes, the history checks itself as it goes: every revision has changes, a put's
//! `mod_revision` is its revision, versions count up by one from a create, and `prev_kv` is the
//! value before. A recording that breaks one of those rules is reported, not trusted.

use std::collections::BTreeMap;

pub use crate::chaos::history::Kv;

/// Every key's state at one revision.
pub type State = BTreeMap<String, Kv>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Put,
    Delete,
}

/// One event, as expected from the history or as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: Kind,
    pub key: String,
    /// For a put, the key-value after it; for a delete, only `mod_revision` is set.
    pub kv: Kv,
    pub prev_kv: Option<Kv>,
}

impl Change {
    /// A delete event as the API sends it: only the revision is meaningful.
    pub fn deleted_kv(revision: u64) -> Kv {
        Kv {
            value: String::new(),
            create_revision: 0,
            mod_revision: revision,
            version: 0,
        }
    }
}

/// The store's changes at revisions `first + 1 ..= last`, and the state at `first`.
#[derive(Clone, Debug)]
pub struct History {
    first: u64,
    last: u64,
    /// The changes of revision `first + 1 + i`, sorted by key.
    changes: Vec<Vec<Change>>,
    /// For every key, its value from each revision that changed it on (`None`: absent), in
    /// revision order; the state at `first` is the first entry.
    versions: BTreeMap<String, Vec<(u64, Option<Kv>)>>,
}

impl History {
    /// The history whose state at revision `first + i` is `states[i]`.
    pub fn from_states(first: u64, states: Vec<State>) -> History {
        assert!(
            !states.is_empty(),
            "a history needs at least its first state"
        );
        let mut history = History::empty(first, &states[0]);
        for (offset, pair) in states.windows(2).enumerate() {
            let revision = first + 1 + offset as u64;
            let changes = changes_between(&pair[0], &pair[1], revision);
            history.push(revision, changes);
        }
        history
    }

    /// The history that starts from `base` at `first` and then has, for each revision after it
    /// through `last`, the changes a recording watch (with `prev_kv`) received. `Err` names the
    /// first revision whose recorded changes break the rules of the data model.
    pub fn from_changes(
        first: u64,
        base: &State,
        recorded: &BTreeMap<u64, Vec<Change>>,
        last: u64,
    ) -> Result<History, String> {
        let mut history = History::empty(first, base);
        for revision in first + 1..=last {
            let mut changes = recorded
                .get(&revision)
                .cloned()
                .ok_or_else(|| format!("recording: revision {revision} has no changes"))?;
            changes.sort_by(|a, b| a.key.cmp(&b.key));
            for change in &changes {
                history.check_recorded(revision, change)?;
            }
            history.push(revision, changes);
        }
        Ok(history)
    }

    fn empty(first: u64, base: &State) -> History {
        let versions = base
            .iter()
            .map(|(key, kv)| (key.clone(), vec![(first, Some(kv.clone()))]))
            .collect();
        History {
            first,
            last: first,
            changes: Vec::new(),
            versions,
        }
    }

    fn push(&mut self, revision: u64, changes: Vec<Change>) {
        assert_eq!(revision, self.last + 1, "revisions are pushed in order");
        for change in &changes {
            let after = match change.kind {
                Kind::Put => Some(change.kv.clone()),
                Kind::Delete => None,
            };
            let versions = self.versions.entry(change.key.clone()).or_default();
            versions.push((revision, after));
        }
        self.changes.push(changes);
        self.last = revision;
    }

    /// The data-model rules one recorded change must follow, given the history before it.
    fn check_recorded(&self, revision: u64, change: &Change) -> Result<(), String> {
        let before = self.value_at(&change.key, revision - 1);
        let context = || format!("recording: revision {revision}, key {:?}", change.key);
        if change.prev_kv.as_ref() != before {
            return Err(format!(
                "{}: prev_kv {:?} but the key was {before:?}",
                context(),
                change.prev_kv
            ));
        }
        match change.kind {
            Kind::Delete if before.is_none() => {
                Err(format!("{}: a delete of an absent key", context()))
            }
            Kind::Delete => Ok(()),
            Kind::Put => {
                let kv = &change.kv;
                let (create, version) = match before {
                    Some(previous) => (previous.create_revision, previous.version + 1),
                    None => (revision, 1),
                };
                if kv.mod_revision != revision
                    || kv.create_revision != create
                    || kv.version != version
                {
                    return Err(format!(
                        "{}: put {kv:?}, expected create {create}, mod {revision}, version \
                         {version}",
                        context()
                    ));
                }
                Ok(())
            }
        }
    }

    /// The revision whose state the history starts from.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last revision the history knows.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The changes of `revision`, sorted by key (empty outside `first + 1 ..= last`).
    pub fn changes_at(&self, revision: u64) -> &[Change] {
        if revision <= self.first || revision > self.last {
            return &[];
        }
        &self.changes[(revision - self.first - 1) as usize]
    }

    /// The value of `key` at `revision` (which must lie in `first ..= last`).
    pub fn value_at(&self, key: &str, revision: u64) -> Option<&Kv> {
        debug_assert!(revision >= self.first && revision <= self.last);
        let versions = self.versions.get(key)?;
        let index = versions.partition_point(|(changed, _)| *changed <= revision);
        if index == 0 {
            return None;
        }
        versions[index - 1].1.as_ref()
    }

    /// Every key under `prefix` with its value at `revision`, in key order.
    pub fn range_at(&self, prefix: &str, revision: u64) -> Vec<(String, Kv)> {
        self.versions
            .range(prefix.to_string()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .filter_map(|(key, _)| {
                let kv = self.value_at(key, revision)?;
                Some((key.clone(), kv.clone()))
            })
            .collect()
    }

    /// Every key under `prefix` with its versions: from each revision that changed it on, its
    /// value (`None`: absent), in revision order.
    pub fn versions_under<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a [(u64, Option<Kv>)])> + 'a {
        self.versions
            .range(prefix.to_string()..)
            .take_while(move |(key, _)| key.starts_with(prefix))
            .map(|(key, versions)| (key.as_str(), versions.as_slice()))
    }

    /// The revisions, within `from ..= to`, at which `key` held exactly `expected`.
    pub fn held_between(&self, key: &str, expected: Option<&Kv>, from: u64, to: u64) -> bool {
        let from = from.max(self.first);
        let to = to.min(self.last);
        if from > to {
            return false;
        }
        if self.value_at(key, from) == expected {
            return true;
        }
        let Some(versions) = self.versions.get(key) else {
            return false;
        };
        versions.iter().any(|(revision, value)| {
            *revision > from && *revision <= to && value.as_ref() == expected
        })
    }
}

/// The changes that turn `before` into `after` at `revision`, by key.
fn changes_between(before: &State, after: &State, revision: u64) -> Vec<Change> {
    let mut changes = Vec::new();
    for (key, kv) in after {
        if kv.mod_revision == revision {
            changes.push(Change {
                kind: Kind::Put,
                key: key.clone(),
                kv: kv.clone(),
                prev_kv: before.get(key).cloned(),
            });
        }
    }
    for (key, kv) in before {
        if !after.contains_key(key) {
            changes.push(Change {
                kind: Kind::Delete,
                key: key.clone(),
                kv: Change::deleted_kv(revision),
                prev_kv: Some(kv.clone()),
            });
        }
    }
    changes.sort_by(|a, b| a.key.cmp(&b.key));
    changes
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn kv(value: &str, create: u64, modified: u64, version: u64) -> Kv {
        Kv {
            value: value.into(),
            create_revision: create,
            mod_revision: modified,
            version,
        }
    }

    fn put(key: &str, kv: Kv, prev_kv: Option<Kv>) -> Change {
        Change {
            kind: Kind::Put,
            key: key.into(),
            kv,
            prev_kv,
        }
    }

    #[test]
    fn a_recording_rebuilds_the_same_history_as_the_states() {
        let mut states = vec![State::new()];
        let mut state = State::new();
        state.insert("a".into(), kv("x", 2, 2, 1));
        states.push(state.clone());
        state.insert("a".into(), kv("y", 2, 3, 2));
        state.insert("b".into(), kv("z", 3, 3, 1));
        states.push(state.clone());
        state.remove("a");
        states.push(state);
        let from_states = History::from_states(1, states);
        let recorded: BTreeMap<u64, Vec<Change>> = (2..=4)
            .map(|revision| (revision, from_states.changes_at(revision).to_vec()))
            .collect();
        let from_changes = History::from_changes(1, &State::new(), &recorded, 4).unwrap();
        for revision in 1..=4 {
            assert_eq!(
                from_states.range_at("", revision),
                from_changes.range_at("", revision)
            );
        }
        assert_eq!(from_changes.value_at("a", 3), Some(&kv("y", 2, 3, 2)));
        assert_eq!(from_changes.value_at("a", 4), None);
        assert!(from_changes.held_between("a", Some(&kv("x", 2, 2, 1)), 1, 2));
        assert!(!from_changes.held_between("a", Some(&kv("x", 2, 2, 1)), 3, 4));
        assert!(from_changes.held_between("a", None, 3, 4));
    }

    #[test]
    fn a_recording_that_breaks_the_data_model_is_refused() {
        let gap: BTreeMap<u64, Vec<Change>> =
            BTreeMap::from([(2, vec![put("a", kv("x", 2, 2, 1), None)])]);
        let error = History::from_changes(1, &State::new(), &gap, 3).unwrap_err();
        assert!(error.contains("revision 3 has no changes"), "{error}");

        let wrong_version: BTreeMap<u64, Vec<Change>> = BTreeMap::from([
            (2, vec![put("a", kv("x", 2, 2, 1), None)]),
            (3, vec![put("a", kv("y", 2, 3, 3), Some(kv("x", 2, 2, 1)))]),
        ]);
        let error = History::from_changes(1, &State::new(), &wrong_version, 3).unwrap_err();
        assert!(error.contains("version"), "{error}");

        let wrong_prev: BTreeMap<u64, Vec<Change>> = BTreeMap::from([
            (2, vec![put("a", kv("x", 2, 2, 1), None)]),
            (3, vec![put("a", kv("y", 2, 3, 2), Some(kv("w", 2, 2, 1)))]),
        ]);
        let error = History::from_changes(1, &State::new(), &wrong_prev, 3).unwrap_err();
        assert!(error.contains("prev_kv"), "{error}");
    }
}
