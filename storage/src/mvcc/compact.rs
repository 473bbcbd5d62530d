//! Compaction: discard every version superseded at or before the compact revision, and every
//! tombstone at or before it.
//!
//! Applying `Request::Compact` only moves the compact revision (reads below it are refused from
//! then on) and records the window still to clean as a `PendingCompaction` in the meta table.
//! The cleaning itself runs in bounded steps, each its own write transaction: a first step of at
//! most `StoreOptions::compaction_inline_entries` inside the apply (so a small window is done at
//! once), and the rest through `MvccStore::compact_step`, which the member's background compactor
//! calls between applies, as etcd's scheduled compaction does. So a huge window never stalls the
//! apply loop, and the pending record (saved with each step) lets a restart carry on where it was.
//!
//! The logical state never depends on how far the cleaning got: a version left behind is
//! superseded at or before the compact revision, so no read at or above it can see it, and the
//! replica hash skips such versions (`TableSet::is_compacted_away`). Members clean at their own
//! pace and still agree.
//!
//! The work is incremental. Versions superseded at or before the previous compact revision are
//! already gone (or pending), so only history entries in `(previous, revision]` can supersede
//! something new: for each such entry, the key's previous index entry (whatever its revision) is
//! superseded by it and is removed; a tombstone in the window is removed too. Live keys are
//! untouched. The history is walked in bounded chunks so memory stays bounded.

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};

use std::sync::atomic::Ordering;

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, ReadError, StorageFailure};
use crate::file::META;
use crate::mvcc::tables::open_write_tables;
use crate::mvcc::tables::{load_state, HistoryTable, TableSet, WriteTables};
use crate::mvcc::MvccStore;

/// How many history entries one chunk of the compaction walk holds in memory.
const COMPACTION_CHUNK_ENTRIES: usize = 1024;

/// The meta table's key of the pending compaction record (absent: nothing pending).
const PENDING_KEY: &str = "pending_compaction";

/// The part of a compaction window not cleaned yet: history entries from `next` through
/// `through_revision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingCompaction {
    pub next: (u64, u32),
    pub through_revision: u64,
}

impl PendingCompaction {
    /// The window `(previous_compact, revision]`, or the rest of `pending` extended through
    /// `revision` (the windows are contiguous: the pending one ends where the new one starts).
    pub fn extended(
        pending: Option<PendingCompaction>,
        previous_compact: u64,
        revision: u64,
    ) -> PendingCompaction {
        assert!(previous_compact < revision, "compaction must move forward");
        let next = pending.map_or((previous_compact + 1, 0), |pending| pending.next);
        PendingCompaction {
            next,
            through_revision: revision,
        }
    }
}

pub(crate) fn load_pending(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<Option<PendingCompaction>, StorageFailure> {
    match meta.get(PENDING_KEY).map_err(db_error(file))? {
        Some(bytes) => codec::decode(bytes.value())
            .map(Some)
            .map_err(corrupt(file)),
        None => Ok(None),
    }
}

pub(crate) fn save_pending(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    pending: Option<&PendingCompaction>,
) -> Result<(), StorageFailure> {
    match pending {
        None => {
            meta.remove(PENDING_KEY).map_err(db_error(file))?;
        }
        Some(pending) => {
            let bytes = codec::encode(pending).map_err(corrupt(file))?;
            meta.insert(PENDING_KEY, bytes.as_slice())
                .map_err(db_error(file))?;
        }
    }
    Ok(())
}

impl MvccStore {
    /// True while a compaction window is not fully cleaned.
    pub fn compaction_pending(&self) -> bool {
        self.compaction_pending.load(Ordering::Acquire)
    }

    /// Cleans at most `max_entries` history entries of the pending compaction in one write
    /// transaction (as durable as an apply batch would be); answers whether any remain.
    pub fn compact_step(&self, max_entries: usize) -> Result<bool, StorageFailure> {
        let changes_before = self.key_index.read().change_count();
        let step = self.compact_step_once(max_entries);
        self.undo_index_on_failure(changes_before, step)
    }

    fn compact_step_once(&self, max_entries: usize) -> Result<bool, StorageFailure> {
        let file = self.file.as_path();
        let durability = self.durability_for_next_commit();
        let mut write = self.database().begin_write().map_err(db_error(file))?;
        write.set_durability(durability).map_err(db_error(file))?;
        let (rest, applied) = {
            let mut meta = write.open_table(META).map_err(db_error(file))?;
            let Some(pending) = load_pending(&meta, file)? else {
                self.compaction_pending.store(false, Ordering::Release);
                return Ok(false);
            };
            let mut tables = open_write_tables(&write, file, &self.key_index)?;
            let rest = tables.compact_some(pending, max_entries.max(1))?;
            save_pending(&mut meta, file, rest.as_ref())?;
            (rest, load_state(&meta, file)?.applied.last_applied)
        };
        write.commit().map_err(db_error(file))?;
        self.record_commit(durability, applied);
        self.compaction_pending
            .store(rest.is_some(), Ordering::Release);
        Ok(rest.is_some())
    }

    /// Cleans the whole pending compaction, in steps of `max_entries` (defragmentation first
    /// gives back what compaction freed; tests wait for it).
    pub fn finish_compaction(&self, max_entries: usize) -> Result<(), StorageFailure> {
        while self.compact_step(max_entries)? {}
        Ok(())
    }

    /// Reads whether a compaction is pending into the flag (on open and after an import).
    pub(crate) fn reload_compaction_pending(&self) -> Result<(), StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        let pending = load_pending(&meta, file)?.is_some();
        self.compaction_pending.store(pending, Ordering::Release);
        Ok(())
    }
}

/// One history entry of the window, reduced to what compaction needs.
struct WindowEntry {
    revision: u64,
    position: u32,
    key: Vec<u8>,
    tombstone: bool,
}

impl WriteTables<'_, '_> {
    /// Cleans at most `budget` history entries of `pending`; answers what is left (None: done).
    pub(crate) fn compact_some(
        &mut self,
        pending: PendingCompaction,
        budget: usize,
    ) -> Result<Option<PendingCompaction>, StorageFailure> {
        let mut cursor = pending.next;
        let mut left = budget;
        while left > 0 {
            let limit = left.min(COMPACTION_CHUNK_ENTRIES);
            let chunk = self.window_chunk(cursor, pending.through_revision, limit)?;
            let Some(last) = chunk.last() else {
                return Ok(None);
            };
            cursor = match last.position.checked_add(1) {
                Some(position) => (last.revision, position),
                None => (last.revision + 1, 0),
            };
            for entry in &chunk {
                self.discard_superseded(entry)?;
            }
            left -= chunk.len();
        }
        Ok(Some(PendingCompaction {
            next: cursor,
            through_revision: pending.through_revision,
        }))
    }

    fn window_chunk(
        &self,
        from: (u64, u32),
        through_revision: u64,
        limit: usize,
    ) -> Result<Vec<WindowEntry>, StorageFailure> {
        if from > (through_revision, u32::MAX) {
            // The cursor stepped past the window (only after position u32::MAX of its last revision).
            return Ok(Vec::new());
        }
        let entries = self
            .history
            .range(from..=(through_revision, u32::MAX))
            .map_err(db_error(self.file))?;
        let mut chunk = Vec::new();
        for entry in entries.take(limit) {
            let (key, bytes) = entry.map_err(db_error(self.file))?;
            let (revision, position) = key.value();
            let record: VersionRecord = codec::decode(bytes.value()).map_err(corrupt(self.file))?;
            chunk.push(WindowEntry {
                revision,
                position,
                key: record.key,
                tombstone: record.tombstone,
            });
        }
        Ok(chunk)
    }

    fn discard_superseded(&mut self, entry: &WindowEntry) -> Result<(), StorageFailure> {
        let before = entry.revision.saturating_sub(1);
        let previous = self
            .index_entry_at(&entry.key, before)
            .map_err(ReadError::into_failure)?;
        if let Some(previous) = previous {
            self.remove_version(&entry.key, previous.revision, previous.position)?;
        }
        if entry.tombstone {
            self.remove_version(&entry.key, entry.revision, entry.position)?;
        }
        Ok(())
    }

    fn remove_version(
        &mut self,
        key: &[u8],
        revision: u64,
        position: u32,
    ) -> Result<(), StorageFailure> {
        self.history
            .remove((revision, position))
            .map_err(db_error(self.file))?;
        self.index.write()?.remove(key, revision);
        Ok(())
    }
}

impl<H: HistoryTable> TableSet<'_, H> {
    /// True for a version a finished compaction at `compact_revision` would have removed: a
    /// tombstone at or before it, or a version superseded by another at or before it. Such a
    /// version may still be on disk while compaction is pending; nothing logical may count it.
    ///
    /// The caller's history snapshot may be older than the index, whose cleaning may have gone
    /// further: a version of the snapshot the index no longer holds was removed by cleaning, so it
    /// is compacted away. That holds only while the index's compact revision is still
    /// `compact_revision` (the hash checks it before and after its walk): cleaning removes a
    /// version before the newer one that supersedes it, so a version still indexed still has its
    /// successor indexed.
    pub(crate) fn is_compacted_away(
        &self,
        key: &[u8],
        revision: u64,
        tombstone: bool,
        compact_revision: u64,
    ) -> Result<bool, ReadError> {
        if revision > compact_revision {
            return Ok(false);
        }
        if tombstone {
            return Ok(true);
        }
        let index = self.index.read_at(compact_revision)?;
        if !index.contains(key, revision) {
            return Ok(true);
        }
        if revision == compact_revision {
            // Nothing at or before the compact revision comes after it.
            return Ok(false);
        }
        let later = index.versions_between(key, (revision + 1, compact_revision), 1);
        Ok(!later.is_empty())
    }
}
