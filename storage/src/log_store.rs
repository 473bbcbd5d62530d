//! The raft log on its own redb file: entries by index, the vote, the committed and purged ids.
//!
//! Entries are opaque bytes (the raft layer encodes them through the codec module, so each carries
//! the format-version byte). Every append, vote, truncation and purge is one durable transaction:
//! an append of many entries is one fsync (group commit). Only the committed id is saved without
//! an fsync, because losing it merely makes a restarted member re-apply fewer entries before it
//! hears from the leader again.
//!
//! Invariants, checked on every call: the log is contiguous, appends continue it exactly (or, on an
//! empty log, continue the last purged id), and the purged id never moves backwards.

use std::ops::Range;
use std::path::{Path, PathBuf};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use crate::codec;
use crate::error::{corrupt, db_error, Error, Result};
use crate::file::{open_revkv_file, META};
use crate::types::LogId;

const LOG_FILE_KIND: &str = "raft-log";
const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
const VOTE_KEY: &str = "vote";
const COMMITTED_KEY: &str = "committed";
const LAST_PURGED_KEY: &str = "last_purged";

/// The raft log store. See the module documentation.
pub struct RaftLogStore {
    database: Database,
    file: PathBuf,
}

impl RaftLogStore {
    /// Opens the log file at `path`, creating it when it does not exist.
    pub fn open(path: impl AsRef<Path>, cache_bytes: usize) -> Result<Self> {
        let file = path.as_ref().to_path_buf();
        let database = open_revkv_file(&file, LOG_FILE_KIND, cache_bytes, |write| {
            write.open_table(ENTRIES).map_err(db_error(&file))?;
            Ok(())
        })?;
        Ok(RaftLogStore { database, file })
    }

    /// The path of the log file.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// Appends entries (index, encoded entry) durably in one transaction.
    pub fn append<'a>(&self, entries: impl IntoIterator<Item = (u64, &'a [u8])>) -> Result<()> {
        let file = self.file.as_path();
        let mut entries = entries.into_iter().peekable();
        if entries.peek().is_none() {
            // Nothing to make durable: skip the commit and its fsync.
            return Ok(());
        }
        let write = self.begin_durable_write()?;
        {
            let mut table = write.open_table(ENTRIES).map_err(db_error(file))?;
            let mut expected_next = self.next_index_in(&table, &write)?;
            for (index, bytes) in entries {
                if let Some(expected) = expected_next {
                    if index != expected {
                        return Err(Error::Invariant(format!(
                            "log append at index {index}, but the log continues at {expected}"
                        )));
                    }
                }
                table.insert(index, bytes).map_err(db_error(file))?;
                expected_next = Some(index + 1);
            }
        }
        write.commit().map_err(db_error(file))
    }

    /// The index the next append must use, or `None` when any index may start the log.
    fn next_index_in(
        &self,
        table: &impl ReadableTable<u64, &'static [u8]>,
        write: &redb::WriteTransaction,
    ) -> Result<Option<u64>> {
        let file = self.file.as_path();
        if let Some(last) = table.last().map_err(db_error(file))? {
            return Ok(Some(last.0.value() + 1));
        }
        let meta = write.open_table(META).map_err(db_error(file))?;
        let purged: Option<LogId> = read_meta(&meta, LAST_PURGED_KEY, file)?;
        Ok(purged.map(|purged| purged.index + 1))
    }

    /// Entries with index in `range`, in order.
    pub fn entries(&self, range: Range<u64>) -> Result<Vec<(u64, Vec<u8>)>> {
        let file = self.file.as_path();
        if range.start >= range.end {
            return Ok(Vec::new());
        }
        let read = self.database.begin_read().map_err(db_error(file))?;
        let table = read.open_table(ENTRIES).map_err(db_error(file))?;
        let mut entries = Vec::new();
        for entry in table.range(range).map_err(db_error(file))? {
            let (index, bytes) = entry.map_err(db_error(file))?;
            entries.push((index.value(), bytes.value().to_vec()));
        }
        Ok(entries)
    }

    /// The last entry, if the log holds any.
    pub fn last_entry(&self) -> Result<Option<(u64, Vec<u8>)>> {
        let file = self.file.as_path();
        let read = self.database.begin_read().map_err(db_error(file))?;
        let table = read.open_table(ENTRIES).map_err(db_error(file))?;
        let last = table.last().map_err(db_error(file))?;
        Ok(last.map(|(index, bytes)| (index.value(), bytes.value().to_vec())))
    }

    /// The first index the log holds, if any.
    pub fn first_index(&self) -> Result<Option<u64>> {
        let file = self.file.as_path();
        let read = self.database.begin_read().map_err(db_error(file))?;
        let table = read.open_table(ENTRIES).map_err(db_error(file))?;
        let first = table.first().map_err(db_error(file))?;
        Ok(first.map(|(index, _)| index.value()))
    }

    /// Deletes every entry after `index` (every entry, when `None`), durably.
    pub fn truncate_after(&self, index: Option<u64>) -> Result<()> {
        let file = self.file.as_path();
        let write = self.begin_durable_write()?;
        {
            let mut table = write.open_table(ENTRIES).map_err(db_error(file))?;
            let from = index.map_or(0, |index| index + 1);
            table
                .retain_in(from.., |_, _| false)
                .map_err(db_error(file))?;
        }
        write.commit().map_err(db_error(file))
    }

    /// Deletes every entry up to and including `upto.index` and records `upto` as the last purged
    /// id, durably. Purging never moves backwards.
    pub fn purge_through(&self, upto: LogId) -> Result<()> {
        let file = self.file.as_path();
        let write = self.begin_durable_write()?;
        {
            let mut meta = write.open_table(META).map_err(db_error(file))?;
            let previous: Option<LogId> = read_meta(&meta, LAST_PURGED_KEY, file)?;
            if previous.is_some_and(|previous| previous.index > upto.index) {
                return Err(Error::Invariant(format!(
                    "purge through {} after purging through {}",
                    upto.index,
                    previous.map_or(0, |previous| previous.index)
                )));
            }
            write_meta(&mut meta, LAST_PURGED_KEY, &upto, file)?;
            let mut table = write.open_table(ENTRIES).map_err(db_error(file))?;
            table
                .retain_in(..=upto.index, |_, _| false)
                .map_err(db_error(file))?;
        }
        write.commit().map_err(db_error(file))
    }

    /// The last purged log id, if any purge happened.
    pub fn last_purged(&self) -> Result<Option<LogId>> {
        self.read_meta_value(LAST_PURGED_KEY)
    }

    /// Saves the vote (opaque, encoded by the raft layer) durably.
    pub fn save_vote(&self, vote: &[u8]) -> Result<()> {
        let file = self.file.as_path();
        let write = self.begin_durable_write()?;
        {
            let mut meta = write.open_table(META).map_err(db_error(file))?;
            write_meta(&mut meta, VOTE_KEY, &vote.to_vec(), file)?;
        }
        write.commit().map_err(db_error(file))
    }

    /// The saved vote, if any.
    pub fn vote(&self) -> Result<Option<Vec<u8>>> {
        self.read_meta_value(VOTE_KEY)
    }

    /// Saves the committed log id without an fsync (see the module documentation).
    pub fn save_committed(&self, committed: Option<LogId>) -> Result<()> {
        let file = self.file.as_path();
        let mut write = self.database.begin_write().map_err(db_error(file))?;
        write
            .set_durability(Durability::None)
            .map_err(db_error(file))?;
        {
            let mut meta = write.open_table(META).map_err(db_error(file))?;
            write_meta(&mut meta, COMMITTED_KEY, &committed, file)?;
        }
        write.commit().map_err(db_error(file))
    }

    /// The saved committed log id, if any.
    pub fn committed(&self) -> Result<Option<LogId>> {
        Ok(self
            .read_meta_value::<Option<LogId>>(COMMITTED_KEY)?
            .flatten())
    }

    fn begin_durable_write(&self) -> Result<redb::WriteTransaction> {
        let file = self.file.as_path();
        let mut write = self.database.begin_write().map_err(db_error(file))?;
        write
            .set_durability(Durability::Immediate)
            .map_err(db_error(file))?;
        Ok(write)
    }

    fn read_meta_value<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let file = self.file.as_path();
        let read = self.database.begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        read_meta(&meta, key, file)
    }
}

fn read_meta<T: serde::de::DeserializeOwned>(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
    file: &Path,
) -> Result<Option<T>> {
    let found = meta.get(key).map_err(db_error(file))?;
    found
        .map(|bytes| codec::decode(bytes.value()).map_err(corrupt(file)))
        .transpose()
}

fn write_meta<T: serde::Serialize>(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    key: &str,
    value: &T,
    file: &Path,
) -> Result<()> {
    let bytes = codec::encode(value).map_err(corrupt(file))?;
    meta.insert(key, bytes.as_slice()).map_err(db_error(file))?;
    Ok(())
}
