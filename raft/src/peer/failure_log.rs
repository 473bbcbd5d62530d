//! Rate-limited warnings about calls to another member that fail, so that a member that is down
//! or cut off for an hour costs a few log lines, not one per heartbeat and retry.
//!
//! openraft retries a failing peer on every heartbeat and after every replication backoff, and
//! logs each failure itself. The member's default log filter (`crate::DEFAULT_LOG_FILTER`) keeps
//! those per-attempt lines out, and the peer connections report every failure and every answer
//! here instead: the first failure of a run is logged at once, then at most one line per
//! `LOG_INTERVAL` with how many failures it stands for, and the first answer after a run of
//! failures is logged once.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one warning per peer per this interval while its calls keep failing. Ten seconds keeps
/// a partition visible in the log without letting it flood it (openraft retries every heartbeat).
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The failures of calls to one peer since its last answer.
#[derive(Debug)]
struct FailureRun {
    /// Failed calls since the peer last answered.
    failures: u64,
    /// Failed calls since the last warning, which the next warning reports.
    not_logged: u64,
    last_logged: Instant,
}

/// Every peer's run of failures, shared by all the connections of one member. Holds an entry
/// only for a peer whose last call failed, so its size is bounded by the membership.
#[derive(Debug, Default)]
pub struct PeerFailureLog {
    /// How many peers have a run of failures now: zero on a healthy cluster, so a successful call
    /// reads one atomic and takes no lock.
    failing_peers: AtomicUsize,
    runs: Mutex<BTreeMap<u64, FailureRun>>,
    /// Warnings logged so far, for tests and metrics.
    warnings_logged: AtomicU64,
}

impl PeerFailureLog {
    /// Counts a failed call to `peer`, and warns when its run of failures starts or when
    /// `LOG_INTERVAL` has passed since the last warning about it.
    pub fn failed(&self, peer: u64, error: &impl Display) {
        let now = Instant::now();
        let mut runs = self.runs();
        let run = runs.entry(peer).or_insert_with(|| {
            self.failing_peers.fetch_add(1, Ordering::AcqRel);
            FailureRun {
                failures: 0,
                not_logged: 0,
                last_logged: now,
            }
        });
        run.failures += 1;
        let first = run.failures == 1;
        if !first && now.duration_since(run.last_logged) < LOG_INTERVAL {
            run.not_logged += 1;
            return;
        }
        let failures = run.failures;
        let since_last_line = run.not_logged + 1;
        run.not_logged = 0;
        run.last_logged = now;
        drop(runs);
        self.warnings_logged.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            peer,
            failures,
            since_last_line,
            %error,
            "calls to peer {peer} fail ({failures} in a row; at most one line per {}s)",
            LOG_INTERVAL.as_secs()
        );
    }

    /// Ends `peer`'s run of failures, if it had one, with one line saying it answers again.
    pub fn answered(&self, peer: u64) {
        if self.failing_peers.load(Ordering::Acquire) == 0 {
            return;
        }
        let Some(run) = self.runs().remove(&peer) else {
            return;
        };
        self.failing_peers.fetch_sub(1, Ordering::AcqRel);
        tracing::info!(
            peer,
            failures = run.failures,
            "peer {peer} answers again after {} failed calls",
            run.failures
        );
    }

    /// Failed calls to `peer` since it last answered.
    pub fn failures_in_a_row(&self, peer: u64) -> u64 {
        self.runs().get(&peer).map_or(0, |run| run.failures)
    }

    /// Warnings this log has written so far.
    pub fn warnings_logged(&self) -> u64 {
        self.warnings_logged.load(Ordering::Relaxed)
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, FailureRun>> {
        // Every change to the map is one whole insert, update or removal, so a panic elsewhere
        // cannot leave it half-written.
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_is_logged_once_per_interval_and_an_answer_ends_it() {
        let log = PeerFailureLog::default();
        for _ in 0..500 {
            log.failed(2, &"connection refused");
        }
        assert_eq!(log.failures_in_a_row(2), 500);
        assert_eq!(
            log.warnings_logged(),
            1,
            "one line for 500 failures within the interval"
        );
        log.failed(3, &"connection refused");
        assert_eq!(
            log.warnings_logged(),
            2,
            "each peer's first failure is logged"
        );
        log.answered(2);
        assert_eq!(log.failures_in_a_row(2), 0);
        log.failed(2, &"connection refused");
        assert_eq!(log.warnings_logged(), 3, "a new run starts with a line");
    }
}
