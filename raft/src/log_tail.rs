//! The in-memory tail of the raft log: the most recent entries, readable before they are durable.
//!
//! openraft replicates an entry as soon as the log storage's `append` returns, so the entry must be
//! readable from then on, while its fsync is still under way on the writer thread. The tail holds
//! every entry that is not durable yet, plus the most recent durable ones up to a bound in entries
//! and bytes, so the leader's replication reads recent entries from memory instead of decoding
//! them from the file again.
//!
//! Invariants, asserted on every change: the entries are contiguous by index; every entry above
//! `durable_through` is in the tail (only durable entries are evicted), so any index below the
//! tail's first entry is durable in the file.

use std::collections::VecDeque;

use crate::types::alias::{Entry, LogId};

/// How much of the durable log the tail keeps in memory for replication reads.
#[derive(Clone, Copy, Debug)]
pub struct TailLimits {
    /// Durable entries kept, at most (entries not yet durable are always kept).
    pub max_entries: usize,
    /// Encoded bytes of durable entries kept, at most.
    pub max_bytes: usize,
}

impl Default for TailLimits {
    fn default() -> Self {
        TailLimits {
            max_entries: 4096,
            max_bytes: 32 * 1024 * 1024,
        }
    }
}

/// A handle that reads how many bytes of entries the tail holds now, for the member's memory
/// metrics (`revkv_memory_bytes{part="raft_log_tail"}`). Reading takes the tail's lock briefly.
#[derive(Clone)]
pub struct LogTailSize {
    tail: std::sync::Arc<std::sync::Mutex<LogTail>>,
}

impl LogTailSize {
    pub(crate) fn new(tail: std::sync::Arc<std::sync::Mutex<LogTail>>) -> Self {
        LogTailSize { tail }
    }

    /// Encoded bytes of the entries held now: every entry not yet durable, and the recent
    /// durable ones within [`TailLimits::max_bytes`].
    pub fn bytes(&self) -> u64 {
        let tail = self
            .tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tail.bytes as u64
    }

    /// The bound on the durable entries' bytes ([`TailLimits::max_bytes`]).
    pub fn limit_bytes(&self) -> u64 {
        let tail = self
            .tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tail.limits.max_bytes as u64
    }
}

/// One entry and the size of its encoding, which is what the byte bound counts.
struct TailEntry {
    entry: Entry,
    encoded_bytes: usize,
}

/// The recent entries. See the module documentation.
pub(crate) struct LogTail {
    entries: VecDeque<TailEntry>,
    bytes: usize,
    /// The highest index known to be durable in the file (`None`: nothing known durable).
    durable_through: Option<u64>,
    limits: TailLimits,
}

/// Why an append cannot extend the tail.
#[derive(Debug, thiserror::Error)]
#[error("log append at index {appended}, but the log continues at {expected}")]
pub(crate) struct NotContiguous {
    pub appended: u64,
    pub expected: u64,
}

impl LogTail {
    pub(crate) fn new(limits: TailLimits, durable_through: Option<u64>) -> Self {
        LogTail {
            entries: VecDeque::new(),
            bytes: 0,
            durable_through,
            limits,
        }
    }

    /// The index of the first entry held, if any.
    pub(crate) fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|held| held.entry.log_id.index)
    }

    /// The log id of the last entry held, if any.
    pub(crate) fn last_log_id(&self) -> Option<LogId> {
        self.entries.back().map(|held| held.entry.log_id)
    }

    /// The highest index the file holds durably, or covers by a purge.
    pub(crate) fn durable_through(&self) -> Option<u64> {
        self.durable_through
    }

    /// Adds an entry after the last one held. An empty tail accepts any index: the writer checks
    /// that it continues the file.
    pub(crate) fn push(&mut self, entry: Entry, encoded_bytes: usize) -> Result<(), NotContiguous> {
        if let Some(last) = self.last_log_id() {
            let expected = last.index + 1;
            if entry.log_id.index != expected {
                return Err(NotContiguous {
                    appended: entry.log_id.index,
                    expected,
                });
            }
        }
        self.bytes += encoded_bytes;
        self.entries.push_back(TailEntry {
            entry,
            encoded_bytes,
        });
        Ok(())
    }

    /// Adds the entries of one append, all or none: a gap anywhere leaves the tail as it was, so
    /// the tail never holds an entry that was not handed to the writer.
    pub(crate) fn push_all(&mut self, entries: Vec<(Entry, usize)>) -> Result<(), NotContiguous> {
        let mut expected = self.last_log_id().map(|last| last.index + 1);
        for (entry, _) in &entries {
            let appended = entry.log_id.index;
            if let Some(expected) = expected.filter(|expected| *expected != appended) {
                return Err(NotContiguous { appended, expected });
            }
            expected = Some(appended + 1);
        }
        for (entry, encoded_bytes) in entries {
            self.push(entry, encoded_bytes)
                .expect("the batch was checked to continue the tail");
        }
        Ok(())
    }

    /// Clones of the held entries with index in `start..end`, in order.
    pub(crate) fn entries_in(&self, start: u64, end: u64) -> Vec<Entry> {
        let Some(first) = self.first_index() else {
            return Vec::new();
        };
        let skip = start.saturating_sub(first) as usize;
        let take = end.saturating_sub(start.max(first)) as usize;
        self.entries
            .iter()
            .skip(skip)
            .take(take)
            .map(|held| held.entry.clone())
            .collect()
    }

    /// Forgets every entry after `index` (every entry when `None`).
    pub(crate) fn truncate_after(&mut self, index: Option<u64>) {
        while let Some(last) = self.entries.back() {
            if index.is_some_and(|index| last.entry.log_id.index <= index) {
                break;
            }
            let removed = self.entries.pop_back().expect("the tail has a last entry");
            self.bytes -= removed.encoded_bytes;
        }
        if let (Some(durable), Some(index)) = (self.durable_through, index) {
            self.durable_through = Some(durable.min(index));
        } else if index.is_none() {
            self.durable_through = None;
        }
    }

    /// Forgets every entry at or below `index` (purged from the log, so covered durably).
    pub(crate) fn purge_through(&mut self, index: u64) {
        self.durable_through = Some(self.durable_through.map_or(index, |old| old.max(index)));
        while self
            .entries
            .front()
            .is_some_and(|first| first.entry.log_id.index <= index)
        {
            let removed = self
                .entries
                .pop_front()
                .expect("the tail has a first entry");
            self.bytes -= removed.encoded_bytes;
        }
    }

    /// Records that the file holds every entry through `index` durably, then evicts the oldest
    /// durable entries beyond the limits.
    pub(crate) fn mark_durable(&mut self, index: u64) {
        assert!(
            self.last_log_id().is_none_or(|last| last.index >= index),
            "entry {index} made durable without being appended"
        );
        self.durable_through = Some(self.durable_through.map_or(index, |old| old.max(index)));
        while self.entries.len() > self.limits.max_entries || self.bytes > self.limits.max_bytes {
            let Some(first) = self.entries.front() else {
                break;
            };
            if self
                .durable_through
                .is_none_or(|durable| first.entry.log_id.index > durable)
            {
                break;
            }
            let removed = self
                .entries
                .pop_front()
                .expect("the tail has a first entry");
            self.bytes -= removed.encoded_bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::alias::LeaderId;
    use openraft::entry::RaftEntry;

    fn entry(index: u64) -> Entry {
        Entry::new_blank(LogId::new(
            LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        ))
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|entry| entry.log_id.index).collect()
    }

    #[test]
    fn entries_stay_until_durable_then_the_oldest_beyond_the_limit_go() {
        let limits = TailLimits {
            max_entries: 2,
            max_bytes: usize::MAX,
        };
        let mut tail = LogTail::new(limits, None);
        for index in 1..=5 {
            tail.push(entry(index), 10).unwrap();
        }
        // Nothing is durable yet: all five stay although the limit is two.
        assert_eq!(indexes(&tail.entries_in(0, 100)), vec![1, 2, 3, 4, 5]);
        tail.mark_durable(3);
        // 1..=3 are durable; evicting stops at the first entry that is not.
        assert_eq!(indexes(&tail.entries_in(0, 100)), vec![4, 5]);
        assert_eq!(indexes(&tail.entries_in(5, 6)), vec![5]);
        assert!(tail.entries_in(1, 4).is_empty());
    }

    #[test]
    fn the_byte_bound_evicts_too() {
        let limits = TailLimits {
            max_entries: 100,
            max_bytes: 25,
        };
        let mut tail = LogTail::new(limits, None);
        for index in 1..=4 {
            tail.push(entry(index), 10).unwrap();
        }
        tail.mark_durable(4);
        assert_eq!(indexes(&tail.entries_in(0, 100)), vec![3, 4]);
    }

    #[test]
    fn a_gap_or_an_overwrite_is_refused() {
        let mut tail = LogTail::new(TailLimits::default(), None);
        tail.push(entry(7), 1).unwrap();
        assert!(tail.push(entry(9), 1).is_err());
        assert!(tail.push(entry(7), 1).is_err());
        tail.push(entry(8), 1).unwrap();
        // A batch with a gap in its middle adds nothing.
        assert!(tail.push_all(vec![(entry(9), 1), (entry(11), 1)]).is_err());
        assert_eq!(tail.last_log_id().map(|id| id.index), Some(8));
        tail.push_all(vec![(entry(9), 1), (entry(10), 1)]).unwrap();
        assert_eq!(tail.last_log_id().map(|id| id.index), Some(10));
    }

    #[test]
    fn truncation_and_purge_cut_both_ends() {
        let mut tail = LogTail::new(TailLimits::default(), None);
        for index in 1..=6 {
            tail.push(entry(index), 1).unwrap();
        }
        tail.mark_durable(6);
        tail.truncate_after(Some(4));
        assert_eq!(tail.last_log_id().map(|id| id.index), Some(4));
        tail.push(entry(5), 1).unwrap();
        tail.purge_through(2);
        assert_eq!(indexes(&tail.entries_in(0, 100)), vec![3, 4, 5]);
        tail.truncate_after(None);
        assert!(tail.first_index().is_none());
        tail.push(entry(42), 1).unwrap();
    }
}
