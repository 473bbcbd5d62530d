//! The key index, in memory: for every key, each of its versions still in `history` (an
//! `IndexEntry`: revision, position and metadata), oldest first. It is etcd's `treeIndex`: a put costs one append to the
//! revision-ordered `history` table plus an insert here, instead of a second random B-tree leaf in
//! the state file (layout 3 kept this index as the `key_index` table; docs/design/key-index.md).
//!
//! The index is a function of `history`: it is built from it when the store opens and after a
//! failed write, and every writer changes both together.
//!
//! Concurrency. One writer at a time (redb serialises write transactions) changes the index
//! directly while its transaction runs, before it commits; readers read it beside a redb read
//! transaction opened at some revision R. That is safe because of what each change can do to a
//! reader at R:
//! - an insert has a revision above every committed one, so above R: readers skip entries above
//!   the revision they read at;
//! - a removal (compaction) only removes a version superseded at or before the index's compact
//!   revision, or a tombstone at or before it, and the compact revision is raised before the first
//!   removal. A reader at R at or above it sees the same newest version of every key either way,
//!   because compaction removes a key's older version before the newer tombstone that follows it
//!   (`compact.rs` walks in revision order). A reader below it gets `Compacted`
//!   (`IndexHandle::guarded`), which is what a read below the compact revision answers anyway.
//! - a failed write transaction leaves the index ahead of the file, so it is rebuilt from the file
//!   before the failure is reported (`MvccStore::rebuild_key_index`).
//!
//! Readers hold the lock only for one lookup, or one chunk of `CHUNK_KEYS` keys of a walk, so a
//! long range read never holds up the writer for more than a chunk.

use std::collections::{btree_map, BTreeMap};
use std::ops::Bound;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use std::path::Path;

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, ReadError, StorageFailure};
use crate::types::KeyValue;

/// One entry of the key index: where a version of a key lives in the history table, and the
/// version's metadata (zero for a tombstone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub revision: u64,
    pub position: u32,
    pub tombstone: bool,
    pub create_revision: u64,
    pub version: u64,
    pub lease: i64,
    /// The size of the version's history record as stored, so the index can tell how many bytes
    /// of records the state file holds (`StoreStats::bytes_in_use`).
    pub record_bytes: u32,
}

impl IndexEntry {
    /// The index entry describing `record`, stored at (revision, position) in `record_bytes`.
    pub fn for_record(
        record: &VersionRecord,
        (revision, position): (u64, u32),
        record_bytes: usize,
    ) -> Self {
        IndexEntry {
            revision,
            position,
            tombstone: record.tombstone,
            create_revision: record.create_revision,
            version: record.version,
            lease: record.lease,
            // Records are bounded far below 4 GiB (`codec::MAX_RECORD_BYTES`).
            record_bytes: u32::try_from(record_bytes).unwrap_or(u32::MAX),
        }
    }

    /// The key-value this entry describes, without its value (keys-only reads and compares).
    pub fn kv_without_value(&self, key: &[u8]) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: Vec::new(),
            create_revision: self.create_revision,
            mod_revision: self.revision,
            version: self.version,
            lease: self.lease,
        }
    }
}

/// How many keys a walk collects under one hold of the read lock.
const CHUNK_KEYS: usize = 256;

/// How many keys a count visits under one hold of the read lock. Counting copies nothing, so a
/// chunk is longer than a collecting walk's and still a few tens of microseconds.
const COUNT_CHUNK_KEYS: usize = 4_096;

/// The versions of one key, oldest first. Most keys have one version (the rest are compacted), so
/// that case is kept inline, without a second allocation.
#[derive(Clone, Debug)]
enum Versions {
    One(IndexEntry),
    Many(Vec<IndexEntry>),
}

impl Versions {
    fn as_slice(&self) -> &[IndexEntry] {
        match self {
            Versions::One(entry) => std::slice::from_ref(entry),
            Versions::Many(entries) => entries,
        }
    }

    /// The newest version at or below `revision`.
    fn at(&self, revision: u64) -> Option<IndexEntry> {
        let entries = self.as_slice();
        let visible = entries.partition_point(|entry| entry.revision <= revision);
        visible.checked_sub(1).map(|last| entries[last])
    }

    fn push(&mut self, entry: IndexEntry) {
        match self {
            Versions::One(first) => *self = Versions::Many(vec![*first, entry]),
            Versions::Many(entries) => entries.push(entry),
        }
    }

    /// Removes the version at `revision`; answers whether the key has versions left.
    fn remove(&mut self, revision: u64) -> bool {
        match self {
            Versions::One(entry) => entry.revision != revision,
            Versions::Many(entries) => {
                entries.retain(|entry| entry.revision != revision);
                if let [only] = entries.as_slice() {
                    let only = *only;
                    *self = Versions::One(only);
                    return true;
                }
                !entries.is_empty()
            }
        }
    }
}

/// The index itself. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    keys: BTreeMap<Box<[u8]>, Versions>,
    /// The compact revision of the state the index describes; raised before any removal.
    compact_revision: u64,
    /// How many versions the index holds, all keys together.
    entries: u64,
    /// The stored size of their history records, all together.
    record_bytes: u64,
    /// The bytes of every key the index names, all together (for [`KeyIndex::estimated_bytes`]).
    key_bytes: u64,
    /// How many changes (inserts, removals, compact revisions) were made since it was built, so a
    /// failed write can tell whether it changed anything.
    changes: u64,
}

/// A walk's chunk: the visible entries of live keys, in key order, and where to go on from.
pub(crate) struct LiveChunk {
    pub keys: Vec<(Vec<u8>, IndexEntry)>,
    pub resume_at: Option<Vec<u8>>,
}

impl KeyIndex {
    /// An empty index of a state compacted at `compact_revision`.
    pub fn new(compact_revision: u64) -> Self {
        KeyIndex {
            compact_revision,
            ..KeyIndex::default()
        }
    }

    /// The index of every version in `history`, of a state compacted at `compact_revision`: one
    /// walk in revision order, so each key's versions arrive oldest first.
    pub fn build(
        history: &impl redb::ReadableTable<(u64, u32), &'static [u8]>,
        file: &Path,
        compact_revision: u64,
    ) -> Result<Self, StorageFailure> {
        let mut index = KeyIndex::new(compact_revision);
        for stored in history.iter().map_err(db_error(file))? {
            let (stored_key, bytes) = stored.map_err(db_error(file))?;
            let (revision, position) = stored_key.value();
            let record: VersionRecord = codec::decode(bytes.value()).map_err(corrupt(file))?;
            let entry = IndexEntry::for_record(&record, (revision, position), bytes.value().len());
            index.insert(&record.key, entry)?;
        }
        Ok(index)
    }

    pub fn compact_revision(&self) -> u64 {
        self.compact_revision
    }

    pub fn change_count(&self) -> u64 {
        self.changes
    }

    /// How many keys (live or not) and versions the index holds.
    pub fn sizes(&self) -> (usize, u64) {
        (self.keys.len(), self.entries)
    }

    /// The stored size of every history record the index describes: the bytes of records the
    /// state file holds, without its B-tree's own pages.
    pub fn record_bytes(&self) -> u64 {
        self.record_bytes
    }

    /// About how much memory the index takes: each key's map slot (its boxed key and its versions,
    /// the first inline), the key bytes themselves, and the further versions of keys with more than
    /// one. The map's B-tree nodes are not full, so the true figure is somewhat higher; this is
    /// what `revkv_memory_bytes{part="key_index"}` reports.
    pub fn estimated_bytes(&self) -> u64 {
        let keys = self.keys.len() as u64;
        let slot_bytes =
            (std::mem::size_of::<Box<[u8]>>() + std::mem::size_of::<Versions>()) as u64;
        let further_versions = self.entries.saturating_sub(keys);
        keys * slot_bytes
            + self.key_bytes
            + further_versions * std::mem::size_of::<IndexEntry>() as u64
    }

    /// Adds the version `entry` of `key`, which must be newer than every version of it indexed.
    ///
    /// One walk down the map, by `entry`: the boxed key it takes is dropped again when the key is
    /// already indexed, which costs less than the second walk a lookup-then-insert takes for a new
    /// key (the put workloads' profile had the index's key comparisons among a follower's largest
    /// costs).
    pub fn insert(&mut self, key: &[u8], entry: IndexEntry) -> Result<(), StorageFailure> {
        match self.keys.entry(key.into()) {
            btree_map::Entry::Vacant(vacant) => {
                vacant.insert(Versions::One(entry));
                self.key_bytes += key.len() as u64;
            }
            btree_map::Entry::Occupied(mut occupied) => {
                let versions = occupied.get_mut();
                let newest = versions.as_slice().last().map_or(0, |last| last.revision);
                if entry.revision <= newest {
                    return Err(StorageFailure::Invariant(format!(
                        "a version at revision {} indexed after one at {newest}: versions of a key \
                         are written in revision order",
                        entry.revision
                    )));
                }
                versions.push(entry);
            }
        }
        self.entries += 1;
        self.record_bytes += u64::from(entry.record_bytes);
        self.changes += 1;
        Ok(())
    }

    /// Removes the version of `key` at `revision`, if it is indexed (compaction may name a version
    /// twice: a tombstone is removed as such and as the previous version of the next put).
    pub fn remove(&mut self, key: &[u8], revision: u64) {
        self.changes += 1;
        let Some(versions) = self.keys.get_mut(key) else {
            return;
        };
        let Some(removed) = versions
            .at(revision)
            .filter(|entry| entry.revision == revision)
        else {
            return;
        };
        self.entries -= 1;
        self.record_bytes -= u64::from(removed.record_bytes);
        if !versions.remove(revision) {
            self.keys.remove(key);
            self.key_bytes -= key.len() as u64;
        }
    }

    /// Raises the compact revision; it never goes back.
    pub fn raise_compact_revision(&mut self, revision: u64) {
        self.changes += 1;
        self.compact_revision = self.compact_revision.max(revision);
    }

    /// The newest version of `key` at or below `revision` (a tombstone included).
    pub fn entry_at(&self, key: &[u8], revision: u64) -> Option<IndexEntry> {
        self.keys
            .get(key)
            .and_then(|versions| versions.at(revision))
    }

    /// True when `key` has a version at exactly `revision`.
    pub fn contains(&self, key: &[u8], revision: u64) -> bool {
        self.entry_at(key, revision)
            .is_some_and(|entry| entry.revision == revision)
    }

    /// The versions of `key` with revision in `[from, through]`, oldest first, at most `limit`.
    pub fn versions_between(
        &self,
        key: &[u8],
        (from, through): (u64, u64),
        limit: usize,
    ) -> Vec<IndexEntry> {
        let Some(versions) = self.keys.get(key) else {
            return Vec::new();
        };
        let entries = versions.as_slice();
        let first = entries.partition_point(|entry| entry.revision < from);
        entries[first..]
            .iter()
            .take_while(|entry| entry.revision <= through)
            .take(limit)
            .copied()
            .collect()
    }

    /// Up to `CHUNK_KEYS` keys of `[from, end)` that are live at `revision`, each with its newest
    /// version at or below it, and the key to go on from when the range holds more.
    pub fn live_chunk(&self, from: &[u8], end: Option<&[u8]>, revision: u64) -> LiveChunk {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut keys = Vec::new();
        for (key, versions) in self.keys.range::<[u8], _>((Bound::Included(from), upper)) {
            if keys.len() == CHUNK_KEYS {
                return LiveChunk {
                    keys,
                    resume_at: Some(key.to_vec()),
                };
            }
            if let Some(entry) = versions.at(revision).filter(|entry| !entry.tombstone) {
                keys.push((key.to_vec(), entry));
            }
        }
        LiveChunk {
            keys,
            resume_at: None,
        }
    }
}

/// One chunk of a count: how many keys of the chunk were live, and where to go on from.
pub(crate) struct CountChunk {
    pub live_keys: u64,
    pub resume_at: Option<Vec<u8>>,
}

impl KeyIndex {
    /// How many of the first `COUNT_CHUNK_KEYS` keys of `[from, end)` are live at `revision`, and
    /// the key to go on from when the range holds more. Nothing is copied but that one key, so a
    /// count over a large range (etcd's `count` of a limited range, what `txn-mixed` and every
    /// Kubernetes list page ask for) costs a walk of the index and no allocation per key.
    pub fn count_live_chunk(&self, from: &[u8], end: Option<&[u8]>, revision: u64) -> CountChunk {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut live_keys = 0;
        let range = self.keys.range::<[u8], _>((Bound::Included(from), upper));
        for (visited, (key, versions)) in range.enumerate() {
            if visited == COUNT_CHUNK_KEYS {
                return CountChunk {
                    live_keys,
                    resume_at: Some(key.to_vec()),
                };
            }
            if versions.at(revision).is_some_and(|entry| !entry.tombstone) {
                live_keys += 1;
            }
        }
        CountChunk {
            live_keys,
            resume_at: None,
        }
    }
}

/// The index shared by the store's writer and readers.
#[derive(Debug, Default)]
pub(crate) struct SharedKeyIndex {
    index: RwLock<KeyIndex>,
}

impl SharedKeyIndex {
    pub fn new(index: KeyIndex) -> Self {
        SharedKeyIndex {
            index: RwLock::new(index),
        }
    }

    pub fn read(&self) -> RwLockReadGuard<'_, KeyIndex> {
        // A panic while the lock was held can only have come from the writer, whose failure is
        // followed by a rebuild; the map itself is never left half-changed by one call.
        self.index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, KeyIndex> {
        self.index
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn into_inner(self) -> KeyIndex {
        self.index
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Swaps in a whole new index (after an import or a rebuild).
    pub fn replace(&self, index: KeyIndex) {
        *self.write() = index;
    }
}

/// How a transaction's tables reach the index: a writer sees everything, including its own
/// uncommitted versions; a reader is refused once compaction passed the revision it reads at.
#[derive(Clone, Copy)]
pub(crate) struct IndexHandle<'s> {
    shared: &'s SharedKeyIndex,
    guarded: bool,
}

impl<'s> IndexHandle<'s> {
    pub fn writer(shared: &'s SharedKeyIndex) -> Self {
        IndexHandle {
            shared,
            guarded: false,
        }
    }

    pub fn reader(shared: &'s SharedKeyIndex) -> Self {
        IndexHandle {
            shared,
            guarded: true,
        }
    }

    /// The index, for reading at `revision`: `Compacted` for a reader when the index has been
    /// compacted past it since the reader's transaction began.
    pub fn read_at(&self, revision: u64) -> Result<RwLockReadGuard<'s, KeyIndex>, ReadError> {
        let index = self.shared.read();
        if self.guarded && index.compact_revision > revision {
            return Err(ReadError::Compacted {
                requested: revision,
                compact_revision: index.compact_revision,
            });
        }
        Ok(index)
    }

    /// The index, for a change (writers only).
    pub fn write(&self) -> Result<RwLockWriteGuard<'s, KeyIndex>, StorageFailure> {
        if self.guarded {
            return Err(StorageFailure::Invariant(
                "a read transaction tried to change the key index".into(),
            ));
        }
        Ok(self.shared.write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(revision: u64, tombstone: bool) -> IndexEntry {
        IndexEntry {
            revision,
            position: 0,
            tombstone,
            create_revision: if tombstone { 0 } else { 2 },
            version: if tombstone { 0 } else { revision },
            lease: 0,
            record_bytes: 100,
        }
    }

    #[test]
    fn a_key_answers_its_newest_version_at_each_revision() {
        let mut index = KeyIndex::new(0);
        index.insert(b"a", version(2, false)).unwrap();
        index.insert(b"a", version(4, false)).unwrap();
        index.insert(b"a", version(6, true)).unwrap();
        assert_eq!(index.entry_at(b"a", 1), None);
        assert_eq!(index.entry_at(b"a", 3).unwrap().revision, 2);
        assert_eq!(index.entry_at(b"a", 5).unwrap().revision, 4);
        assert!(index.entry_at(b"a", 9).unwrap().tombstone);
        assert_eq!(index.sizes(), (1, 3));
        let between = index.versions_between(b"a", (3, 6), 10);
        let revisions: Vec<u64> = between.iter().map(|entry| entry.revision).collect();
        assert_eq!(revisions, vec![4, 6]);
    }

    #[test]
    fn a_version_older_than_the_newest_is_refused() {
        let mut index = KeyIndex::new(0);
        index.insert(b"a", version(4, false)).unwrap();
        let error = index.insert(b"a", version(4, false)).unwrap_err();
        assert!(matches!(error, StorageFailure::Invariant(_)), "{error}");
        assert_eq!(index.sizes(), (1, 1), "the refused version was not added");
    }

    #[test]
    fn removing_every_version_forgets_the_key_and_a_second_removal_is_harmless() {
        let mut index = KeyIndex::new(0);
        index.insert(b"a", version(2, false)).unwrap();
        index.insert(b"a", version(3, true)).unwrap();
        index.remove(b"a", 2);
        assert_eq!(index.sizes(), (1, 1));
        assert_eq!(index.record_bytes(), 100);
        index.remove(b"a", 3);
        index.remove(b"a", 3);
        assert_eq!(index.sizes(), (0, 0));
        assert_eq!(
            index.record_bytes(),
            0,
            "a second removal takes nothing more off"
        );
        assert_eq!(index.entry_at(b"a", 9), None);
    }

    #[test]
    fn the_estimated_size_follows_keys_and_versions_in_and_out() {
        let mut index = KeyIndex::new(0);
        assert_eq!(index.estimated_bytes(), 0);
        index.insert(b"short", version(2, false)).unwrap();
        let one_key = index.estimated_bytes();
        assert!(one_key > b"short".len() as u64 + 48, "{one_key}");
        index.insert(b"a-longer-key", version(3, false)).unwrap();
        let two_keys = index.estimated_bytes();
        assert_eq!(
            two_keys - one_key,
            one_key - b"short".len() as u64 + b"a-longer-key".len() as u64,
            "each key adds one slot and its own bytes"
        );
        index.insert(b"short", version(4, false)).unwrap();
        assert!(
            index.estimated_bytes() > two_keys,
            "a second version costs memory"
        );
        index.remove(b"short", 2);
        assert_eq!(index.estimated_bytes(), two_keys);
        index.remove(b"short", 4);
        index.remove(b"a-longer-key", 3);
        assert_eq!(
            index.estimated_bytes(),
            0,
            "an empty index is estimated empty"
        );
    }

    #[test]
    fn a_walk_returns_live_keys_in_chunks_and_skips_deleted_ones() {
        let mut index = KeyIndex::new(0);
        let total = CHUNK_KEYS * 2 + 7;
        for number in 0..total {
            let key = format!("k{number:05}");
            index.insert(key.as_bytes(), version(2, false)).unwrap();
            if number % 3 == 0 {
                index.insert(key.as_bytes(), version(5, true)).unwrap();
            }
        }
        let mut from = Vec::new();
        let mut seen = Vec::new();
        loop {
            let chunk = index.live_chunk(&from, Some(b"k99999"), 9);
            assert!(chunk.keys.len() <= CHUNK_KEYS);
            seen.extend(chunk.keys.into_iter().map(|(key, _)| key));
            match chunk.resume_at {
                Some(next) => from = next,
                None => break,
            }
        }
        let expected: Vec<Vec<u8>> = (0..total)
            .filter(|number| number % 3 != 0)
            .map(|number| format!("k{number:05}").into_bytes())
            .collect();
        assert_eq!(seen, expected);
        let at_four = index.live_chunk(b"", None, 4);
        assert_eq!(at_four.keys.len(), CHUNK_KEYS, "every key was live at 4");
    }

    #[test]
    fn a_reader_below_the_compact_revision_is_refused_and_a_writer_is_not() {
        let shared = SharedKeyIndex::new(KeyIndex::new(0));
        shared.write().raise_compact_revision(10);
        let reader = IndexHandle::reader(&shared);
        assert!(matches!(
            reader.read_at(9).err(),
            Some(ReadError::Compacted {
                requested: 9,
                compact_revision: 10
            })
        ));
        assert!(reader.read_at(10).is_ok());
        assert!(IndexHandle::writer(&shared).read_at(3).is_ok());
        assert!(reader.write().is_err(), "a reader cannot change the index");
        shared.write().raise_compact_revision(4);
        assert_eq!(shared.read().compact_revision(), 10, "it never goes back");
    }
}
