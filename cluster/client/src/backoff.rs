//! Backoff delays with the exact semantics of Kubernetes' `k8s.io/apimachinery/pkg/util/wait.Backoff`,
//! and the two presets client-go's `retry` package uses for conflicts.
//!
//! Why not a crate: `backon` and `backoff` both jitter by a fixed proportion (`backon` adds up to the
//! whole current or minimum delay), while `wait.Backoff` adds up to `jitter × duration` and counts
//! `steps` as the number of times the duration may still change, with a `cap` that ends the growth.
//! Matching client-go exactly is the point of [`DEFAULT_RETRY`] and [`DEFAULT_BACKOFF`], so the few
//! lines of [`Backoff::step`] are written here and tested against worked values.
//!
//! The random part is a parameter ([`Backoff::step_with_random`]), so tests check computed delays
//! without sleeping; [`Sleeper`] is how the retry loops wait, replaceable in tests.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A backoff, as `wait.Backoff`: `duration` is the next delay before jitter; each [`Backoff::step`]
/// multiplies it by `factor` (if non-zero) while `steps` remain, and stops the growth at `cap`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The delay the next step returns, before jitter.
    pub duration: Duration,
    /// What `duration` is multiplied by after each step; 0 or 1 keeps it constant.
    pub factor: f64,
    /// Each delay is `duration + random(0, jitter × duration)`; 0 means no jitter.
    pub jitter: f64,
    /// How many more times the duration may change; retry loops also read it as the number of
    /// attempts (client-go's `RetryOnConflict` makes at most `steps` attempts).
    pub steps: u32,
    /// A limit on `duration`: once the factor would exceed it, `duration` becomes `cap` and `steps`
    /// becomes 0, so a retry loop makes no attempt after that one (as client-go's `RetryOnConflict`
    /// does): a growing delay with a cap bounds the attempts too. `Duration::ZERO` means no cap.
    pub cap: Duration,
}

/// client-go's `retry.DefaultRetry`: for conflicts on a resource the caller is expected to own.
/// At most 5 attempts, about 10 ms apart.
pub const DEFAULT_RETRY: Backoff = Backoff {
    duration: Duration::from_millis(10),
    factor: 1.0,
    jitter: 0.1,
    steps: 5,
    cap: Duration::ZERO,
};

/// client-go's `retry.DefaultBackoff`: for conflicts with other writers of the same resource.
/// At most 4 attempts, after delays of about 10, 50 and 250 ms.
pub const DEFAULT_BACKOFF: Backoff = Backoff {
    duration: Duration::from_millis(10),
    factor: 5.0,
    jitter: 0.1,
    steps: 4,
    cap: Duration::ZERO,
};

impl Backoff {
    /// The next delay, with jitter from the process's random source; advances the backoff.
    pub fn step(&mut self) -> Duration {
        self.step_with_random(fastrand::f64())
    }

    /// The next delay, with `random` in `[0, 1)` standing for the random draw; advances the backoff.
    /// Same as `wait.Backoff.Step`: with no steps left the duration stays as it is (jittered).
    pub fn step_with_random(&mut self, random: f64) -> Duration {
        if self.steps < 1 {
            return jittered(self.duration, self.jitter, random);
        }
        self.steps -= 1;
        let delay = self.duration;
        if self.factor != 0.0 {
            self.duration = self.duration.mul_f64(self.factor);
            if !self.cap.is_zero() && self.duration > self.cap {
                self.duration = self.cap;
                self.steps = 0;
            }
        }
        jittered(delay, self.jitter, random)
    }
}

/// `wait.Jitter` with the draw given: `duration + random × jitter × duration` (no jitter if 0).
fn jittered(duration: Duration, jitter: f64, random: f64) -> Duration {
    if jitter <= 0.0 {
        return duration;
    }
    duration + duration.mul_f64(random.clamp(0.0, 1.0) * jitter)
}

/// A boxed future, as [`Sleeper::sleep`] returns.
pub type SleepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How retry loops wait between attempts: the tokio timer in production, a recorder in tests.
pub trait Sleeper: Send + Sync {
    fn sleep(&self, delay: Duration) -> SleepFuture;
}

/// Waits on tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, delay: Duration) -> SleepFuture {
        Box::pin(tokio::time::sleep(delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(mut backoff: Backoff, count: usize, random: f64) -> Vec<Duration> {
        (0..count)
            .map(|_| backoff.step_with_random(random))
            .collect()
    }

    fn milliseconds(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|ms| Duration::from_millis(*ms)).collect()
    }

    #[test]
    fn default_retry_waits_ten_milliseconds_plus_at_most_ten_percent() {
        assert_eq!(delays(DEFAULT_RETRY, 4, 0.0), milliseconds(&[10; 4]));
        assert_eq!(
            delays(DEFAULT_RETRY, 4, 0.5),
            vec![Duration::from_micros(10_500); 4]
        );
        assert!(delays(DEFAULT_RETRY, 4, 0.999_999)
            .iter()
            .all(|delay| *delay < Duration::from_millis(11)));
    }

    #[test]
    fn default_backoff_multiplies_by_five_each_step() {
        assert_eq!(
            delays(DEFAULT_BACKOFF, 3, 0.0),
            milliseconds(&[10, 50, 250])
        );
        assert_eq!(
            delays(DEFAULT_BACKOFF, 3, 0.5),
            milliseconds(&[10, 50, 250])
                .iter()
                .map(|delay| delay.mul_f64(1.05))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn with_no_steps_left_the_duration_stops_growing() {
        let mut backoff = Backoff {
            steps: 2,
            ..DEFAULT_BACKOFF
        };
        let computed = (0..4)
            .map(|_| backoff.step_with_random(0.0))
            .collect::<Vec<_>>();
        assert_eq!(computed, milliseconds(&[10, 50, 250, 250]));
        assert_eq!(backoff.steps, 0);
    }

    #[test]
    fn the_cap_limits_the_duration_and_ends_the_steps() {
        let mut backoff = Backoff {
            duration: Duration::from_millis(100),
            factor: 3.0,
            jitter: 0.0,
            steps: 10,
            cap: Duration::from_millis(500),
        };
        let computed = (0..5)
            .map(|_| backoff.step_with_random(0.7))
            .collect::<Vec<_>>();
        assert_eq!(computed, milliseconds(&[100, 300, 500, 500, 500]));
        assert_eq!(backoff.steps, 0);
    }

    #[test]
    fn random_delays_stay_within_the_jitter_bounds() {
        let mut backoff = DEFAULT_BACKOFF;
        for base in [10, 50, 250] {
            let delay = backoff.step();
            assert!(delay >= Duration::from_millis(base));
            assert!(delay <= Duration::from_millis(base).mul_f64(1.1));
        }
    }

    #[test]
    fn a_zero_factor_keeps_the_duration() {
        let backoff = Backoff {
            factor: 0.0,
            jitter: 0.0,
            ..DEFAULT_BACKOFF
        };
        assert_eq!(delays(backoff, 3, 0.3), milliseconds(&[10, 10, 10]));
    }
}
