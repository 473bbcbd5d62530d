//! Range reads at the current revision (from `live`) or at a past one (through `key_index`).
//!
//! Both paths visit keys in order and count every key in the range, as etcd does, but decode only the
//! key-values that will be returned. A continuation page already knows its count (the first page
//! counted the range at the same revision and the token carries what was left), so it stops after
//! its `limit` keys: paging through a range costs one count plus one read of it, not a recount of
//! the rest of the range per page.

use std::ops::Bound;

use crate::error::{db_error, Result};
use crate::mvcc::tables::{version_to_kv, HistoryTable, IndexTable, LiveTable, TableSet};
use crate::types::{key_successor, KeyValue, RangeResponse};

/// A range read with every option resolved: which keys, at which revision, how many to return.
#[derive(Clone, Debug)]
pub(crate) struct ResolvedRange {
    pub start: Vec<u8>,
    /// Exclusive upper bound; `None` is unbounded.
    pub end: Option<Vec<u8>>,
    pub revision: u64,
    /// True when `revision` is the store's current revision, so the live table answers.
    pub at_current: bool,
    pub limit: u64,
    pub keys_only: bool,
    pub count_only: bool,
    /// The number of keys from `start` to the end of the range at `revision`, when a continue
    /// token carried it; the scan then stops after `limit` keys instead of counting.
    pub known_count: Option<u64>,
}

impl ResolvedRange {
    fn is_empty(&self) -> bool {
        matches!(&self.end, Some(end) if self.start >= *end)
    }
}

/// Counts every key offered and keeps the first `limit` key-values.
struct Collector<'r> {
    range: &'r ResolvedRange,
    count: u64,
    kvs: Vec<KeyValue>,
}

impl Collector<'_> {
    fn wants_value(&self) -> bool {
        !self.range.count_only && (self.kvs.len() as u64) < self.range.limit
    }

    /// True once nothing more is needed: the page is full and the count is already known.
    fn is_done(&self) -> bool {
        self.range.known_count.is_some() && !self.wants_value()
    }

    fn offer(&mut self, make: impl FnOnce() -> Result<KeyValue>) -> Result<()> {
        self.count += 1;
        if self.wants_value() {
            let mut kv = make()?;
            if self.range.keys_only {
                kv.value = Vec::new();
            }
            self.kvs.push(kv);
        }
        Ok(())
    }

    fn finish(self) -> RangeResponse {
        // A count from a token is trusted only as far as it is consistent with what was read.
        let count = match self.range.known_count {
            Some(known) => known.max(self.count),
            None => self.count,
        };
        let more = !self.range.count_only && count > self.kvs.len() as u64;
        RangeResponse {
            kvs: self.kvs,
            count,
            more,
            continue_token: None,
        }
    }
}

impl<L: LiveTable, H: HistoryTable, I: IndexTable> TableSet<'_, L, H, I> {
    /// Reads a resolved range. The answer has no continue token; the caller adds one.
    pub fn read_range(&self, range: &ResolvedRange) -> Result<RangeResponse> {
        let mut collector = Collector {
            range,
            count: 0,
            kvs: Vec::new(),
        };
        if !range.is_empty() {
            if range.at_current {
                self.scan_live(range, &mut collector)?;
            } else {
                self.scan_history(range, &mut collector)?;
            }
        }
        Ok(collector.finish())
    }

    fn scan_live(&self, range: &ResolvedRange, collector: &mut Collector<'_>) -> Result<()> {
        let upper = match &range.end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        let entries = self
            .live
            .range::<&[u8]>((Bound::Included(range.start.as_slice()), upper))
            .map_err(db_error(self.file))?;
        for entry in entries {
            if collector.is_done() {
                break;
            }
            let (key, value) = entry.map_err(db_error(self.file))?;
            collector.offer(|| self.decode_live(key.value(), value.value()))?;
        }
        Ok(())
    }

    fn scan_history(&self, range: &ResolvedRange, collector: &mut Collector<'_>) -> Result<()> {
        let mut cursor = range.start.clone();
        while let Some(key) = self.next_indexed_key(&cursor, range.end.as_deref())? {
            if collector.is_done() {
                break;
            }
            let visible = self.index_entry_before(&key, range.revision.saturating_add(1))?;
            if let Some(entry) = visible.filter(|entry| !entry.tombstone) {
                collector.offer(|| {
                    let record = self.history_get(entry.revision, entry.position)?;
                    Ok(version_to_kv(record, entry.revision))
                })?;
            }
            cursor = key_successor(&key);
        }
        Ok(())
    }
}
