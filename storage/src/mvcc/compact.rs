//! Compaction: discard every version superseded at or before the compact revision, and every
//! tombstone at or before it.
//!
//! The work is incremental. Versions superseded at or before the previous compact revision are
//! already gone, so only history entries in `(previous, revision]` can supersede something new: for
//! each such entry, the key's previous index entry (whatever its revision) is superseded by it and
//! is removed; a tombstone in the window is removed too. Live keys are untouched. The history is
//! walked in bounded chunks so memory stays bounded however large the window is.

use redb::ReadableTable;

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, Result};
use crate::mvcc::tables::WriteTables;

/// How many history entries one chunk of the compaction walk holds in memory.
const COMPACTION_CHUNK_ENTRIES: usize = 1024;

/// One history entry of the window, reduced to what compaction needs.
struct WindowEntry {
    revision: u64,
    position: u32,
    key: Vec<u8>,
    tombstone: bool,
}

impl WriteTables<'_, '_> {
    /// Compacts history superseded in `(previous_compact, revision]`.
    pub(crate) fn compact_history(&mut self, previous_compact: u64, revision: u64) -> Result<()> {
        assert!(previous_compact < revision, "compaction must move forward");
        let mut cursor = (previous_compact + 1, 0u32);
        loop {
            let chunk = self.window_chunk(cursor, revision)?;
            let Some(last) = chunk.last() else {
                return Ok(());
            };
            cursor = match last.position.checked_add(1) {
                Some(position) => (last.revision, position),
                None => (last.revision + 1, 0),
            };
            for entry in &chunk {
                self.discard_superseded(entry)?;
            }
        }
    }

    fn window_chunk(&self, from: (u64, u32), through_revision: u64) -> Result<Vec<WindowEntry>> {
        if from > (through_revision, u32::MAX) {
            // The cursor stepped past the window (only after position u32::MAX of its last revision).
            return Ok(Vec::new());
        }
        let entries = self
            .history
            .range(from..=(through_revision, u32::MAX))
            .map_err(db_error(self.file))?;
        let mut chunk = Vec::new();
        for entry in entries.take(COMPACTION_CHUNK_ENTRIES) {
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

    fn discard_superseded(&mut self, entry: &WindowEntry) -> Result<()> {
        let before = entry.revision.saturating_sub(1);
        if let Some(previous) = self.index_entry_at(&entry.key, before)? {
            self.remove_version(&entry.key, previous.revision, previous.position)?;
        }
        if entry.tombstone {
            self.remove_version(&entry.key, entry.revision, entry.position)?;
        }
        Ok(())
    }

    fn remove_version(&mut self, key: &[u8], revision: u64, position: u32) -> Result<()> {
        self.history
            .remove((revision, position))
            .map_err(db_error(self.file))?;
        self.index
            .remove((key, revision))
            .map_err(db_error(self.file))?;
        Ok(())
    }
}
