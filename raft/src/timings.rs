//! How long the two disk-bound steps of replication take: a durable log append (one fsync) and the
//! apply of a chunk of committed entries. The raft layer measures them and hands the durations to
//! an observer the embedder supplies (the node feeds its Prometheus histograms), so this crate
//! stays free of any metrics library.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Receives the durations. Called on the raft storage tasks: implementations must be cheap.
pub trait StorageTimingObserver: Send + Sync + 'static {
    /// `entries` log entries became durable `elapsed` after the first of them was queued for the
    /// log writer (the wait in its queue, the write and the fsync).
    fn log_appended(&self, elapsed: Duration, entries: usize);
    /// Applying a chunk of `entries` committed entries to the state file took `elapsed`.
    fn entries_applied(&self, elapsed: Duration, entries: usize);
}

/// An optional observer, shared by the log storage and the state machine.
#[derive(Clone, Default)]
pub struct StorageTimings {
    observer: Option<Arc<dyn StorageTimingObserver>>,
}

impl StorageTimings {
    pub fn new(observer: Arc<dyn StorageTimingObserver>) -> Self {
        StorageTimings {
            observer: Some(observer),
        }
    }

    pub(crate) fn log_appended(&self, elapsed: Duration, entries: usize) {
        if let Some(observer) = &self.observer {
            observer.log_appended(elapsed, entries);
        }
    }

    pub(crate) fn entries_applied(&self, elapsed: Duration, entries: usize) {
        if let Some(observer) = &self.observer {
            observer.entries_applied(elapsed, entries);
        }
    }
}

impl fmt::Debug for StorageTimings {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_observed(formatter, self.observer.is_some())
    }
}

/// Receives each peer's append timeout as it changes, and every append that timed out
/// (`peer/append_timeout.rs`). Called on openraft's replication tasks: implementations must be
/// cheap.
pub trait PeerAppendObserver: Send + Sync + 'static {
    fn append_timeout_changed(&self, peer: u64, timeout: Duration);
    fn append_timed_out(&self, peer: u64);
}

/// An optional [`PeerAppendObserver`], carried in the member's configuration.
#[derive(Clone, Default)]
pub struct PeerAppendTimings {
    pub(crate) observer: Option<Arc<dyn PeerAppendObserver>>,
}

impl PeerAppendTimings {
    pub fn new(observer: Arc<dyn PeerAppendObserver>) -> Self {
        PeerAppendTimings {
            observer: Some(observer),
        }
    }
}

impl fmt::Debug for PeerAppendTimings {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_observed(formatter, self.observer.is_some())
    }
}

/// How an optional observer shows in `Debug`: whether there is one, not what it is.
pub(crate) fn write_observed(formatter: &mut fmt::Formatter<'_>, observed: bool) -> fmt::Result {
    formatter.write_str(if observed { "observed" } else { "unobserved" })
}
