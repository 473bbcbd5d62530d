//! The state file's tables and a typed view over them, shared by the read and write paths.
//!
//! Layout (see docs/ARCHITECTURE.md for the full story):
//! - `live`: key -> `LiveRecord`, the current version of every live key (fast current reads).
//! - `history`: (revision, position) -> `VersionRecord`, every version and tombstone not yet
//!   compacted, in revision order (watches, historical reads, snapshots, hashes).
//! - `key_index`: (key, revision) -> (position, is_tombstone), every history entry of a key in
//!   revision order (historical reads, prev_kv, compaction).
//! - `meta`: the file marker and the `StoreState` record.

use std::ops::Bound;
use std::path::Path;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::codec::{self, LiveRecord, VersionRecord};
use crate::error::{corrupt, db_error, Error, Result};
use crate::types::{AppliedState, KeyValue};

pub(crate) const LIVE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("live");
pub(crate) const HISTORY: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("history");
pub(crate) const KEY_INDEX: TableDefinition<(&[u8], u64), (u32, bool)> =
    TableDefinition::new("key_index");

/// The key of the `StoreState` record in the meta table.
pub(crate) const STATE_KEY: &str = "store_state";

/// The counters that move with every applied batch, stored as one record in one transaction with
/// the changes they describe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoreState {
    pub current_revision: u64,
    pub compact_revision: u64,
    pub applied: AppliedState,
}

impl StoreState {
    /// An empty store is at revision 1, as an empty etcd cluster is.
    pub fn empty() -> Self {
        StoreState {
            current_revision: 1,
            compact_revision: 0,
            applied: AppliedState::default(),
        }
    }
}

/// Read-only access to the live table, by either a read or a write transaction.
pub(crate) trait LiveTable: ReadableTable<&'static [u8], &'static [u8]> {}
impl<T: ReadableTable<&'static [u8], &'static [u8]>> LiveTable for T {}

/// Read-only access to the history table.
pub(crate) trait HistoryTable: ReadableTable<(u64, u32), &'static [u8]> {}
impl<T: ReadableTable<(u64, u32), &'static [u8]>> HistoryTable for T {}

/// Read-only access to the key index.
pub(crate) trait IndexTable: ReadableTable<(&'static [u8], u64), (u32, bool)> {}
impl<T: ReadableTable<(&'static [u8], u64), (u32, bool)>> IndexTable for T {}

/// The three data tables opened in one transaction, plus the file name for error messages.
pub(crate) struct TableSet<'f, L, H, I> {
    pub file: &'f Path,
    pub live: L,
    pub history: H,
    pub index: I,
}

/// The write transaction's tables.
pub(crate) type WriteTables<'f, 't> = TableSet<
    'f,
    redb::Table<'t, &'static [u8], &'static [u8]>,
    redb::Table<'t, (u64, u32), &'static [u8]>,
    redb::Table<'t, (&'static [u8], u64), (u32, bool)>,
>;

/// A read transaction's tables.
pub(crate) type ReadTables<'f> = TableSet<
    'f,
    redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    redb::ReadOnlyTable<(u64, u32), &'static [u8]>,
    redb::ReadOnlyTable<(&'static [u8], u64), (u32, bool)>,
>;

/// One entry of the key index: where a version of a key lives in the history table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub revision: u64,
    pub position: u32,
    pub tombstone: bool,
}

impl<L: LiveTable, H: HistoryTable, I: IndexTable> TableSet<'_, L, H, I> {
    /// The current version of `key`, if it is live.
    pub fn live_get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let found = self.live.get(key).map_err(db_error(self.file))?;
        found
            .map(|bytes| self.decode_live(key, bytes.value()))
            .transpose()
    }

    pub fn decode_live(&self, key: &[u8], bytes: &[u8]) -> Result<KeyValue> {
        let record: LiveRecord = codec::decode(bytes).map_err(corrupt(self.file))?;
        Ok(KeyValue {
            key: key.to_vec(),
            value: record.value,
            create_revision: record.create_revision,
            mod_revision: record.mod_revision,
            version: record.version,
            lease: record.lease,
        })
    }

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

    /// The last index entry of `key` with revision in `[0, below)`.
    pub fn index_entry_before(&self, key: &[u8], below: u64) -> Result<Option<IndexEntry>> {
        if below == 0 {
            return Ok(None);
        }
        let mut entries = self
            .index
            .range((key, 0u64)..(key, below))
            .map_err(db_error(self.file))?;
        match entries.next_back() {
            None => Ok(None),
            Some(entry) => {
                let (found_key, value) = entry.map_err(db_error(self.file))?;
                let (_, revision) = found_key.value();
                let (position, tombstone) = value.value();
                Ok(Some(IndexEntry {
                    revision,
                    position,
                    tombstone,
                }))
            }
        }
    }

    /// The version of `key` visible at `revision`, if the key was live then.
    pub fn kv_at(&self, key: &[u8], revision: u64) -> Result<Option<KeyValue>> {
        match self.index_entry_before(key, revision.saturating_add(1))? {
            Some(entry) if !entry.tombstone => {
                let record = self.history_get(entry.revision, entry.position)?;
                Ok(Some(version_to_kv(record, entry.revision)))
            }
            _ => Ok(None),
        }
    }

    /// The first key in the index at or after `from` and before `end` (if bounded).
    pub fn next_indexed_key(&self, from: &[u8], end: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        let upper = match end {
            Some(end) => Bound::Excluded((end, 0u64)),
            None => Bound::Unbounded,
        };
        if let Some(end) = end {
            if from >= end {
                return Ok(None);
            }
        }
        let mut entries = self
            .index
            .range::<(&[u8], u64)>((Bound::Included((from, 0u64)), upper))
            .map_err(db_error(self.file))?;
        match entries.next() {
            None => Ok(None),
            Some(entry) => {
                let (found_key, _) = entry.map_err(db_error(self.file))?;
                Ok(Some(found_key.value().0.to_vec()))
            }
        }
    }
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
