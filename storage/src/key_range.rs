//! Key ranges: one key, `[start, end)`, or every key from a start on, as requests, watches and auth
//! permissions name them. A file of its own, and the types' module re-exports it, so the auth
//! model, which needs ranges but not requests, imports no request type.

use serde::{Deserialize, Serialize};

/// Where a key range ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RangeEnd {
    /// Only the start key itself.
    Single,
    /// Every key `>= start` and `< end`.
    Until(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Every key `>= start` (etcd's `range_end = "\0"`).
    Unbounded,
}

/// A set of keys: one key, `[start, end)`, or everything from `start` on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    #[serde(with = "serde_bytes")]
    pub start: Vec<u8>,
    pub end: RangeEnd,
}

impl KeyRange {
    /// Exactly one key.
    pub fn single(key: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: key.into(),
            end: RangeEnd::Single,
        }
    }

    /// Every key that starts with `prefix`. An empty prefix means every key.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let start = prefix.into();
        let end = match prefix_end(&start) {
            Some(end) => RangeEnd::Until(end),
            None => RangeEnd::Unbounded,
        };
        KeyRange { start, end }
    }

    /// Every key in `[start, end)`.
    pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: RangeEnd::Until(end.into()),
        }
    }

    /// True when `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            RangeEnd::Single => key == self.start.as_slice(),
            RangeEnd::Until(end) => key >= self.start.as_slice() && key < end.as_slice(),
            RangeEnd::Unbounded => key >= self.start.as_slice(),
        }
    }

    /// The exclusive upper bound as bytes, or `None` when the range is unbounded above.
    pub fn exclusive_end(&self) -> Option<Vec<u8>> {
        match &self.end {
            RangeEnd::Single => Some(key_successor(&self.start)),
            RangeEnd::Until(end) => Some(end.clone()),
            RangeEnd::Unbounded => None,
        }
    }

    /// True when two ranges share at least one key.
    pub fn overlaps(&self, other: &KeyRange) -> bool {
        let starts_before_other_ends = match other.exclusive_end() {
            Some(end) => self.start < end,
            None => true,
        };
        let other_starts_before_self_ends = match self.exclusive_end() {
            Some(end) => other.start < end,
            None => true,
        };
        starts_before_other_ends && other_starts_before_self_ends
    }
}

/// The smallest key greater than `key` (the key followed by a zero byte).
pub fn key_successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// The first key after every key starting with `prefix`, or `None` when no such key exists
/// (an empty prefix or one made only of 0xff bytes), following etcd's `GetPrefixRangeEnd`.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
