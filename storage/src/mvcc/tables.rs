//! The state file's tables and a typed view over them, shared by the read and write paths.
//!
//! Layout 2 (see docs/ARCHITECTURE.md for the full story), shaped like etcd's backend:
//! - `history`: (revision, position) -> `VersionRecord`, every version and tombstone not yet
//!   compacted, in revision order. It is the only place a value is written, and a put appends at
//!   its right edge (watches, reads, snapshots and hashes all read values from here).
//! - `key_index`: (key, revision) -> (position, tombstone, create revision, version, lease), every
//!   history entry of a key in revision order. A key's newest entry answers current reads, so a put
//!   touches one key-ordered leaf (its previous entry and its new one sit side by side) instead of
//!   two, and compares, keys-only reads and counts never read a value.
//! - `leases` (layout 3): lease id -> `LeaseRecord` (granted TTL, attached-key count). Leases are
//!   not revisioned, as in etcd: the table holds the leases granted now.
//! - `lease_keys` (layout 3): (lease id, key) -> (), the keys attached to each lease now, so a
//!   revoke finds its keys without a scan. A key is attached to the lease of its current version.
//! - `meta`: the file marker, the layout version and the `StoreState` record.
//!
//! Layout 1 (before issue 11) kept a third table, `live`, with a second copy of every current
//! value; `migrate.rs` turns such a file into layout 2 when it is opened.

use std::ops::Bound;
use std::path::Path;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, Error, Result};
use crate::types::{AppliedState, KeyValue};

pub(crate) const HISTORY: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("history");
pub(crate) const KEY_INDEX: TableDefinition<(&[u8], u64), IndexValue> =
    TableDefinition::new("key_index");

pub(crate) const LEASES: TableDefinition<i64, &[u8]> = TableDefinition::new("leases");
pub(crate) const LEASE_KEYS: TableDefinition<(i64, &[u8]), ()> = TableDefinition::new("lease_keys");

/// A key-index value: (position in its revision, tombstone, create revision, version, lease).
pub(crate) type IndexValue = (u32, bool, u64, u64, i64);

/// The key of the `StoreState` record in the meta table.
pub(crate) const STATE_KEY: &str = "store_state";

/// The counters that move with every applied batch, stored as one record in one transaction with
/// the changes they describe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoreState {
    pub current_revision: u64,
    pub compact_revision: u64,
    pub applied: AppliedState,
    /// How many keys are live at the current revision (kept here because counting them would
    /// mean walking the whole key index).
    pub live_keys: u64,
}

impl StoreState {
    /// An empty store is at revision 1, as an empty etcd cluster is.
    pub fn empty() -> Self {
        StoreState {
            current_revision: 1,
            compact_revision: 0,
            applied: AppliedState::default(),
            live_keys: 0,
        }
    }
}

/// Read-only access to the history table, by either a read or a write transaction.
pub(crate) trait HistoryTable: ReadableTable<(u64, u32), &'static [u8]> {}
impl<T: ReadableTable<(u64, u32), &'static [u8]>> HistoryTable for T {}

/// Read-only access to the key index.
pub(crate) trait IndexTable: ReadableTable<(&'static [u8], u64), IndexValue> {}
impl<T: ReadableTable<(&'static [u8], u64), IndexValue>> IndexTable for T {}

/// The data tables opened in one transaction, plus the file name for error messages.
pub(crate) struct TableSet<'f, H, I> {
    pub file: &'f Path,
    pub history: H,
    pub index: I,
}

/// The write transaction's tables.
pub(crate) type WriteTables<'f, 't> = TableSet<
    'f,
    redb::Table<'t, (u64, u32), &'static [u8]>,
    redb::Table<'t, (&'static [u8], u64), IndexValue>,
>;

/// A read transaction's tables.
pub(crate) type ReadTables<'f> = TableSet<
    'f,
    redb::ReadOnlyTable<(u64, u32), &'static [u8]>,
    redb::ReadOnlyTable<(&'static [u8], u64), IndexValue>,
>;

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
}

impl IndexEntry {
    pub fn from_stored(revision: u64, value: IndexValue) -> Self {
        let (position, tombstone, create_revision, version, lease) = value;
        IndexEntry {
            revision,
            position,
            tombstone,
            create_revision,
            version,
            lease,
        }
    }

    pub fn to_stored(self) -> IndexValue {
        (
            self.position,
            self.tombstone,
            self.create_revision,
            self.version,
            self.lease,
        )
    }

    /// The index entry describing `record`, written at (revision, position).
    pub fn for_record(record: &VersionRecord, revision: u64, position: u32) -> Self {
        IndexEntry {
            revision,
            position,
            tombstone: record.tombstone,
            create_revision: record.create_revision,
            version: record.version,
            lease: record.lease,
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

/// After this many index entries of one key, a walk stops stepping through the key's versions and
/// seeks past them instead, so a key with a long uncompacted history costs two seeks, not a scan.
const VERSIONS_WALKED_BEFORE_SEEKING: usize = 8;

/// How a walk over the key index ended.
enum WalkEnd {
    /// The range is exhausted, or the visitor asked to stop.
    Finished,
    /// The walk seeked past a key with many versions and must go on from this key.
    ResumeAt(Vec<u8>),
}

impl<H: HistoryTable, I: IndexTable> TableSet<'_, H, I> {
    /// The history record at (revision, position); a missing one means the index and the history
    /// disagree, which is corruption.
    pub fn history_get(&self, revision: u64, position: u32) -> Result<VersionRecord> {
        let bytes = self
            .history
            .get((revision, position))
            .map_err(db_error(self.file))?
            .ok_or_else(|| Error::Corrupt {
                file: self.file.to_path_buf(),
                detail: format!("key index points at missing history entry {revision}/{position}"),
            })?;
        codec::decode(bytes.value()).map_err(corrupt(self.file))
    }

    /// The newest index entry of `key` with revision at most `revision` (a tombstone included).
    pub fn index_entry_at(&self, key: &[u8], revision: u64) -> Result<Option<IndexEntry>> {
        let mut entries = self
            .index
            .range((key, 0u64)..=(key, revision))
            .map_err(db_error(self.file))?;
        match entries.next_back() {
            None => Ok(None),
            Some(entry) => {
                let (found_key, value) = entry.map_err(db_error(self.file))?;
                Ok(Some(IndexEntry::from_stored(
                    found_key.value().1,
                    value.value(),
                )))
            }
        }
    }

    /// The key-value an index entry describes, reading the value from history unless `with_value`
    /// is false.
    pub fn kv_for_entry(
        &self,
        key: &[u8],
        entry: &IndexEntry,
        with_value: bool,
    ) -> Result<KeyValue> {
        let mut kv = entry.kv_without_value(key);
        if with_value {
            let record = self.history_get(entry.revision, entry.position)?;
            if record.key != key {
                return Err(Error::Corrupt {
                    file: self.file.to_path_buf(),
                    detail: format!(
                        "key index entry {}/{} names another key than its history record",
                        entry.revision, entry.position
                    ),
                });
            }
            kv.value = record.value;
        }
        Ok(kv)
    }

    /// The version of `key` visible at `revision`, if the key was live then.
    pub fn kv_at(&self, key: &[u8], revision: u64, with_value: bool) -> Result<Option<KeyValue>> {
        match self.index_entry_at(key, revision)? {
            Some(entry) if !entry.tombstone => self.kv_for_entry(key, &entry, with_value).map(Some),
            _ => Ok(None),
        }
    }

    /// Calls `visit` in key order with the newest entry at or below `revision` of every key in
    /// `[start, end)` that is live at `revision`, until `visit` answers false.
    pub fn visit_live_at(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        revision: u64,
        visit: &mut dyn FnMut(&[u8], IndexEntry) -> Result<bool>,
    ) -> Result<()> {
        let mut from = start.to_vec();
        loop {
            if end.is_some_and(|end| from.as_slice() >= end) {
                return Ok(());
            }
            match self.walk_from(&from, end, revision, visit)? {
                WalkEnd::Finished => return Ok(()),
                WalkEnd::ResumeAt(next) => from = next,
            }
        }
    }

    /// How many keys are live at `revision` (a walk over the whole index, for imports and upgrades).
    pub fn count_live_keys(&self, revision: u64) -> Result<u64> {
        let mut live_keys = 0u64;
        self.visit_live_at(&[], None, revision, &mut |_, _| {
            live_keys += 1;
            Ok(true)
        })?;
        Ok(live_keys)
    }

    /// One forward walk over the index from `from`; see `visit_live_at`.
    fn walk_from(
        &self,
        from: &[u8],
        end: Option<&[u8]>,
        revision: u64,
        visit: &mut dyn FnMut(&[u8], IndexEntry) -> Result<bool>,
    ) -> Result<WalkEnd> {
        let upper = match end {
            Some(end) => Bound::Excluded((end, 0u64)),
            None => Bound::Unbounded,
        };
        let entries = self
            .index
            .range::<(&[u8], u64)>((Bound::Included((from, 0u64)), upper))
            .map_err(db_error(self.file))?;
        // The key being walked, its newest entry at or below `revision`, and how many of its
        // entries were stepped through.
        let mut walking: Option<(Vec<u8>, Option<IndexEntry>, usize)> = None;
        for entry in entries {
            let (stored_key, value) = entry.map_err(db_error(self.file))?;
            let (key, entry_revision) = stored_key.value();
            if walking
                .as_ref()
                .is_none_or(|(current, _, _)| current != key)
            {
                if let Some((done, visible, _)) = walking.take() {
                    if !offer_visible(&done, visible, visit)? {
                        return Ok(WalkEnd::Finished);
                    }
                }
                walking = Some((key.to_vec(), None, 0));
            }
            let (current, visible, walked) = walking.as_mut().expect("set just above");
            *walked += 1;
            if entry_revision <= revision {
                *visible = Some(IndexEntry::from_stored(entry_revision, value.value()));
            }
            if *walked >= VERSIONS_WALKED_BEFORE_SEEKING {
                let key = std::mem::take(current);
                let visible = self.index_entry_at(&key, revision)?;
                if !offer_visible(&key, visible, visit)? {
                    return Ok(WalkEnd::Finished);
                }
                return Ok(WalkEnd::ResumeAt(crate::types::key_successor(&key)));
            }
        }
        if let Some((done, visible, _)) = walking {
            offer_visible(&done, visible, visit)?;
        }
        Ok(WalkEnd::Finished)
    }
}

/// Passes a key's visible entry to the visitor unless the key is deleted or absent at the walk's
/// revision; answers whether the walk goes on.
fn offer_visible(
    key: &[u8],
    visible: Option<IndexEntry>,
    visit: &mut dyn FnMut(&[u8], IndexEntry) -> Result<bool>,
) -> Result<bool> {
    match visible {
        Some(entry) if !entry.tombstone => visit(key, entry),
        _ => Ok(true),
    }
}

impl WriteTables<'_, '_> {
    /// Writes one version into `history` at (revision, position) and indexes it.
    pub fn insert_version(
        &mut self,
        revision: u64,
        position: u32,
        record: &VersionRecord,
    ) -> Result<()> {
        let bytes = codec::encode(record).map_err(corrupt(self.file))?;
        self.history
            .insert((revision, position), bytes.as_slice())
            .map_err(db_error(self.file))?;
        self.index_version(revision, position, record)
    }

    /// Inserts the key-index entry of a version already in `history`.
    pub fn index_version(
        &mut self,
        revision: u64,
        position: u32,
        record: &VersionRecord,
    ) -> Result<()> {
        index_version(&mut self.index, self.file, revision, position, record)
    }
}

/// Inserts the key-index entry of the version at (revision, position) into `index`. A free function
/// so that a walk over `history` can index what it reads while it holds the history table.
pub(crate) fn index_version(
    index: &mut redb::Table<'_, (&'static [u8], u64), IndexValue>,
    file: &Path,
    revision: u64,
    position: u32,
    record: &VersionRecord,
) -> Result<()> {
    let entry = IndexEntry::for_record(record, revision, position);
    index
        .insert((record.key.as_slice(), revision), entry.to_stored())
        .map_err(db_error(file))?;
    Ok(())
}

/// Turns a history record into the key-value it describes (a tombstone gives the delete event's kv).
pub(crate) fn version_to_kv(record: VersionRecord, revision: u64) -> KeyValue {
    if record.tombstone {
        return KeyValue {
            key: record.key,
            value: Vec::new(),
            create_revision: 0,
            mod_revision: revision,
            version: 0,
            lease: 0,
        };
    }
    KeyValue {
        key: record.key,
        value: record.value,
        create_revision: record.create_revision,
        mod_revision: revision,
        version: record.version,
        lease: record.lease,
    }
}

/// Reads the `StoreState` record from the meta table.
pub(crate) fn load_state(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<StoreState> {
    load_state_record(meta, file)
}

/// Reads the state record as `T`: today's `StoreState`, or an older layout's shape of it.
pub(crate) fn load_state_record<T: serde::de::DeserializeOwned>(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<T> {
    let bytes = meta
        .get(STATE_KEY)
        .map_err(db_error(file))?
        .ok_or_else(|| Error::Corrupt {
            file: file.to_path_buf(),
            detail: "meta table has no store_state record".into(),
        })?;
    codec::decode(bytes.value()).map_err(corrupt(file))
}

/// Writes the `StoreState` record into the meta table.
pub(crate) fn save_state(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    state: &StoreState,
) -> Result<()> {
    let bytes = codec::encode(state).map_err(corrupt(file))?;
    meta.insert(STATE_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}

/// The key of the cluster id in the meta table. Not part of `StoreState`, so files written before
/// cluster ids existed still decode; such a store has none until a snapshot or restore brings one.
pub(crate) const CLUSTER_ID_KEY: &str = "cluster_id";

/// Reads the cluster id from the meta table, if the store has one.
pub(crate) fn load_cluster_id(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<Option<u64>> {
    match meta.get(CLUSTER_ID_KEY).map_err(db_error(file))? {
        Some(bytes) => codec::decode(bytes.value())
            .map(Some)
            .map_err(corrupt(file)),
        None => Ok(None),
    }
}

/// Writes the cluster id into the meta table.
pub(crate) fn save_cluster_id(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    cluster_id: u64,
) -> Result<()> {
    let bytes = codec::encode(&cluster_id).map_err(corrupt(file))?;
    meta.insert(CLUSTER_ID_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}
