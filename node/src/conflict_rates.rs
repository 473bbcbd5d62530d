//! Conflicts and client retries per interval over the last minutes, of one member: the history
//! behind the web console's Conflicts chart and `GET /v1/conflicts/rates`. Prometheus keeps such
//! history for whoever runs one; this keeps a short one in every member, so the console can draw
//! the last minutes the moment it opens, with nothing else installed.
//!
//! Fixed memory: a ring of `intervals` counters, each covering `interval` of wall-clock time,
//! numbered by the Unix time it starts at, so every member's intervals line up. An event counts in
//! the interval of its time; a clock that steps back counts into the newest interval rather than
//! rewrite history or panic.
//!
//! Pure data: no HTTP, no clock of its own (callers pass Unix seconds), so tests drive time.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::hot_keys::HotKeyEvent;

/// How long each interval is, and how many are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConflictRateLimits {
    /// Seconds per interval; at least 1.
    pub interval_seconds: u64,
    /// Intervals kept; at least 1.
    pub intervals: usize,
}

impl Default for ConflictRateLimits {
    /// Ten minutes in five-second steps: fine enough to see a storm start, 120 points per chart.
    fn default() -> Self {
        ConflictRateLimits {
            interval_seconds: 5,
            intervals: 120,
        }
    }
}

/// The counts of one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConflictInterval {
    /// The Unix time the interval starts at, a multiple of the interval's length.
    pub start_unix_seconds: u64,
    pub conflicts: u64,
    pub retries: u64,
}

/// The ring of one member.
#[derive(Debug)]
pub struct ConflictRates {
    limits: ConflictRateLimits,
    /// Oldest first; only intervals that had an event, at most `limits.intervals` of them.
    counted: Mutex<VecDeque<ConflictInterval>>,
}

impl ConflictRates {
    pub fn new(limits: ConflictRateLimits) -> Self {
        let limits = ConflictRateLimits {
            interval_seconds: limits.interval_seconds.max(1),
            intervals: limits.intervals.max(1),
        };
        ConflictRates {
            limits,
            counted: Mutex::new(VecDeque::with_capacity(limits.intervals)),
        }
    }

    pub fn limits(&self) -> ConflictRateLimits {
        self.limits
    }

    fn interval_start(&self, unix_seconds: u64) -> u64 {
        unix_seconds - unix_seconds % self.limits.interval_seconds
    }

    /// Counts `count` events of `kind` at `unix_seconds`.
    pub fn record(&self, kind: HotKeyEvent, count: u64, unix_seconds: u64) {
        if count == 0 {
            return;
        }
        let start = self.interval_start(unix_seconds);
        let mut counted = self.counted.lock().expect("conflict rates lock");
        let newest_start = counted.back().map(|newest| newest.start_unix_seconds);
        if newest_start.is_none_or(|newest| start > newest) {
            if counted.len() == self.limits.intervals {
                counted.pop_front();
            }
            counted.push_back(ConflictInterval {
                start_unix_seconds: start,
                ..ConflictInterval::default()
            });
        }
        let interval = counted.back_mut().expect("an interval was just ensured");
        match kind {
            HotKeyEvent::Conflict => interval.conflicts += count,
            HotKeyEvent::Retry => interval.retries += count,
        }
        debug_assert!(counted.len() <= self.limits.intervals);
    }

    /// Every interval of the last `intervals` up to and including the one holding `unix_seconds`,
    /// oldest first, with zeros where nothing happened: always `intervals` entries.
    pub fn history(&self, unix_seconds: u64) -> Vec<ConflictInterval> {
        let step = self.limits.interval_seconds;
        let newest = self.interval_start(unix_seconds);
        let span = step * (self.limits.intervals as u64 - 1);
        let oldest = newest.saturating_sub(span);
        let counted = self.counted.lock().expect("conflict rates lock");
        let mut history: Vec<ConflictInterval> = (0..self.limits.intervals as u64)
            .map(|position| ConflictInterval {
                start_unix_seconds: oldest + position * step,
                ..ConflictInterval::default()
            })
            .take_while(|interval| interval.start_unix_seconds <= newest)
            .collect();
        for interval in counted.iter() {
            let Some(offset) = interval.start_unix_seconds.checked_sub(oldest) else {
                continue;
            };
            if let Some(slot) = history.get_mut((offset / step) as usize) {
                slot.conflicts += interval.conflicts;
                slot.retries += interval.retries;
            }
        }
        history
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(interval_seconds: u64, intervals: usize) -> ConflictRates {
        ConflictRates::new(ConflictRateLimits {
            interval_seconds,
            intervals,
        })
    }

    #[test]
    fn events_land_in_the_interval_of_their_time() {
        let rates = rates(5, 4);
        rates.record(HotKeyEvent::Conflict, 2, 1_000);
        rates.record(HotKeyEvent::Retry, 1, 1_004);
        rates.record(HotKeyEvent::Conflict, 3, 1_010);
        let history = rates.history(1_012);
        let starts: Vec<u64> = history.iter().map(|i| i.start_unix_seconds).collect();
        assert_eq!(starts, vec![995, 1_000, 1_005, 1_010]);
        let counts: Vec<(u64, u64)> = history.iter().map(|i| (i.conflicts, i.retries)).collect();
        assert_eq!(counts, vec![(0, 0), (2, 1), (0, 0), (3, 0)]);
    }

    #[test]
    fn old_intervals_leave_the_ring_and_memory_stays_bounded() {
        let rates = rates(1, 3);
        for second in 0..100 {
            rates.record(HotKeyEvent::Conflict, 1, second);
        }
        assert_eq!(rates.counted.lock().unwrap().len(), 3);
        let history = rates.history(99);
        assert_eq!(history.len(), 3);
        assert!(history.iter().all(|interval| interval.conflicts == 1));
        // Long after, every interval in view is empty.
        assert!(rates.history(1_000).iter().all(|i| i.conflicts == 0));
    }

    #[test]
    fn a_clock_that_steps_back_counts_into_the_newest_interval() {
        let rates = rates(10, 6);
        rates.record(HotKeyEvent::Conflict, 1, 500);
        rates.record(HotKeyEvent::Conflict, 1, 100);
        let history = rates.history(505);
        assert_eq!(history.last().unwrap().start_unix_seconds, 500);
        assert_eq!(history.last().unwrap().conflicts, 2);
        assert_eq!(history.iter().map(|i| i.conflicts).sum::<u64>(), 2);
    }

    #[test]
    fn history_near_the_epoch_is_shorter_rather_than_wrong() {
        let rates = rates(5, 10);
        rates.record(HotKeyEvent::Retry, 4, 7);
        let history = rates.history(7);
        assert_eq!(history.first().unwrap().start_unix_seconds, 0);
        assert_eq!(history.last().unwrap().start_unix_seconds, 5);
        assert_eq!(history.last().unwrap().retries, 4);
    }
}
