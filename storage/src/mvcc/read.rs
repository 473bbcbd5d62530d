//! Range reads at the current or a past revision, through the key index.
//!
//! A read visits the keys in order and counts every key live in the range, as etcd does, but reads
//! values from history only for the key-values it returns (and none for keys-only or count-only
//! reads); the keys past the page are only counted, by a walk of the index that copies nothing
//! (`KeyIndex::count_live_chunk`). A continuation page already knows its count (the first page
//! counted the range at the same revision and the token carries what was left), so it stops after
//! its `limit` keys: paging through a range costs one count plus one read of it, not a recount of
//! the rest of the range per page.

use crate::error::{ReadError, StorageFailure};
use crate::mvcc::tables::{HistoryTable, TableSet};
use crate::types::{KeyValue, RangeResponse};

/// A range read with every option resolved: which keys, at which revision, how many to return.
#[derive(Clone, Debug)]
pub(crate) struct ResolvedRange {
    pub start: Vec<u8>,
    /// Exclusive upper bound; `None` is unbounded.
    pub end: Option<Vec<u8>>,
    pub revision: u64,
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

/// Keeps the first `limit` key-values of the range and counts the keys offered.
struct Collector<'r> {
    range: &'r ResolvedRange,
    count: u64,
    kvs: Vec<KeyValue>,
}

impl Collector<'_> {
    fn wants_value(&self) -> bool {
        !self.range.count_only && (self.kvs.len() as u64) < self.range.limit
    }

    fn offer(
        &mut self,
        make: impl FnOnce() -> Result<KeyValue, StorageFailure>,
    ) -> Result<(), StorageFailure> {
        self.count += 1;
        let mut kv = make()?;
        if self.range.keys_only {
            kv.value = Vec::new();
        }
        self.kvs.push(kv);
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

impl<H: HistoryTable> TableSet<'_, H> {
    /// Reads a resolved range. The answer has no continue token; the caller adds one.
    ///
    /// Two walks of the key index: the first collects the page (up to `limit` key-values), the
    /// second counts the rest of the range without copying a key, unless a continue token
    /// already carried the count.
    pub fn read_range(&self, range: &ResolvedRange) -> Result<RangeResponse, ReadError> {
        let mut collector = Collector {
            range,
            count: 0,
            kvs: Vec::new(),
        };
        if range.is_empty() {
            return Ok(collector.finish());
        }
        let end = range.end.as_deref();
        // Where the page ended with keys left in the range to count; the whole range when no
        // key-value is wanted.
        let mut rest_from = None;
        if !collector.wants_value() {
            rest_from = Some(range.start.clone());
        } else {
            let with_values = !range.keys_only;
            self.visit_live_at(&range.start, end, range.revision, &mut |key, entry| {
                if !collector.wants_value() {
                    rest_from = Some(key.to_vec());
                    return Ok(false);
                }
                collector.offer(|| self.kv_for_entry(key, &entry, with_values))?;
                Ok(true)
            })?;
        }
        if let (Some(from), None) = (rest_from, range.known_count) {
            collector.count += self.count_live_in(&from, end, range.revision)?;
        }
        Ok(collector.finish())
    }
}
