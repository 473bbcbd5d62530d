//! The hottest conflicting keys of one member: a bounded top-k over a sliding window, in fixed
//! memory, behind `GET /v1/conflicts?top=N`.
//!
//! Prometheus labels stay bounded (key prefixes); this names exact keys. The window is split into
//! `buckets` equal slices, each a space-saving summary (Metwally et al.) of at most `capacity`
//! keys: a key already tracked is counted; a new key takes a free slot, or else replaces the key
//! with the smallest count and starts from that count plus one (so counts may over-estimate by at
//! most the replaced count, and every key hotter than `total / capacity` in a slice is kept). When
//! a slice's time has passed, the oldest slice is cleared and reused, so the window slides in
//! steps of `window / buckets`. Memory is at most `buckets * capacity` entries, whatever the
//! number of distinct keys; each key is at most the store's key limit.
//!
//! Pure data: no HTTP, no clock of its own (callers pass `Instant`s), so tests drive time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many keys, over how long, in how many slices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKeyLimits {
    /// Keys tracked per slice (the top-k summary's size); at least 1.
    pub capacity: usize,
    /// The sliding window; at least one second.
    pub window: Duration,
    /// Slices of the window; at least 1.
    pub buckets: usize,
}

impl Default for HotKeyLimits {
    fn default() -> Self {
        HotKeyLimits {
            capacity: 256,
            window: Duration::from_secs(300),
            buckets: 5,
        }
    }
}

/// What one event on a key was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotKeyEvent {
    /// A conflict counted on the key (any resolution).
    Conflict,
    /// A client retry (`X-Retry-Attempt` >= 1) on the key.
    Retry,
}

/// One key's counts over the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    pub key: Vec<u8>,
    pub conflicts: u64,
    pub retries: u64,
    /// The store revision when the key last conflicted (or was retried).
    pub last_revision: u64,
}

#[derive(Clone, Debug, Default)]
struct Counts {
    conflicts: u64,
    retries: u64,
    last_revision: u64,
}

impl Counts {
    fn weight(&self) -> u64 {
        self.conflicts + self.retries
    }
}

/// One slice of the window: a space-saving summary.
#[derive(Debug)]
struct Slice {
    started: Instant,
    keys: HashMap<Vec<u8>, Counts>,
}

/// The top-k of one member.
#[derive(Debug)]
pub struct HotKeys {
    limits: HotKeyLimits,
    slices: Mutex<Vec<Slice>>,
}

impl HotKeys {
    pub fn new(limits: HotKeyLimits, now: Instant) -> Self {
        let limits = HotKeyLimits {
            capacity: limits.capacity.max(1),
            window: limits.window.max(Duration::from_secs(1)),
            buckets: limits.buckets.max(1),
        };
        let slices = vec![Slice {
            started: now,
            keys: HashMap::with_capacity(limits.capacity),
        }];
        HotKeys {
            limits,
            slices: Mutex::new(slices),
        }
    }

    pub fn window(&self) -> Duration {
        self.limits.window
    }

    fn slice_length(&self) -> Duration {
        self.limits.window / u32::try_from(self.limits.buckets).unwrap_or(u32::MAX)
    }

    /// Counts `count` events of `kind` on `key` at store revision `revision`.
    pub fn record(&self, key: &[u8], kind: HotKeyEvent, count: u64, revision: u64, now: Instant) {
        if count == 0 {
            return;
        }
        let mut slices = self.slices.lock().expect("hot keys lock");
        self.rotate(&mut slices, now);
        let slice = slices.last_mut().expect("there is always a current slice");
        let counts = match slice.keys.get_mut(key) {
            Some(counts) => counts,
            None => self.make_room(slice, key),
        };
        match kind {
            HotKeyEvent::Conflict => counts.conflicts += count,
            HotKeyEvent::Retry => counts.retries += count,
        }
        counts.last_revision = counts.last_revision.max(revision);
        debug_assert!(slice.keys.len() <= self.limits.capacity);
    }

    /// A slot for a key not tracked yet: a free one, or the smallest key's, whose count the new
    /// key inherits (space-saving's over-estimate, which keeps heavy keys from being pushed out).
    fn make_room<'s>(&self, slice: &'s mut Slice, key: &[u8]) -> &'s mut Counts {
        let mut inherited = Counts::default();
        if slice.keys.len() >= self.limits.capacity {
            let smallest = slice
                .keys
                .iter()
                .min_by_key(|(_, counts)| counts.weight())
                .map(|(smallest, _)| smallest.clone())
                .expect("a full slice has keys");
            inherited = slice.keys.remove(&smallest).unwrap_or_default();
            inherited.last_revision = 0;
        }
        slice.keys.entry(key.to_vec()).or_insert(inherited)
    }

    /// Starts a new slice when the current one's time is up, dropping slices older than the
    /// window; at most `buckets` slices are kept.
    fn rotate(&self, slices: &mut Vec<Slice>, now: Instant) {
        let length = self.slice_length();
        let current_start = slices.last().map(|slice| slice.started).unwrap_or(now);
        if now.saturating_duration_since(current_start) < length {
            return;
        }
        slices.retain(|slice| now.saturating_duration_since(slice.started) < self.limits.window);
        while slices.len() >= self.limits.buckets {
            slices.remove(0);
        }
        slices.push(Slice {
            started: now,
            keys: HashMap::with_capacity(self.limits.capacity),
        });
    }

    /// The `top` keys with the most conflicts and retries over the window, hottest first.
    pub fn top(&self, top: usize, now: Instant) -> Vec<HotKey> {
        let slices = self.slices.lock().expect("hot keys lock");
        let mut merged: HashMap<&[u8], Counts> = HashMap::new();
        for slice in slices.iter() {
            if now.saturating_duration_since(slice.started) >= self.limits.window {
                continue;
            }
            for (key, counts) in &slice.keys {
                let total = merged.entry(key.as_slice()).or_default();
                total.conflicts += counts.conflicts;
                total.retries += counts.retries;
                total.last_revision = total.last_revision.max(counts.last_revision);
            }
        }
        let mut hottest: Vec<HotKey> = merged
            .into_iter()
            .map(|(key, counts)| HotKey {
                key: key.to_vec(),
                conflicts: counts.conflicts,
                retries: counts.retries,
                last_revision: counts.last_revision,
            })
            .collect();
        hottest.sort_by(|a, b| {
            (b.conflicts + b.retries)
                .cmp(&(a.conflicts + a.retries))
                .then_with(|| a.key.cmp(&b.key))
        });
        hottest.truncate(top);
        hottest
    }

    /// Entries held now, over every slice: never more than `buckets * capacity`.
    pub fn entries(&self) -> usize {
        let slices = self.slices.lock().expect("hot keys lock");
        slices.iter().map(|slice| slice.keys.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(capacity: usize, window_seconds: u64, buckets: usize) -> HotKeyLimits {
        HotKeyLimits {
            capacity,
            window: Duration::from_secs(window_seconds),
            buckets,
        }
    }

    #[test]
    fn a_million_distinct_keys_never_hold_more_than_the_bound_and_the_hot_ones_stay() {
        let start = Instant::now();
        let hot_keys = HotKeys::new(limits(64, 60, 4), start);
        let mut most_entries = 0;
        for index in 0u64..1_000_000 {
            // Time moves 4 minutes over the run, so every slice fills and rotates many times.
            let now = start + Duration::from_micros(index * 240);
            hot_keys.record(
                format!("cold/{index}").as_bytes(),
                HotKeyEvent::Conflict,
                1,
                index,
                now,
            );
            if index % 10 == 0 {
                hot_keys.record(b"hot/a", HotKeyEvent::Conflict, 1, index, now);
            }
            if index % 20 == 0 {
                hot_keys.record(b"hot/b", HotKeyEvent::Retry, 1, index, now);
            }
            if index % 1000 == 0 {
                most_entries = most_entries.max(hot_keys.entries());
            }
        }
        most_entries = most_entries.max(hot_keys.entries());
        assert!(most_entries <= 4 * 64, "{most_entries} entries");
        let now = start + Duration::from_secs(240);
        let top = hot_keys.top(2, now);
        let names: Vec<&[u8]> = top.iter().map(|hot| hot.key.as_slice()).collect();
        assert_eq!(names, vec![&b"hot/a"[..], &b"hot/b"[..]]);
        assert!(top[0].conflicts >= 1000, "{:?}", top[0]);
        assert!(top[1].retries >= 500, "{:?}", top[1]);
        assert!(top[0].last_revision >= 999_000);
    }

    #[test]
    fn counts_are_exact_below_capacity_and_leave_the_window() {
        let start = Instant::now();
        let hot_keys = HotKeys::new(limits(8, 10, 2), start);
        hot_keys.record(b"a", HotKeyEvent::Conflict, 3, 7, start);
        hot_keys.record(b"b", HotKeyEvent::Retry, 1, 8, start);
        hot_keys.record(
            b"a",
            HotKeyEvent::Retry,
            2,
            9,
            start + Duration::from_secs(6),
        );
        let top = hot_keys.top(10, start + Duration::from_secs(6));
        assert_eq!(
            top[0],
            HotKey {
                key: b"a".to_vec(),
                conflicts: 3,
                retries: 2,
                last_revision: 9
            }
        );
        assert_eq!(top[1].key, b"b");
        // Ten seconds after the first slice began, it has left the window.
        let later = hot_keys.top(10, start + Duration::from_secs(11));
        assert_eq!(later.len(), 1);
        assert_eq!((later[0].conflicts, later[0].retries), (0, 2));
        assert!(hot_keys.top(10, start + Duration::from_secs(30)).is_empty());
    }

    #[test]
    fn a_full_slice_replaces_its_smallest_key_which_passes_on_its_count() {
        let start = Instant::now();
        let hot_keys = HotKeys::new(limits(2, 60, 1), start);
        hot_keys.record(b"heavy", HotKeyEvent::Conflict, 5, 1, start);
        hot_keys.record(b"light", HotKeyEvent::Conflict, 1, 2, start);
        hot_keys.record(b"new", HotKeyEvent::Conflict, 1, 3, start);
        let top = hot_keys.top(10, start);
        assert_eq!(hot_keys.entries(), 2);
        assert_eq!(top[0].key, b"heavy");
        assert_eq!((top[1].key.as_slice(), top[1].conflicts), (&b"new"[..], 2));
    }
}
