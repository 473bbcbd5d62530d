//! How long a controller waits before it retries a key, with the semantics of client-go's
//! `util/workqueue` rate limiters and their `DefaultControllerRateLimiter`:
//!
//! - [`ItemExponentialLimiter`] is `ItemExponentialFailureRateLimiter`: each key's delay doubles
//!   with each of its failures, from a base delay up to a maximum, until the key is forgotten.
//! - [`TokenBucketLimiter`] is `BucketRateLimiter` (a `rate.Limiter` reservation): all keys
//!   together are retried at most `per_second` times a second, after a first burst.
//! - [`ControllerRateLimiter`] is `MaxOfRateLimiter` over the two: the longer delay wins, so one
//!   failing key backs off on its own and many failing keys cannot flood the cluster together.
//!
//! The current time is a parameter, so the delays are tested as plain values without a clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Why rate limiter settings were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidRateLimiterSettings {
    /// The token bucket would never refill, or its rate is not a number.
    #[error("the retries per second must be a positive finite number, not {per_second}")]
    RateNotPositive { per_second: f64 },
    /// A bucket that holds no token would make every retry wait.
    #[error("the burst of retries must be at least 1")]
    ZeroBurst,
    /// The first delay must not already be longer than the longest one.
    #[error("the base delay {base:?} is longer than the maximum delay {max:?}")]
    BaseAboveMax { base: Duration, max: Duration },
}

/// Per-key exponential backoff, as client-go's `ItemExponentialFailureRateLimiter`: the delay
/// of a key that has failed `n` times before is `base × 2ⁿ`, at most `max`.
#[derive(Debug, Clone)]
pub struct ItemExponentialLimiter {
    base: Duration,
    max: Duration,
    failures: HashMap<String, u32>,
}

impl ItemExponentialLimiter {
    /// A limiter whose first delay is `base` and whose delays never exceed `max`.
    pub fn new(base: Duration, max: Duration) -> Result<Self, InvalidRateLimiterSettings> {
        if base > max {
            return Err(InvalidRateLimiterSettings::BaseAboveMax { base, max });
        }
        Ok(ItemExponentialLimiter {
            base,
            max,
            failures: HashMap::new(),
        })
    }

    /// The delay before the key's next retry; counts one more failure of the key.
    pub fn when(&mut self, key: &str) -> Duration {
        let failures = self.failures.entry(key.to_string()).or_insert(0);
        let delay = exponential_delay(self.base, self.max, *failures);
        *failures = failures.saturating_add(1);
        delay
    }

    /// Forgets the key's failures, so its next delay is the base delay again.
    pub fn forget(&mut self, key: &str) {
        self.failures.remove(key);
    }

    /// How many failures of the key are counted (client-go's `NumRequeues`).
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// `base × 2^failures`, at most `max`; a product too large for a `Duration` is `max` too.
fn exponential_delay(base: Duration, max: Duration, failures: u32) -> Duration {
    let growth = 1u32.checked_shl(failures);
    let delay = growth.and_then(|growth| base.checked_mul(growth));
    delay.map_or(max, |delay| delay.min(max))
}

/// A token bucket shared by all keys, as client-go's `BucketRateLimiter` over Go's
/// `rate.Limiter`: the bucket holds at most `burst` tokens and gains `per_second` tokens a
/// second. Each delay reserves one token; while tokens remain the delay is zero, and once they
/// are gone the tokens go negative (reservations) and the delay is how long until the reserved
/// token exists, so calls beyond the burst wait `1/per_second`, `2/per_second`, and so on.
#[derive(Debug, Clone)]
pub struct TokenBucketLimiter {
    per_second: f64,
    burst: u32,
    /// The tokens at `last_update`; negative when tokens are reserved ahead of time.
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` before the first reservation, when
    /// the bucket is full.
    last_update: Option<Instant>,
}

impl TokenBucketLimiter {
    /// A full bucket of `burst` tokens that refills at `per_second` tokens a second.
    pub fn new(per_second: f64, burst: u32) -> Result<Self, InvalidRateLimiterSettings> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(InvalidRateLimiterSettings::RateNotPositive { per_second });
        }
        if burst == 0 {
            return Err(InvalidRateLimiterSettings::ZeroBurst);
        }
        Ok(TokenBucketLimiter {
            per_second,
            burst,
            tokens: f64::from(burst),
            last_update: None,
        })
    }

    /// Reserves one token at `now` and answers how long until it exists (zero if it does).
    pub fn when(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        // A very slow rate can make the wait longer than a `Duration` holds; the longest
        // `Duration` is the honest answer then, where `from_secs_f64` would panic.
        Duration::try_from_secs_f64(-self.tokens / self.per_second).unwrap_or(Duration::MAX)
    }

    /// The tokens gained since the last update, up to the burst. A `now` earlier than the last
    /// update (as Go's `rate.Limiter` allows) adds nothing and does not move the update back.
    fn refill(&mut self, now: Instant) {
        if let Some(last_update) = self.last_update {
            let elapsed = now.saturating_duration_since(last_update).as_secs_f64();
            let refilled = self.tokens + elapsed * self.per_second;
            self.tokens = refilled.min(f64::from(self.burst));
            if now <= last_update {
                return;
            }
        }
        self.last_update = Some(now);
    }
}

/// The settings of a [`ControllerRateLimiter`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimiterSettings {
    /// A key's delay after its first failure; it doubles with each further failure.
    pub item_base_delay: Duration,
    /// The longest delay of one key, however often it failed.
    pub item_max_delay: Duration,
    /// How many retries a second all keys together may make once the burst is spent.
    pub per_second: f64,
    /// How many retries may happen at once before `per_second` applies.
    pub burst: u32,
}

/// client-go's `DefaultControllerRateLimiter`: 5 ms doubling up to 1000 s per key, and 10
/// retries a second after a burst of 100 for all keys together.
impl Default for RateLimiterSettings {
    fn default() -> Self {
        RateLimiterSettings {
            item_base_delay: Duration::from_millis(5),
            item_max_delay: Duration::from_secs(1000),
            per_second: 10.0,
            burst: 100,
        }
    }
}

/// The longer of a per-key exponential delay and a shared token bucket's delay, as client-go's
/// `MaxOfRateLimiter` in its `DefaultControllerRateLimiter`.
#[derive(Debug, Clone)]
pub struct ControllerRateLimiter {
    per_key: ItemExponentialLimiter,
    shared: TokenBucketLimiter,
}

impl ControllerRateLimiter {
    /// A limiter with these settings, once they are checked.
    pub fn new(settings: RateLimiterSettings) -> Result<Self, InvalidRateLimiterSettings> {
        Ok(ControllerRateLimiter {
            per_key: ItemExponentialLimiter::new(
                settings.item_base_delay,
                settings.item_max_delay,
            )?,
            shared: TokenBucketLimiter::new(settings.per_second, settings.burst)?,
        })
    }

    /// The delay before the key's next retry at `now`. Both limiters count the retry, as in
    /// `MaxOfRateLimiter`, whichever delay is longer.
    pub fn when(&mut self, key: &str, now: Instant) -> Duration {
        let per_key_delay = self.per_key.when(key);
        let shared_delay = self.shared.when(now);
        per_key_delay.max(shared_delay)
    }

    /// Forgets the key's failures (the token bucket keeps no state per key).
    pub fn forget(&mut self, key: &str) {
        self.per_key.forget(key);
    }

    /// How many failures of the key are counted (client-go's `NumRequeues`).
    pub fn failures(&self, key: &str) -> u32 {
        self.per_key.failures(key)
    }
}

/// client-go's `DefaultControllerRateLimiter`.
impl Default for ControllerRateLimiter {
    fn default() -> Self {
        ControllerRateLimiter::new(RateLimiterSettings::default())
            .expect("the default settings are valid (a test checks them)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milliseconds(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    fn delays(limiter: &mut ItemExponentialLimiter, key: &str, count: usize) -> Vec<Duration> {
        (0..count).map(|_| limiter.when(key)).collect()
    }

    /// client-go's `TestItemExponentialFailureRateLimiter`.
    #[test]
    fn each_failure_of_a_key_doubles_its_delay_until_forgotten() {
        let mut limiter = ItemExponentialLimiter::new(milliseconds(1), Duration::from_secs(1))
            .expect("valid settings");
        let expected: Vec<Duration> = [1, 2, 4, 8, 16].map(milliseconds).to_vec();
        assert_eq!(delays(&mut limiter, "one", 5), expected);
        assert_eq!(limiter.failures("one"), 5);

        assert_eq!(delays(&mut limiter, "two", 2), [1, 2].map(milliseconds));
        assert_eq!(limiter.failures("two"), 2);

        limiter.forget("one");
        assert_eq!(limiter.failures("one"), 0);
        assert_eq!(limiter.when("one"), milliseconds(1));
        assert_eq!(
            limiter.failures("two"),
            2,
            "forgetting one key keeps the others"
        );
    }

    /// client-go's `TestItemExponentialFailureRateLimiterOverFlow`.
    #[test]
    fn many_failures_stop_at_the_maximum_delay_without_overflow() {
        let mut limiter = ItemExponentialLimiter::new(milliseconds(1), Duration::from_secs(1000))
            .expect("valid settings");
        delays(&mut limiter, "one", 5);
        assert_eq!(limiter.when("one"), milliseconds(32));
        delays(&mut limiter, "one", 1000);
        assert_eq!(limiter.when("one"), Duration::from_secs(1000));

        let mut limiter =
            ItemExponentialLimiter::new(Duration::from_secs(60), Duration::from_secs(1000 * 3600))
                .expect("valid settings");
        delays(&mut limiter, "two", 2);
        assert_eq!(limiter.when("two"), Duration::from_secs(4 * 60));
        delays(&mut limiter, "two", 1000);
        assert_eq!(limiter.when("two"), Duration::from_secs(1000 * 3600));
    }

    #[test]
    fn the_failure_count_saturates_instead_of_wrapping() {
        let mut limiter =
            ItemExponentialLimiter::new(milliseconds(5), milliseconds(100)).expect("valid");
        limiter.failures.insert("key".to_string(), u32::MAX);
        assert_eq!(limiter.when("key"), milliseconds(100));
        assert_eq!(limiter.failures("key"), u32::MAX);
    }

    #[test]
    fn the_default_per_key_delays_are_5_10_20_milliseconds_up_to_1000_seconds() {
        let mut limiter = ControllerRateLimiter::default();
        let start = Instant::now();
        // One retry a second stays well within the token bucket's rate.
        let mut delay_at = |second: u64| limiter.when("key", start + Duration::from_secs(second));
        assert_eq!(delay_at(0), milliseconds(5));
        assert_eq!(delay_at(1), milliseconds(10));
        assert_eq!(delay_at(2), milliseconds(20));
        assert_eq!(delay_at(3), milliseconds(40));
        // 5 ms × 2¹⁷ = 655.36 s is the last delay below the cap; 5 ms × 2¹⁸ is above it.
        let later: Vec<Duration> = (4..=19).map(&mut delay_at).collect();
        assert_eq!(later[13], Duration::from_millis(655_360));
        assert_eq!(later[14], Duration::from_secs(1000));
        assert_eq!(later[15], Duration::from_secs(1000));
        assert_eq!(limiter.failures("key"), 20);
        limiter.forget("key");
        assert_eq!(limiter.failures("key"), 0);
        assert_eq!(
            limiter.when("key", start + Duration::from_secs(30)),
            milliseconds(5)
        );
    }

    #[test]
    fn the_bucket_answers_zero_for_the_burst_then_one_token_interval_more_each_call() {
        let mut bucket = TokenBucketLimiter::new(10.0, 100).expect("valid settings");
        let start = Instant::now();
        for _ in 0..100 {
            assert_eq!(bucket.when(start), Duration::ZERO);
        }
        assert_eq!(bucket.when(start), milliseconds(100));
        assert_eq!(bucket.when(start), milliseconds(200));
        assert_eq!(bucket.when(start), milliseconds(300));
        // Three tokens are reserved (-3); one second adds ten, so seven calls are free again.
        let one_second_later = start + Duration::from_secs(1);
        for _ in 0..7 {
            assert_eq!(bucket.when(one_second_later), Duration::ZERO);
        }
        assert_eq!(bucket.when(one_second_later), milliseconds(100));
    }

    #[test]
    fn an_idle_bucket_refills_only_up_to_the_burst() {
        let mut bucket = TokenBucketLimiter::new(10.0, 2).expect("valid settings");
        let start = Instant::now();
        bucket.when(start);
        let an_hour_later = start + Duration::from_secs(3600);
        assert_eq!(bucket.when(an_hour_later), Duration::ZERO);
        assert_eq!(bucket.when(an_hour_later), Duration::ZERO);
        assert_eq!(bucket.when(an_hour_later), milliseconds(100));
    }

    #[test]
    fn a_time_before_the_last_update_adds_no_tokens() {
        let mut bucket = TokenBucketLimiter::new(1.0, 1).expect("valid settings");
        let start = Instant::now();
        let later = start + Duration::from_secs(10);
        assert_eq!(bucket.when(later), Duration::ZERO);
        assert_eq!(bucket.when(start), Duration::from_secs(1));
        assert_eq!(bucket.when(later), Duration::from_secs(2));
    }

    #[test]
    fn a_very_slow_bucket_answers_the_longest_duration_instead_of_panicking() {
        let mut bucket = TokenBucketLimiter::new(f64::MIN_POSITIVE, 1).expect("valid settings");
        let start = Instant::now();
        assert_eq!(bucket.when(start), Duration::ZERO);
        assert_eq!(bucket.when(start), Duration::MAX);
    }

    #[test]
    fn the_controller_limiter_answers_the_longer_of_the_two_delays() {
        let mut limiter = ControllerRateLimiter::default();
        let start = Instant::now();
        // The first 100 retries, each of another key, fit in the burst: the per-key delay wins.
        for index in 0..100 {
            assert_eq!(
                limiter.when(&format!("key-{index}"), start),
                milliseconds(5)
            );
        }
        // Past the burst the shared bucket's delay is longer than a first failure's 5 ms.
        assert_eq!(limiter.when("key-100", start), milliseconds(100));
        assert_eq!(limiter.when("key-101", start), milliseconds(200));
        assert_eq!(limiter.failures("key-100"), 1);
    }

    #[test]
    fn settings_are_checked() {
        let valid = RateLimiterSettings::default();
        for per_second in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let settings = RateLimiterSettings {
                per_second,
                ..valid
            };
            assert!(matches!(
                ControllerRateLimiter::new(settings),
                Err(InvalidRateLimiterSettings::RateNotPositive { .. })
            ));
        }
        let settings = RateLimiterSettings { burst: 0, ..valid };
        assert_eq!(
            ControllerRateLimiter::new(settings).err(),
            Some(InvalidRateLimiterSettings::ZeroBurst)
        );
        let settings = RateLimiterSettings {
            item_base_delay: Duration::from_secs(2),
            item_max_delay: Duration::from_secs(1),
            ..valid
        };
        assert_eq!(
            ControllerRateLimiter::new(settings).err(),
            Some(InvalidRateLimiterSettings::BaseAboveMax {
                base: Duration::from_secs(2),
                max: Duration::from_secs(1),
            })
        );
        assert!(ControllerRateLimiter::new(valid).is_ok());
    }
}
