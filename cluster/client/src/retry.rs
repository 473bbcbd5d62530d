//! `retry_on_conflict`: client-go's `retry.RetryOnConflict` for revkv.
//!
//! The closure does the whole read-modify-write (it must read again inside, so every attempt
//! starts from the current value). Only [`ClientError::Conflict`] is retried; any other error, and
//! success, end the loop at once. At most `backoff.steps` attempts are made, with a
//! [`Backoff::step`] delay between two attempts and none after the last; when every attempt
//! conflicted, the last conflict is returned. This is `wait.ExponentialBackoff` driving
//! `retry.OnError(backoff, errors.IsConflict, fn)`, step for step, with one deliberate difference:
//! a backoff with no steps runs nothing and answers `Invalid` (client-go would answer success
//! without running the closure).
//!
//! While attempt n (n >= 1 for retries) runs, every request the closure sends through a
//! [`Client`](super::Client) carries `X-Retry-Attempt: n`, so members can count client retries
//! (`revkv_client_retries_total`). The attempt number travels in a tokio task-local, so the closure
//! keeps client-go's shape (`|| async { ... }`); requests sent from tasks the closure spawns do not
//! carry it.

use std::future::Future;
use std::time::{Duration, Instant};

use super::adaptive_backoff::{AdaptiveBackoff, ConflictHistory};
use super::backoff::{Backoff, Sleeper, TokioSleeper};
use super::error::ClientError;

tokio::task_local! {
    static RETRY_ATTEMPT: u32;
}

/// The retry attempt the current task is running inside `retry_on_conflict` (0: the first try),
/// or None outside it.
pub fn current_retry_attempt() -> Option<u32> {
    RETRY_ATTEMPT.try_with(|attempt| *attempt).ok()
}

/// What a [`retry_on_conflict_counted`] loop did: attempts made and conflicts met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryTally {
    pub attempts: u32,
    pub conflicts: u32,
}

/// Runs `operation` until it does not conflict, at most `backoff.steps` times (see the module doc).
pub async fn retry_on_conflict<T, F, Fut>(backoff: Backoff, operation: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    retry_on_conflict_counted(backoff, &TokioSleeper, operation)
        .await
        .0
}

/// [`retry_on_conflict`] with the waiting done by `sleeper`, also telling how many attempts were
/// made and how many conflicted (the benchmark and tests read these).
pub async fn retry_on_conflict_counted<T, F, Fut>(
    mut backoff: Backoff,
    sleeper: &dyn Sleeper,
    operation: F,
) -> (Result<T, ClientError>, RetryTally)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    retry_on_conflict_scheduled(&mut backoff, sleeper, operation).await
}

/// What a retry loop asks its policy: whether another attempt may run, whether it is the last,
/// and the delay before the next one. A [`Backoff`] answers as client-go's `wait.Backoff` does;
/// [`AdaptiveRetry`] answers from the key's recent conflicts.
pub trait RetrySchedule {
    /// True while another attempt may run.
    fn may_attempt(&self) -> bool;
    /// True when the attempt about to end is the last one allowed.
    fn is_last_attempt(&self) -> bool;
    /// Called after each conflicted attempt that will be retried: the delay before the retry.
    fn delay_before_retry(&mut self) -> Duration;
}

impl RetrySchedule for Backoff {
    fn may_attempt(&self) -> bool {
        self.steps > 0
    }

    fn is_last_attempt(&self) -> bool {
        self.steps == 1
    }

    fn delay_before_retry(&mut self) -> Duration {
        self.step()
    }
}

/// [`retry_on_conflict_counted`] under any [`RetrySchedule`].
pub async fn retry_on_conflict_scheduled<S, T, F, Fut>(
    schedule: &mut S,
    sleeper: &dyn Sleeper,
    mut operation: F,
) -> (Result<T, ClientError>, RetryTally)
where
    S: RetrySchedule + ?Sized,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut tally = RetryTally::default();
    let mut last_conflict = None;
    while schedule.may_attempt() {
        let outcome = RETRY_ATTEMPT.scope(tally.attempts, operation()).await;
        tally.attempts += 1;
        match outcome {
            Err(error) if error.is_conflict() => {
                tally.conflicts += 1;
                last_conflict = Some(error);
            }
            other => return (other, tally),
        }
        if schedule.is_last_attempt() {
            break;
        }
        sleeper.sleep(schedule.delay_before_retry()).await;
    }
    let error = last_conflict.unwrap_or_else(|| ClientError::Invalid {
        message: "retry_on_conflict was given a backoff with no steps".into(),
    });
    (Err(error), tally)
}

/// The schedule of one read-modify-write of `key` under an [`AdaptiveBackoff`]: each conflict is
/// recorded in the shared [`ConflictHistory`], and each delay follows the key's hotness then.
pub struct AdaptiveRetry<'a> {
    history: &'a ConflictHistory,
    key: &'a str,
    policy: AdaptiveBackoff,
    /// Retries scheduled so far: while attempt n + 1 runs, this is n.
    retries_scheduled: u32,
    random: fn() -> f64,
}

impl<'a> AdaptiveRetry<'a> {
    /// A schedule for `key` drawing its jitter from the process's random source.
    pub fn new(history: &'a ConflictHistory, key: &'a str, policy: AdaptiveBackoff) -> Self {
        Self::with_random(history, key, policy, fastrand::f64)
    }

    /// A schedule whose jitter draws come from `random` (tests).
    pub fn with_random(
        history: &'a ConflictHistory,
        key: &'a str,
        policy: AdaptiveBackoff,
        random: fn() -> f64,
    ) -> Self {
        AdaptiveRetry {
            history,
            key,
            policy,
            retries_scheduled: 0,
            random,
        }
    }
}

impl RetrySchedule for AdaptiveRetry<'_> {
    fn may_attempt(&self) -> bool {
        self.retries_scheduled < self.policy.max_attempts
    }

    fn is_last_attempt(&self) -> bool {
        // Asked when attempt `retries_scheduled + 1` has just conflicted.
        self.retries_scheduled + 1 >= self.policy.max_attempts
    }

    fn delay_before_retry(&mut self) -> Duration {
        let now = Instant::now();
        self.history.record_conflict(self.key, now);
        self.retries_scheduled += 1;
        let hotness = self.history.hotness(self.key, now);
        self.policy
            .delay(hotness, self.retries_scheduled, (self.random)())
    }
}

/// [`retry_on_conflict`] for a read-modify-write of `key`, waiting as [`AdaptiveBackoff`] says
/// from `history`'s record of the key's conflicts (share one history across the process).
pub async fn retry_on_conflict_adaptive<T, F, Fut>(
    history: &ConflictHistory,
    key: &str,
    policy: AdaptiveBackoff,
    operation: F,
) -> (Result<T, ClientError>, RetryTally)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut schedule = AdaptiveRetry::new(history, key, policy);
    retry_on_conflict_scheduled(&mut schedule, &TokioSleeper, operation).await
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::super::backoff::{SleepFuture, DEFAULT_BACKOFF, DEFAULT_RETRY};
    use super::*;

    /// Records the delays asked for and returns at once.
    #[derive(Default, Clone)]
    struct RecordingSleeper {
        delays: Arc<Mutex<Vec<Duration>>>,
    }

    impl Sleeper for RecordingSleeper {
        fn sleep(&self, delay: Duration) -> SleepFuture {
            self.delays.lock().unwrap().push(delay);
            Box::pin(async {})
        }
    }

    fn conflict(number: u32) -> ClientError {
        ClientError::Conflict {
            current: None,
            message: format!("conflict {number}"),
            conflicting_fields: Vec::new(),
        }
    }

    /// Runs a loop whose operation answers `answers[i]` on attempt i (conflict after the list).
    async fn run_with_answers(
        backoff: Backoff,
        answers: Vec<Result<u32, ClientError>>,
    ) -> (
        Result<u32, ClientError>,
        RetryTally,
        Vec<Duration>,
        Vec<Option<u32>>,
    ) {
        let sleeper = RecordingSleeper::default();
        let seen_attempts = Arc::new(Mutex::new(Vec::new()));
        let mut remaining = answers.into_iter();
        let mut calls = 0;
        let (outcome, tally) = retry_on_conflict_counted(backoff, &sleeper, || {
            calls += 1;
            seen_attempts.lock().unwrap().push(None);
            let answer = remaining.next().unwrap_or(Err(conflict(calls)));
            let seen = Arc::clone(&seen_attempts);
            async move {
                *seen.lock().unwrap().last_mut().unwrap() = current_retry_attempt();
                answer
            }
        })
        .await;
        let delays = sleeper.delays.lock().unwrap().clone();
        let seen = seen_attempts.lock().unwrap().clone();
        (outcome, tally, delays, seen)
    }

    #[tokio::test]
    async fn success_at_first_try_makes_one_attempt_and_never_waits() {
        let (outcome, tally, delays, seen) = run_with_answers(DEFAULT_RETRY, vec![Ok(7)]).await;
        assert_eq!(outcome, Ok(7));
        assert_eq!(
            tally,
            RetryTally {
                attempts: 1,
                conflicts: 0
            }
        );
        assert!(delays.is_empty());
        assert_eq!(seen, [Some(0)]);
    }

    #[tokio::test]
    async fn conflicts_are_retried_until_success_with_numbered_attempts() {
        let answers = vec![Err(conflict(1)), Err(conflict(2)), Ok(3)];
        let (outcome, tally, delays, seen) = run_with_answers(DEFAULT_RETRY, answers).await;
        assert_eq!(outcome, Ok(3));
        assert_eq!(
            tally,
            RetryTally {
                attempts: 3,
                conflicts: 2
            }
        );
        assert_eq!(delays.len(), 2);
        assert_eq!(seen, [Some(0), Some(1), Some(2)]);
    }

    #[tokio::test]
    async fn after_the_last_step_the_last_conflict_is_returned_without_a_final_wait() {
        let (outcome, tally, delays, _) = run_with_answers(DEFAULT_RETRY, Vec::new()).await;
        assert_eq!(outcome, Err(conflict(5)));
        assert_eq!(
            tally,
            RetryTally {
                attempts: 5,
                conflicts: 5
            }
        );
        assert_eq!(delays.len(), 4);
        for delay in delays {
            assert!(delay >= Duration::from_millis(10) && delay <= Duration::from_millis(11));
        }
    }

    #[tokio::test]
    async fn default_backoff_makes_four_attempts_with_growing_delays() {
        let (outcome, tally, delays, _) = run_with_answers(DEFAULT_BACKOFF, Vec::new()).await;
        assert_eq!(outcome, Err(conflict(4)));
        assert_eq!(tally.attempts, 4);
        let bases = [10, 50, 250].map(Duration::from_millis);
        assert_eq!(delays.len(), 3);
        for (delay, base) in delays.iter().zip(bases) {
            assert!(
                *delay >= base && *delay <= base.mul_f64(1.1),
                "{delay:?} for {base:?}"
            );
        }
    }

    #[tokio::test]
    async fn other_errors_end_the_loop_at_once() {
        let not_found = ClientError::NotFound {
            message: "gone".into(),
        };
        let answers = vec![Err(conflict(1)), Err(not_found.clone())];
        let (outcome, tally, delays, _) = run_with_answers(DEFAULT_RETRY, answers).await;
        assert_eq!(outcome, Err(not_found));
        assert_eq!(
            tally,
            RetryTally {
                attempts: 2,
                conflicts: 1
            }
        );
        assert_eq!(delays.len(), 1);
    }

    #[tokio::test]
    async fn a_backoff_without_steps_runs_nothing() {
        let no_steps = Backoff {
            steps: 0,
            ..DEFAULT_RETRY
        };
        let (outcome, tally, delays, seen) = run_with_answers(no_steps, vec![Ok(1)]).await;
        assert!(matches!(outcome, Err(ClientError::Invalid { .. })));
        assert_eq!(tally, RetryTally::default());
        assert!(delays.is_empty() && seen.is_empty());
    }

    #[tokio::test]
    async fn outside_the_loop_there_is_no_attempt_number() {
        assert_eq!(current_retry_attempt(), None);
    }

    /// Runs an adaptive loop for `key` whose every attempt conflicts, with the top of each window
    /// as the draw; answers the delays asked for and the tally.
    async fn adaptive_delays(history: &ConflictHistory, key: &str) -> (Vec<Duration>, RetryTally) {
        let sleeper = RecordingSleeper::default();
        let mut schedule =
            AdaptiveRetry::with_random(history, key, crate::DEFAULT_ADAPTIVE_BACKOFF, || 0.999);
        let mut calls = 0;
        let (outcome, tally) = retry_on_conflict_scheduled(&mut schedule, &sleeper, || {
            calls += 1;
            let answer: Result<u32, ClientError> = Err(conflict(calls));
            async move { answer }
        })
        .await;
        assert!(outcome.unwrap_err().is_conflict());
        let delays = sleeper.delays.lock().unwrap().clone();
        (delays, tally)
    }

    #[tokio::test]
    async fn adaptive_retries_a_cold_key_at_once_then_backs_off_more_each_time() {
        let history = ConflictHistory::default();
        let (delays, tally) = adaptive_delays(&history, "cold").await;
        assert_eq!(tally.attempts, 5);
        assert_eq!(tally.conflicts, 5);
        assert_eq!(delays.len(), 4);
        assert_eq!(delays[0], Duration::ZERO);
        assert!(
            delays.windows(2).all(|pair| pair[1] > pair[0]),
            "{delays:?}"
        );
        // Every retry's conflict was remembered (the last attempt's is not: no retry follows).
        assert!(history.hotness("cold", Instant::now()) > 3.5);
    }

    #[tokio::test]
    async fn adaptive_waits_even_before_the_first_retry_of_a_hot_key() {
        let history = ConflictHistory::default();
        for _ in 0..200 {
            history.record_conflict("hot", Instant::now());
        }
        let (hot_delays, _) = adaptive_delays(&history, "hot").await;
        let (cold_delays, _) = adaptive_delays(&ConflictHistory::default(), "cold").await;
        assert!(hot_delays[0] > Duration::ZERO);
        assert!(
            hot_delays[1] > cold_delays[1],
            "{hot_delays:?} vs {cold_delays:?}"
        );
    }
}
