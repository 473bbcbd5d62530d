//! One key's history: every version (and tombstone) of a key from a revision on, oldest first, in
//! pages. The key index holds each key's versions together, so a page is one lookup of the key
//! plus one history lookup per version returned: the cost follows the versions returned, not the
//! size of the store or of other keys' histories.

use crate::error::{ReadError, StorageFailure};
use crate::mvcc::key_index::IndexEntry;
use crate::mvcc::MvccStore;
use crate::types::{KeyHistory, KeyValue, KeyVersion};

impl MvccStore {
    /// The versions of `key` with mod revision `>= from_revision` (at most `limit`, which must be
    /// between 1 and the range limit), oldest first. Without `from_revision`, from the oldest
    /// revision still kept (the compact revision).
    ///
    /// History below the compact revision is incomplete (superseded versions and tombstones there
    /// are gone), so `from_revision` must be at or above it; otherwise the answer is `Compacted`.
    /// At the compact revision itself a put remains and a delete is gone, as for a watch.
    pub fn key_history(
        &self,
        key: &[u8],
        from_revision: Option<u64>,
        limit: u64,
    ) -> Result<KeyHistory, ReadError> {
        self.limits().check_key(key)?;
        let most = self.limits().max_range_keys;
        if limit == 0 || limit > most {
            return Err(ReadError::Invalid(format!(
                "a history page holds 1 to {most} versions, not {limit}"
            )));
        }
        let (tables, state) = self.read_tables()?;
        let from_revision = from_revision.unwrap_or(state.compact_revision.max(1));
        if from_revision == 0 || from_revision < state.compact_revision {
            return Err(ReadError::Compacted {
                requested: from_revision,
                compact_revision: state.compact_revision,
            });
        }
        // A version above the compact revision is never compacted away, so the index answers for
        // this read unless compaction passed `from_revision - 1` (or, from the compact revision
        // itself, moved further). One more than a page, to tell whether a next page exists, and
        // from the compact revision one more again, for its tombstone, which is skipped below.
        let at_compact_revision = from_revision == state.compact_revision;
        let wanted = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_add(1 + usize::from(at_compact_revision));
        let guard_revision = (from_revision - 1).max(state.compact_revision);
        let entries = tables.index.read_at(guard_revision)?.versions_between(
            key,
            (from_revision, state.current_revision),
            wanted,
        );
        let index_entries_visited = entries.len();
        // A delete at the compact revision is compacted away even while cleaning is pending.
        let entries = entries
            .into_iter()
            .filter(|entry| !(entry.tombstone && entry.revision <= state.compact_revision));
        let mut versions = Vec::new();
        let mut next_from_revision = None;
        for entry in entries {
            if versions.len() as u64 == limit {
                next_from_revision = Some(entry.revision);
                break;
            }
            versions.push(version_of(&tables, key, &entry)?);
        }
        Ok(KeyHistory {
            revision: state.current_revision,
            versions,
            next_from_revision,
            index_entries_visited,
        })
    }
}

fn version_of<H>(
    tables: &crate::mvcc::tables::TableSet<'_, H>,
    key: &[u8],
    entry: &IndexEntry,
) -> Result<KeyVersion, StorageFailure>
where
    H: crate::mvcc::tables::HistoryTable,
{
    if entry.tombstone {
        let kv = KeyValue {
            key: key.to_vec(),
            value: Vec::new(),
            create_revision: 0,
            mod_revision: entry.revision,
            version: 0,
            lease: 0,
        };
        return Ok(KeyVersion { kv, deleted: true });
    }
    let record = tables.history_get(entry.revision, entry.position)?;
    let mut kv = entry.kv_without_value(key);
    kv.value = record.value;
    Ok(KeyVersion { kv, deleted: false })
}
