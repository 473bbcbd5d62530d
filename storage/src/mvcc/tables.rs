//! The state file's tables and a typed view over them, shared by the read and write paths.
//!
//! Layout 4 (see docs/design/storage-layout.md for the full story), shaped like etcd's backend:
//! - `history`: (revision, position) -> `VersionRecord`, every version and tombstone not yet
//!   compacted, in revision order. It is the only place a version is written, and a put appends at
//!   its right edge (watches, reads, snapshots and hashes all read values from here).
//! - `leases` (layout 3): lease id -> `LeaseRecord` (granted TTL, attached-key count). Leases are
//!   not revisioned, as in etcd: the table holds the leases granted now.
//! - `lease_keys` (layout 3): (lease id, key) -> (), the keys attached to each lease now, so a
//!   revoke finds its keys without a scan. A key is attached to the lease of its current version.
//! - `meta`: the file marker, the layout version and the `StoreState` record.
//!
//! The key index, (key, revision) -> where that version is in `history` and its metadata, lives in
//! memory (`key_index.rs`) and is rebuilt from `history` at open; layouts 2 and 3 kept it as a
//! table, and layout 1 also kept a second copy of every current value. `migrate.rs` upgrades them.

use std::path::Path;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, ReadError, StorageFailure};
use crate::mvcc::key_index::{IndexEntry, IndexHandle, SharedKeyIndex};
use crate::mvcc::shared_history::SharedHistory;
use crate::types::{AppliedState, KeyValue};

pub(crate) const HISTORY: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("history");

pub(crate) const LEASES: TableDefinition<i64, &[u8]> = TableDefinition::new("leases");
pub(crate) const LEASE_KEYS: TableDefinition<(i64, &[u8]), ()> = TableDefinition::new("lease_keys");

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

/// The history table opened in one transaction, the key index as that transaction sees it, and
/// the file name for error messages.
pub(crate) struct TableSet<'f, H> {
    pub file: &'f Path,
    pub history: H,
    pub index: IndexHandle<'f>,
}

/// What `TableSet::visit_live_at` calls with each live key and its newest entry: false stops the
/// walk.
pub(crate) type LiveVisitor<'v> = dyn FnMut(&[u8], IndexEntry) -> Result<bool, ReadError> + 'v;

/// The write transaction's tables.
pub(crate) type WriteTables<'f, 't> = TableSet<'f, redb::Table<'t, (u64, u32), &'static [u8]>>;

/// A read transaction's tables (its history table shareable between reads,
/// `read_snapshot.rs`).
pub(crate) type ReadTables<'f> = TableSet<'f, SharedHistory>;

impl<H: HistoryTable> TableSet<'_, H> {
    /// The history record at (revision, position); a missing one means the index and the history
    /// disagree, which is corruption.
    pub fn history_get(
        &self,
        revision: u64,
        position: u32,
    ) -> Result<VersionRecord, StorageFailure> {
        let bytes = self
            .history
            .get((revision, position))
            .map_err(db_error(self.file))?
            .ok_or_else(|| StorageFailure::Corrupt {
                file: self.file.to_path_buf(),
                detail: format!("key index points at missing history entry {revision}/{position}"),
            })?;
        codec::decode(bytes.value()).map_err(corrupt(self.file))
    }

    /// The newest index entry of `key` with revision at most `revision` (a tombstone included).
    pub fn index_entry_at(
        &self,
        key: &[u8],
        revision: u64,
    ) -> Result<Option<IndexEntry>, ReadError> {
        Ok(self.index.read_at(revision)?.entry_at(key, revision))
    }

    /// The key-value an index entry describes, reading the value from history unless `with_value`
    /// is false.
    pub fn kv_for_entry(
        &self,
        key: &[u8],
        entry: &IndexEntry,
        with_value: bool,
    ) -> Result<KeyValue, StorageFailure> {
        let mut kv = entry.kv_without_value(key);
        if with_value {
            let record = self.history_get(entry.revision, entry.position)?;
            if record.key != key {
                return Err(StorageFailure::Corrupt {
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
    pub fn kv_at(
        &self,
        key: &[u8],
        revision: u64,
        with_value: bool,
    ) -> Result<Option<KeyValue>, ReadError> {
        match self.index_entry_at(key, revision)? {
            Some(entry) if !entry.tombstone => {
                Ok(Some(self.kv_for_entry(key, &entry, with_value)?))
            }
            _ => Ok(None),
        }
    }

    /// Calls `visit` in key order with the newest entry at or below `revision` of every key in
    /// `[start, end)` that is live at `revision`, until `visit` answers false. The index is read a
    /// chunk at a time and `visit` runs without holding it.
    pub fn visit_live_at(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        revision: u64,
        visit: &mut LiveVisitor<'_>,
    ) -> Result<(), ReadError> {
        let mut from = start.to_vec();
        loop {
            if end.is_some_and(|end| from.as_slice() >= end) {
                return Ok(());
            }
            let chunk = self
                .index
                .read_at(revision)?
                .live_chunk(&from, end, revision);
            for (key, entry) in chunk.keys {
                if !visit(&key, entry)? {
                    return Ok(());
                }
            }
            match chunk.resume_at {
                Some(next) => from = next,
                None => return Ok(()),
            }
        }
    }

    /// How many keys of `[start, end)` are live at `revision`, counted chunk by chunk so the
    /// writer is never held up for more than one chunk.
    pub fn count_live_in(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        revision: u64,
    ) -> Result<u64, ReadError> {
        let mut from = start.to_vec();
        let mut live_keys = 0u64;
        loop {
            if end.is_some_and(|end| from.as_slice() >= end) {
                return Ok(live_keys);
            }
            let chunk = self
                .index
                .read_at(revision)?
                .count_live_chunk(&from, end, revision);
            live_keys += chunk.live_keys;
            match chunk.resume_at {
                Some(next) => from = next,
                None => return Ok(live_keys),
            }
        }
    }

    /// How many keys are live at `revision` (a walk over the whole index, for imports and upgrades).
    pub fn count_live_keys(&self, revision: u64) -> Result<u64, ReadError> {
        self.count_live_in(&[], None, revision)
    }
}

impl WriteTables<'_, '_> {
    /// Writes one version into `history` at (revision, position) and indexes it.
    pub fn insert_version(
        &mut self,
        revision: u64,
        position: u32,
        record: &VersionRecord,
    ) -> Result<(), StorageFailure> {
        let bytes = codec::encode(record).map_err(corrupt(self.file))?;
        self.history
            .insert((revision, position), bytes.as_slice())
            .map_err(db_error(self.file))?;
        let entry = IndexEntry::for_record(record, (revision, position), bytes.len());
        self.index.write()?.insert(&record.key, entry)
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
) -> Result<StoreState, StorageFailure> {
    load_state_record(meta, file)
}

/// Reads the state record as `T`: today's `StoreState`, or an older layout's shape of it.
pub(crate) fn load_state_record<T: serde::de::DeserializeOwned>(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<T, StorageFailure> {
    let bytes = meta
        .get(STATE_KEY)
        .map_err(db_error(file))?
        .ok_or_else(|| StorageFailure::Corrupt {
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
) -> Result<(), StorageFailure> {
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
) -> Result<Option<u64>, StorageFailure> {
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
) -> Result<(), StorageFailure> {
    let bytes = codec::encode(&cluster_id).map_err(corrupt(file))?;
    meta.insert(CLUSTER_ID_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}

/// The write transaction's tables, changing `key_index` with the history.
pub(crate) fn open_write_tables<'f, 't>(
    write: &'t redb::WriteTransaction,
    file: &'f Path,
    key_index: &'f SharedKeyIndex,
) -> Result<WriteTables<'f, 't>, StorageFailure> {
    Ok(WriteTables {
        file,
        history: write.open_table(HISTORY).map_err(db_error(file))?,
        index: IndexHandle::writer(key_index),
    })
}
