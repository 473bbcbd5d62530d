//! Adaptive backoff for retry-on-conflict (issue 17, after the design notes' `ConflictResolver`):
//! the delay before a retry follows how often *this key* has conflicted lately, in this process.
//!
//! - A key that rarely conflicts is retried at once on its first conflict: someone just wrote it,
//!   and a fresh read will most likely win.
//! - A hot key's retries wait longer the hotter it is, and with full jitter (a uniform draw over
//!   the whole window), so contenders spread out instead of colliding again in step, as they do
//!   with client-go's 10 % jitter.
//!
//! Hotness is a count of the key's recent conflicts that halves every `half_life`
//! ([`ConflictHistory`]); the window grows with its logarithm, because the useful spread grows
//! with the number of contenders, which the conflict count overstates as they collide. The
//! history keeps at most `capacity` keys, forgetting the coldest when a new key arrives, so its
//! memory is fixed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Below this hotness a key counts as cold: its first retry does not wait.
const COLD_HOTNESS: f64 = 2.0;

/// The settings of an adaptive backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveBackoff {
    /// The window of a hot key's first retry before hotness scales it.
    pub base: Duration,
    /// The longest window, whatever the hotness and the attempt.
    pub cap: Duration,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// How fast a key's hotness fades: it halves every this long.
    pub half_life: Duration,
}

/// The defaults: the attempts of client-go's `DefaultRetry` (5), windows from 10 ms up to 250 ms
/// (client-go's `DefaultBackoff` waits 250 ms at most too; a 1 s cap measured a p99 of 800 ms on
/// one hot counter, docs/BENCHMARKS.md).
pub const DEFAULT_ADAPTIVE_BACKOFF: AdaptiveBackoff = AdaptiveBackoff {
    base: Duration::from_millis(10),
    cap: Duration::from_millis(250),
    max_attempts: 5,
    half_life: Duration::from_secs(5),
};

impl AdaptiveBackoff {
    /// The delay before retry number `retry` (1 for the first) of a key as hot as `hotness`, with
    /// `random` in `[0, 1)` standing for the draw.
    pub fn delay(&self, hotness: f64, retry: u32, random: f64) -> Duration {
        assert!(
            retry >= 1,
            "a delay comes before a retry, not the first attempt"
        );
        if hotness < COLD_HOTNESS && retry == 1 {
            return Duration::ZERO;
        }
        let growth = 2f64.powi(i32::try_from(retry - 1).unwrap_or(i32::MAX));
        let scale = 1.0 + hotness.max(0.0).ln_1p();
        let window = self.base.as_secs_f64() * growth * scale;
        let window = Duration::from_secs_f64(window.min(self.cap.as_secs_f64()));
        window.mul_f64(random.clamp(0.0, 1.0))
    }
}

/// Recent conflicts per key, fading with time, for at most `capacity` keys.
#[derive(Debug)]
pub struct ConflictHistory {
    half_life: Duration,
    capacity: usize,
    keys: Mutex<HashMap<String, Hotness>>,
}

#[derive(Debug, Clone, Copy)]
struct Hotness {
    value: f64,
    at: Instant,
}

impl Hotness {
    fn faded(self, now: Instant, half_life: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.value * 0.5f64.powf(elapsed / half_life.as_secs_f64())
    }
}

impl ConflictHistory {
    /// An empty history; `capacity` and `half_life` must be positive.
    pub fn new(capacity: usize, half_life: Duration) -> ConflictHistory {
        assert!(
            capacity > 0 && !half_life.is_zero(),
            "an empty history bound"
        );
        ConflictHistory {
            half_life,
            capacity,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// The key's hotness at `now` (0 for a key not remembered).
    pub fn hotness(&self, key: &str, now: Instant) -> f64 {
        let keys = self.keys.lock().expect("never poisoned");
        keys.get(key)
            .map_or(0.0, |hotness| hotness.faded(now, self.half_life))
    }

    /// Counts one conflict on `key` at `now`.
    pub fn record_conflict(&self, key: &str, now: Instant) {
        let mut keys = self.keys.lock().expect("never poisoned");
        if let Some(hotness) = keys.get_mut(key) {
            *hotness = Hotness {
                value: hotness.faded(now, self.half_life) + 1.0,
                at: now,
            };
            return;
        }
        if keys.len() >= self.capacity {
            self.forget_coldest(&mut keys, now);
        }
        keys.insert(
            key.to_owned(),
            Hotness {
                value: 1.0,
                at: now,
            },
        );
        assert!(keys.len() <= self.capacity, "the history stays bounded");
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.keys.lock().expect("never poisoned").len()
    }

    /// True when no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn forget_coldest(&self, keys: &mut HashMap<String, Hotness>, now: Instant) {
        let coldest = keys
            .iter()
            .map(|(key, hotness)| (hotness.faded(now, self.half_life), key))
            .min_by(|left, right| left.0.total_cmp(&right.0))
            .map(|(_, key)| key.clone());
        if let Some(key) = coldest {
            keys.remove(&key);
        }
    }
}

impl Default for ConflictHistory {
    /// 4,096 keys, fading with [`DEFAULT_ADAPTIVE_BACKOFF`]'s half-life.
    fn default() -> Self {
        ConflictHistory::new(4096, DEFAULT_ADAPTIVE_BACKOFF.half_life)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: AdaptiveBackoff = DEFAULT_ADAPTIVE_BACKOFF;

    #[test]
    fn a_cold_key_retries_at_once_the_first_time_only() {
        assert_eq!(POLICY.delay(0.0, 1, 0.9), Duration::ZERO);
        assert!(POLICY.delay(0.0, 2, 0.9) > Duration::ZERO);
    }

    #[test]
    fn hotter_keys_and_later_retries_wait_longer_up_to_the_cap() {
        let warm = POLICY.delay(3.0, 1, 0.999);
        let hot = POLICY.delay(300.0, 1, 0.999);
        assert!(hot > warm, "{hot:?} <= {warm:?}");
        assert!(POLICY.delay(300.0, 3, 0.999) > hot);
        assert!(POLICY.delay(1e12, 30, 0.999) <= POLICY.cap);
    }

    #[test]
    fn the_jitter_spans_the_whole_window() {
        assert_eq!(POLICY.delay(50.0, 2, 0.0), Duration::ZERO);
        let top = POLICY.delay(50.0, 2, 0.999_999);
        let middle = POLICY.delay(50.0, 2, 0.5);
        assert!(middle.as_secs_f64() * 2.0 - top.as_secs_f64() < 1e-6);
    }

    #[test]
    fn hotness_counts_conflicts_and_halves_every_half_life() {
        let history = ConflictHistory::new(8, Duration::from_secs(5));
        let start = Instant::now();
        for _ in 0..4 {
            history.record_conflict("hot", start);
        }
        assert!((history.hotness("hot", start) - 4.0).abs() < 1e-9);
        let later = start + Duration::from_secs(5);
        assert!((history.hotness("hot", later) - 2.0).abs() < 1e-9);
        assert_eq!(history.hotness("never", later), 0.0);
    }

    #[test]
    fn a_full_history_forgets_its_coldest_key() {
        let history = ConflictHistory::new(2, Duration::from_secs(5));
        let now = Instant::now();
        history.record_conflict("warm", now);
        history.record_conflict("hot", now);
        history.record_conflict("hot", now);
        history.record_conflict("new", now);
        assert_eq!(history.len(), 2);
        assert_eq!(history.hotness("warm", now), 0.0);
        assert!(history.hotness("hot", now) > 1.9);
        assert!(history.hotness("new", now) > 0.9);
    }
}
