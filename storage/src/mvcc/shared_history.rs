//! The history table of one read transaction, as a value many reads can hold at once: what
//! lets the reads between two commits share one snapshot (`read_snapshot.rs`). redb's
//! `ReadOnlyTable` cannot be cloned, so the opened table sits behind a reference count and this
//! type lends redb's `ReadableTable` methods through it.

use std::sync::Arc;

use redb::{
    AccessGuard, ReadOnlyTable, ReadableTable, ReadableTableMetadata, Result as RedbResult,
    TableStats,
};

/// The history table's key and value types (`tables::HISTORY`).
type HistoryKey = (u64, u32);
type HistoryValue = &'static [u8];

/// The history table of one read transaction, shareable between reads: a pointer to the opened
/// table, whose transaction stays alive while any read holds it.
#[derive(Clone)]
pub(crate) struct SharedHistory(Arc<ReadOnlyTable<HistoryKey, HistoryValue>>);

impl SharedHistory {
    pub fn new(table: ReadOnlyTable<HistoryKey, HistoryValue>) -> Self {
        SharedHistory(Arc::new(table))
    }

    /// Whether both are the same opened table, so the same snapshot (for tests).
    #[cfg(test)]
    pub fn is_same_table(&self, other: &SharedHistory) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ReadableTableMetadata for SharedHistory {
    fn stats(&self) -> RedbResult<TableStats> {
        self.0.stats()
    }

    fn len(&self) -> RedbResult<u64> {
        self.0.len()
    }
}

impl ReadableTable<HistoryKey, HistoryValue> for SharedHistory {
    fn get<'a>(
        &self,
        key: impl std::borrow::Borrow<<HistoryKey as redb::Value>::SelfType<'a>>,
    ) -> RedbResult<Option<AccessGuard<'_, HistoryValue>>> {
        self.0.get(key)
    }

    fn range<'a, KR>(
        &self,
        range: impl std::ops::RangeBounds<KR> + 'a,
    ) -> RedbResult<redb::Range<'_, HistoryKey, HistoryValue>>
    where
        KR: std::borrow::Borrow<<HistoryKey as redb::Value>::SelfType<'a>> + 'a,
    {
        self.0.range(range)
    }

    fn first(
        &self,
    ) -> RedbResult<Option<(AccessGuard<'_, HistoryKey>, AccessGuard<'_, HistoryValue>)>> {
        self.0.first()
    }

    fn last(
        &self,
    ) -> RedbResult<Option<(AccessGuard<'_, HistoryKey>, AccessGuard<'_, HistoryValue>)>> {
        self.0.last()
    }
}
