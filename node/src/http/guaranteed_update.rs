//! The guaranteed-update loop behind `PATCH /v1/kv/{key}`, as the Kubernetes API server runs it:
//! attempt (read, change, compare-and-swap); on a conflict wait a jittered backoff and attempt
//! again, at most `attempts` times in all.
//!
//! The loop knows nothing of keys or HTTP: an [`UpdateAttempt`] does one attempt and a [`Pause`]
//! waits, so tests drive it with scripted attempts and a pause that only records the delays.
//! A conflict hands what it learnt (for a patch, the key-value now) to the next attempt, which can
//! then skip its read.
//!
//! The presets match client-go's `retry.DefaultRetry` and `retry.DefaultBackoff`, and the delays
//! follow `wait.Backoff`: the n-th wait is `initial_delay * factor^(n-1)`, plus up to `jitter`
//! times that again at random, and there is no wait after the last attempt.

use std::future::Future;
use std::time::Duration;

/// How often and how patiently to retry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (client-go's `Steps`); at least 1.
    pub attempts: u32,
    /// The wait before the first retry, before jitter.
    pub initial_delay: Duration,
    /// Each further wait is this many times the one before.
    pub factor: f64,
    /// Each wait grows by up to this fraction of itself, at random.
    pub jitter: f64,
}

impl RetryPolicy {
    /// client-go `retry.DefaultRetry`: 5 attempts, 10 ms apart, jitter 0.1.
    pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
        attempts: 5,
        initial_delay: Duration::from_millis(10),
        factor: 1.0,
        jitter: 0.1,
    };

    /// client-go `retry.DefaultBackoff`: 4 attempts, waits of 10, 50 and 250 ms, jitter 0.1.
    pub const DEFAULT_BACKOFF: RetryPolicy = RetryPolicy {
        attempts: 4,
        initial_delay: Duration::from_millis(10),
        factor: 5.0,
        jitter: 0.1,
    };

    /// One attempt and no retry: the update under a client's own `If-Match`.
    pub const SINGLE_ATTEMPT: RetryPolicy = RetryPolicy {
        attempts: 1,
        initial_delay: Duration::ZERO,
        factor: 1.0,
        jitter: 0.0,
    };

    /// The wait before retry number `retry` (1 is the wait after the first attempt), given a
    /// random number in `[0, 1)`.
    pub fn delay_before_retry(&self, retry: u32, random_unit: f64) -> Duration {
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let base = self.initial_delay.as_secs_f64() * self.factor.powi(exponent);
        let jittered = base * (1.0 + self.jitter * random_unit.clamp(0.0, 1.0));
        Duration::try_from_secs_f64(jittered).unwrap_or(Duration::MAX)
    }
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
pub enum AttemptOutcome<Updated, Conflict> {
    /// The update is done.
    Updated(Updated),
    /// The compare-and-swap lost a race; worth another attempt.
    Conflict(Conflict),
}

/// One attempt of an update. `previous_conflict` is what the last attempt's conflict carried
/// (`None` on the first attempt).
pub trait UpdateAttempt {
    type Updated;
    type Conflict;
    type Error;

    fn attempt(
        &self,
        previous_conflict: Option<Self::Conflict>,
    ) -> impl Future<Output = Result<AttemptOutcome<Self::Updated, Self::Conflict>, Self::Error>> + Send;
}

/// Waits between attempts.
pub trait Pause {
    fn pause(&self, delay: Duration) -> impl Future<Output = ()> + Send;
}

/// The real pause: a tokio timer.
pub struct TokioPause;

impl Pause for TokioPause {
    async fn pause(&self, delay: Duration) {
        revkv_raft::clock::sleep(delay).await;
    }
}

/// A finished update and how many attempts it took.
#[derive(Debug, PartialEq, Eq)]
pub struct Finished<Updated> {
    pub updated: Updated,
    pub attempts: u32,
}

/// Why an update gave up, and after how many attempts.
#[derive(Debug, PartialEq, Eq)]
pub enum GaveUp<Conflict, Error> {
    /// Every attempt conflicted; this is the last conflict.
    Exhausted { conflict: Conflict, attempts: u32 },
    /// An attempt failed for another reason; no further attempt was made.
    Failed { error: Error, attempts: u32 },
}

#[cfg(test)]
impl<Conflict, Error> GaveUp<Conflict, Error> {
    pub fn attempts(&self) -> u32 {
        match self {
            GaveUp::Exhausted { attempts, .. } | GaveUp::Failed { attempts, .. } => *attempts,
        }
    }
}

/// Runs `update` until it succeeds, fails, or has conflicted `policy.attempts` times, pausing
/// `policy.delay_before_retry(n, random_unit())` before the n-th retry.
pub async fn run_guaranteed_update<U: UpdateAttempt>(
    policy: &RetryPolicy,
    update: &U,
    pause: &impl Pause,
    mut random_unit: impl FnMut() -> f64,
) -> Result<Finished<U::Updated>, GaveUp<U::Conflict, U::Error>> {
    let attempts_allowed = policy.attempts.max(1);
    let mut previous_conflict = None;
    for attempt in 1..=attempts_allowed {
        if attempt > 1 {
            let delay = policy.delay_before_retry(attempt - 1, random_unit());
            pause.pause(delay).await;
        }
        match update.attempt(previous_conflict.take()).await {
            Ok(AttemptOutcome::Updated(updated)) => {
                return Ok(Finished {
                    updated,
                    attempts: attempt,
                })
            }
            Ok(AttemptOutcome::Conflict(conflict)) if attempt == attempts_allowed => {
                return Err(GaveUp::Exhausted {
                    conflict,
                    attempts: attempt,
                })
            }
            Ok(AttemptOutcome::Conflict(conflict)) => previous_conflict = Some(conflict),
            Err(error) => {
                return Err(GaveUp::Failed {
                    error,
                    attempts: attempt,
                })
            }
        }
    }
    unreachable!("the last attempt always returns")
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    /// An update whose attempts answer from a script, recording what each was handed.
    struct ScriptedUpdate {
        script: Mutex<VecDeque<Result<AttemptOutcome<&'static str, u32>, &'static str>>>,
        handed: Mutex<Vec<Option<u32>>>,
    }

    impl ScriptedUpdate {
        fn new(script: Vec<Result<AttemptOutcome<&'static str, u32>, &'static str>>) -> Self {
            ScriptedUpdate {
                script: Mutex::new(script.into()),
                handed: Mutex::new(Vec::new()),
            }
        }
    }

    impl UpdateAttempt for ScriptedUpdate {
        type Updated = &'static str;
        type Conflict = u32;
        type Error = &'static str;

        async fn attempt(
            &self,
            previous_conflict: Option<u32>,
        ) -> Result<AttemptOutcome<&'static str, u32>, &'static str> {
            self.handed.lock().unwrap().push(previous_conflict);
            self.script
                .lock()
                .unwrap()
                .pop_front()
                .expect("no more attempts scripted")
        }
    }

    /// A pause that returns at once and remembers each delay it was asked for.
    #[derive(Default)]
    struct RecordedPause(Mutex<Vec<Duration>>);

    impl Pause for RecordedPause {
        async fn pause(&self, delay: Duration) {
            self.0.lock().unwrap().push(delay);
        }
    }

    fn conflict(revision: u32) -> Result<AttemptOutcome<&'static str, u32>, &'static str> {
        Ok(AttemptOutcome::Conflict(revision))
    }

    const DONE: Result<AttemptOutcome<&'static str, u32>, &'static str> =
        Ok(AttemptOutcome::Updated("done"));

    fn millis(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[tokio::test]
    async fn a_first_success_takes_one_attempt_and_no_pause() {
        let update = ScriptedUpdate::new(vec![DONE]);
        let pause = RecordedPause::default();
        let finished = run_guaranteed_update(&RetryPolicy::DEFAULT_RETRY, &update, &pause, || 0.0)
            .await
            .unwrap();
        assert_eq!(finished.attempts, 1);
        assert!(pause.0.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn conflicts_are_retried_and_each_hands_its_news_to_the_next_attempt() {
        let update = ScriptedUpdate::new(vec![conflict(7), conflict(8), DONE]);
        let pause = RecordedPause::default();
        let finished = run_guaranteed_update(&RetryPolicy::DEFAULT_RETRY, &update, &pause, || 0.0)
            .await
            .unwrap();
        assert_eq!(finished.attempts, 3);
        assert_eq!(*update.handed.lock().unwrap(), vec![None, Some(7), Some(8)]);
        assert_eq!(*pause.0.lock().unwrap(), millis(&[10, 10]));
    }

    #[tokio::test]
    async fn default_retry_gives_up_after_five_conflicts_with_the_last_one() {
        let update = ScriptedUpdate::new((1..=5).map(conflict).collect());
        let pause = RecordedPause::default();
        let gave_up = run_guaranteed_update(&RetryPolicy::DEFAULT_RETRY, &update, &pause, || 0.0)
            .await
            .unwrap_err();
        assert_eq!(
            gave_up,
            GaveUp::Exhausted {
                conflict: 5,
                attempts: 5
            }
        );
        assert_eq!(*pause.0.lock().unwrap(), millis(&[10, 10, 10, 10]));
    }

    #[tokio::test]
    async fn default_backoff_waits_ten_fifty_and_two_hundred_fifty_milliseconds() {
        let update = ScriptedUpdate::new((1..=4).map(conflict).collect());
        let pause = RecordedPause::default();
        let gave_up =
            run_guaranteed_update(&RetryPolicy::DEFAULT_BACKOFF, &update, &pause, || 0.0).await;
        assert_eq!(gave_up.unwrap_err().attempts(), 4);
        assert_eq!(*pause.0.lock().unwrap(), millis(&[10, 50, 250]));
    }

    #[tokio::test]
    async fn an_error_stops_the_loop_at_once() {
        let update = ScriptedUpdate::new(vec![conflict(1), Err("not json")]);
        let pause = RecordedPause::default();
        let gave_up = run_guaranteed_update(&RetryPolicy::DEFAULT_RETRY, &update, &pause, || 0.0)
            .await
            .unwrap_err();
        assert_eq!(
            gave_up,
            GaveUp::Failed {
                error: "not json",
                attempts: 2
            }
        );
    }

    #[tokio::test]
    async fn a_single_attempt_policy_never_retries() {
        let update = ScriptedUpdate::new(vec![conflict(3)]);
        let pause = RecordedPause::default();
        let gave_up =
            run_guaranteed_update(&RetryPolicy::SINGLE_ATTEMPT, &update, &pause, || 0.0).await;
        assert_eq!(gave_up.unwrap_err().attempts(), 1);
        assert!(pause.0.lock().unwrap().is_empty());
    }

    #[test]
    fn jitter_adds_at_most_its_fraction_of_the_delay() {
        let policy = RetryPolicy::DEFAULT_BACKOFF;
        assert_eq!(policy.delay_before_retry(1, 0.0), Duration::from_millis(10));
        assert_eq!(
            policy.delay_before_retry(2, 0.5),
            Duration::from_micros(52_500)
        );
        let most = policy.delay_before_retry(3, 0.999_999);
        assert!(most > Duration::from_millis(274) && most < Duration::from_millis(275));
        // Out-of-range random numbers are clamped, never shrinking or blowing up the delay.
        assert_eq!(
            policy.delay_before_retry(1, -3.0),
            Duration::from_millis(10)
        );
        assert_eq!(policy.delay_before_retry(1, 9.0), Duration::from_millis(11));
    }
}
