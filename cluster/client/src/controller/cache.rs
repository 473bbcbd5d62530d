//! The informer's local copy of a prefix: every key-value by key, user-defined indexes over them
//! (client-go's `cache.Indexer`), a stated bound on memory, and the change events (added, updated,
//! deleted, with the old and new value) that applying a watch event or a fresh list produces.
//!
//! The bound is counted, not measured: each object costs its key, its value, a fixed
//! [`OBJECT_OVERHEAD_BYTES`] for the map's node and the revisions, and its index entries. An
//! insert that would pass [`CacheLimits`] is refused with [`ClientError::LimitExceeded`] and
//! changes nothing, so a prefix that outgrows its informer is a clear error rather than a process
//! that grows until the kernel ends it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::super::error::ClientError;
use super::super::types::KeyValue;

/// What one cached object costs beyond its key and value: the map's node, the three revisions,
/// the lease and the two `String` headers (measured with a counting allocator at about 90 bytes on
/// x86-64; rounded up so the bound errs on the safe side).
pub const OBJECT_OVERHEAD_BYTES: usize = 128;

/// What one index entry costs beyond its index value and key.
pub const INDEX_ENTRY_OVERHEAD_BYTES: usize = 64;

/// The most indexes one cache keeps.
pub const MOST_INDEXES: usize = 16;

/// The bounds of one cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// The most objects held.
    pub max_objects: usize,
    /// The most bytes held, counted as the module comment says.
    pub max_bytes: usize,
}

impl Default for CacheLimits {
    /// A million objects or 1 GiB, whichever comes first.
    fn default() -> Self {
        CacheLimits {
            max_objects: 1_000_000,
            max_bytes: 1 << 30,
        }
    }
}

/// A function from an object to the index values it is filed under (client-go's `IndexFunc`).
pub type IndexFunction = Arc<dyn Fn(&KeyValue) -> Vec<String> + Send + Sync>;

/// One change to the cache, as an informer's event handler receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InformerEvent {
    Added(KeyValue),
    Updated {
        old: KeyValue,
        new: KeyValue,
    },
    /// The last value the cache held; a relist that no longer finds the key reports it too
    /// (client-go's `DeletedFinalStateUnknown`: the delete itself was not seen).
    Deleted(KeyValue),
}

impl InformerEvent {
    /// The key the event is about.
    pub fn key(&self) -> &str {
        match self {
            InformerEvent::Added(kv) | InformerEvent::Deleted(kv) => &kv.key,
            InformerEvent::Updated { new, .. } => &new.key,
        }
    }

    /// The value after the event; None for a delete.
    pub fn new_value(&self) -> Option<&KeyValue> {
        match self {
            InformerEvent::Added(kv) | InformerEvent::Updated { new: kv, .. } => Some(kv),
            InformerEvent::Deleted(_) => None,
        }
    }
}

/// One named index: index value → the keys filed under it.
struct Index {
    name: String,
    function: IndexFunction,
    keys_by_value: BTreeMap<String, BTreeSet<String>>,
}

/// The objects of one prefix, their indexes and their counted size.
pub struct ObjectCache {
    objects: BTreeMap<String, KeyValue>,
    indexes: Vec<Index>,
    limits: CacheLimits,
    counted_bytes: usize,
}

impl ObjectCache {
    pub fn new(limits: CacheLimits) -> ObjectCache {
        ObjectCache {
            objects: BTreeMap::new(),
            indexes: Vec::new(),
            limits,
            counted_bytes: 0,
        }
    }

    /// Adds an index; objects already held are filed under it.
    pub fn add_index(
        &mut self,
        name: impl Into<String>,
        function: IndexFunction,
    ) -> Result<(), ClientError> {
        let name = name.into();
        if self.indexes.len() >= MOST_INDEXES || self.indexes.iter().any(|i| i.name == name) {
            return Err(ClientError::Invalid {
                message: format!("index {name:?} exists or the cache has {MOST_INDEXES} indexes"),
            });
        }
        let mut index = Index {
            name,
            function,
            keys_by_value: BTreeMap::new(),
        };
        for object in self.objects.values() {
            self.counted_bytes += file_under(&mut index, object);
        }
        self.indexes.push(index);
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&KeyValue> {
        self.objects.get(key)
    }

    pub fn objects(&self) -> &BTreeMap<String, KeyValue> {
        &self.objects
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The bytes counted against [`CacheLimits::max_bytes`].
    pub fn counted_bytes(&self) -> usize {
        self.counted_bytes
    }

    /// The keys filed under `value` in the index `name` (empty if either is unknown).
    pub fn keys_by_index(&self, name: &str, value: &str) -> Vec<String> {
        self.indexes
            .iter()
            .find(|index| index.name == name)
            .and_then(|index| index.keys_by_value.get(value))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stores `object` (a put seen by the watch); answers the event, or None when the cache
    /// already holds this very revision of it. Refuses, changing nothing, past the limits.
    pub fn put(&mut self, object: KeyValue) -> Result<Option<InformerEvent>, ClientError> {
        let old = self.objects.get(&object.key);
        if old.is_some_and(|old| old.mod_revision == object.mod_revision) {
            return Ok(None);
        }
        let old_cost = old.map_or(0, |old| self.cost_of(old));
        let new_cost = self.cost_of(&object);
        let objects_after = self.objects.len() + usize::from(old.is_none());
        let bytes_after = self.counted_bytes - old_cost + new_cost;
        if objects_after > self.limits.max_objects || bytes_after > self.limits.max_bytes {
            return Err(ClientError::LimitExceeded {
                message: format!(
                    "the informer's cache would hold {objects_after} objects and {bytes_after} \
                     bytes, over its limits of {} objects and {} bytes",
                    self.limits.max_objects, self.limits.max_bytes
                ),
            });
        }
        let old = self.remove_entry(&object.key);
        self.insert_entry(object.clone());
        debug_assert_eq!(self.counted_bytes, bytes_after);
        Ok(Some(match old {
            Some(old) => InformerEvent::Updated { old, new: object },
            None => InformerEvent::Added(object),
        }))
    }

    /// Removes `key` (a delete seen by the watch); answers the event, or None if it was absent.
    pub fn delete(&mut self, key: &str) -> Option<InformerEvent> {
        self.remove_entry(key).map(InformerEvent::Deleted)
    }

    /// Replaces the whole content with a fresh list, answering the events that turn the old
    /// content into the new (client-go's `Replace`). Refuses, changing nothing, past the limits.
    pub fn replace(
        &mut self,
        listed: BTreeMap<String, KeyValue>,
    ) -> Result<Vec<InformerEvent>, ClientError> {
        let listed_bytes: usize = listed.values().map(|object| self.cost_of(object)).sum();
        if listed.len() > self.limits.max_objects || listed_bytes > self.limits.max_bytes {
            return Err(ClientError::LimitExceeded {
                message: format!(
                    "the list holds {} objects and {listed_bytes} bytes, over the informer's \
                     limits of {} objects and {} bytes",
                    listed.len(),
                    self.limits.max_objects,
                    self.limits.max_bytes
                ),
            });
        }
        let gone: Vec<String> = (self.objects.keys())
            .filter(|key| !listed.contains_key(*key))
            .cloned()
            .collect();
        let mut events: Vec<InformerEvent> = gone.iter().filter_map(|k| self.delete(k)).collect();
        for object in listed.into_values() {
            events.extend(self.put(object)?);
        }
        debug_assert_eq!(self.counted_bytes, listed_bytes);
        Ok(events)
    }

    /// What `object` costs with its index entries, as [`ObjectCache::counted_bytes`] counts it.
    fn cost_of(&self, object: &KeyValue) -> usize {
        let index_cost: usize = (self.indexes.iter())
            .flat_map(|index| {
                (index.function)(object)
                    .into_iter()
                    .collect::<BTreeSet<_>>()
            })
            .map(|value| value.len() + object.key.len() + INDEX_ENTRY_OVERHEAD_BYTES)
            .sum();
        object.key.len() + object.value.len() + OBJECT_OVERHEAD_BYTES + index_cost
    }

    fn insert_entry(&mut self, object: KeyValue) {
        self.counted_bytes += object.key.len() + object.value.len() + OBJECT_OVERHEAD_BYTES;
        for index in &mut self.indexes {
            self.counted_bytes += file_under(index, &object);
        }
        self.objects.insert(object.key.clone(), object);
    }

    fn remove_entry(&mut self, key: &str) -> Option<KeyValue> {
        let object = self.objects.remove(key)?;
        self.counted_bytes -= object.key.len() + object.value.len() + OBJECT_OVERHEAD_BYTES;
        for index in &mut self.indexes {
            for value in (index.function)(&object) {
                let Some(keys) = index.keys_by_value.get_mut(&value) else {
                    continue;
                };
                if keys.remove(key) {
                    self.counted_bytes -= value.len() + key.len() + INDEX_ENTRY_OVERHEAD_BYTES;
                }
                if keys.is_empty() {
                    index.keys_by_value.remove(&value);
                }
            }
        }
        Some(object)
    }
}

/// Files `object` under each of its values in `index`; answers the bytes that added.
fn file_under(index: &mut Index, object: &KeyValue) -> usize {
    let mut added = 0;
    for value in (index.function)(object) {
        let cost = value.len() + object.key.len() + INDEX_ENTRY_OVERHEAD_BYTES;
        if (index.keys_by_value.entry(value).or_default()).insert(object.key.clone()) {
            added += cost;
        }
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &str, value: &str, mod_revision: u64) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: value.to_string(),
            create_revision: 1,
            mod_revision,
            version: 1,
            lease: 0,
        }
    }

    fn owner_index() -> IndexFunction {
        Arc::new(|object: &KeyValue| {
            (object.value.strip_prefix("owner="))
                .map(|owner| vec![owner.to_string()])
                .unwrap_or_default()
        })
    }

    #[test]
    fn puts_and_deletes_answer_added_updated_and_deleted_with_the_old_value() {
        let mut cache = ObjectCache::new(CacheLimits::default());
        let added = cache.put(object("a", "1", 2)).unwrap();
        assert_eq!(added, Some(InformerEvent::Added(object("a", "1", 2))));
        assert_eq!(
            cache.put(object("a", "1", 2)).unwrap(),
            None,
            "the same revision again"
        );
        let updated = cache.put(object("a", "2", 3)).unwrap();
        let expected = InformerEvent::Updated {
            old: object("a", "1", 2),
            new: object("a", "2", 3),
        };
        assert_eq!(updated, Some(expected));
        assert_eq!(
            cache.delete("a"),
            Some(InformerEvent::Deleted(object("a", "2", 3)))
        );
        assert_eq!(cache.delete("a"), None);
        assert_eq!(
            cache.counted_bytes(),
            0,
            "nothing is counted for an empty cache"
        );
    }

    #[test]
    fn an_index_follows_puts_updates_and_deletes() {
        let mut cache = ObjectCache::new(CacheLimits::default());
        cache.put(object("a", "owner=x", 2)).unwrap();
        cache.add_index("owner", owner_index()).unwrap();
        cache.put(object("b", "owner=x", 3)).unwrap();
        assert_eq!(cache.keys_by_index("owner", "x"), ["a", "b"]);
        cache.put(object("a", "owner=y", 4)).unwrap();
        assert_eq!(cache.keys_by_index("owner", "x"), ["b"]);
        assert_eq!(cache.keys_by_index("owner", "y"), ["a"]);
        cache.delete("b");
        assert!(cache.keys_by_index("owner", "x").is_empty());
        assert!(
            cache.add_index("owner", owner_index()).is_err(),
            "one name, one index"
        );
        cache.delete("a");
        assert_eq!(
            cache.counted_bytes(),
            0,
            "index entries are uncounted when removed"
        );
    }

    #[test]
    fn a_replace_answers_the_difference_between_the_old_and_the_listed_content() {
        let mut cache = ObjectCache::new(CacheLimits::default());
        cache.put(object("kept", "1", 2)).unwrap();
        cache.put(object("changed", "1", 3)).unwrap();
        cache.put(object("gone", "1", 4)).unwrap();
        let listed: BTreeMap<String, KeyValue> = [
            object("kept", "1", 2),
            object("changed", "2", 6),
            object("new", "1", 7),
        ]
        .into_iter()
        .map(|object| (object.key.clone(), object))
        .collect();
        let events = cache.replace(listed).unwrap();
        assert_eq!(
            events,
            [
                InformerEvent::Deleted(object("gone", "1", 4)),
                InformerEvent::Updated {
                    old: object("changed", "1", 3),
                    new: object("changed", "2", 6)
                },
                InformerEvent::Added(object("new", "1", 7)),
            ]
        );
    }

    #[test]
    fn the_limits_refuse_an_insert_and_change_nothing() {
        let limits = CacheLimits {
            max_objects: 2,
            max_bytes: 1 << 20,
        };
        let mut cache = ObjectCache::new(limits);
        cache.put(object("a", "1", 2)).unwrap();
        cache.put(object("b", "1", 3)).unwrap();
        let refused = cache.put(object("c", "1", 4));
        assert!(matches!(refused, Err(ClientError::LimitExceeded { .. })));
        assert_eq!(cache.len(), 2);
        assert!(
            cache.put(object("a", "2", 5)).is_ok(),
            "an update adds no object"
        );

        let small = CacheLimits {
            max_objects: 10,
            max_bytes: OBJECT_OVERHEAD_BYTES + 10,
        };
        let mut cache = ObjectCache::new(small);
        cache.put(object("a", "12345678", 2)).unwrap();
        let before = cache.counted_bytes();
        assert!(
            cache.put(object("a", "1234567890", 3)).is_err(),
            "one byte too many"
        );
        assert_eq!(cache.get("a").unwrap().value, "12345678");
        assert_eq!(cache.counted_bytes(), before);
    }
}
