//! The watch hub's limits: every buffer, batch and count it keeps is bounded by one of these.

use std::time::Duration;

use crate::error::NodeError;

/// Bounds on the watch hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchLimits {
    /// Messages one stream may have waiting for its reader. A synced reader that lets it fill is
    /// canceled with `slow_consumer` (etcd uses 128 too).
    pub stream_buffer_messages: usize,
    /// Bytes of key-values one watcher's buffer may hold once it holds anything: a live revision
    /// that would take it past this cancels a synced reader with `slow_consumer`, as a full
    /// buffer does. A single larger revision still passes into an empty buffer.
    pub stream_buffer_bytes: usize,
    /// Most watches open on one member at once; more answer `unavailable`.
    pub max_watchers: usize,
    /// Most events read from history in one batch (whole revisions, so a revision larger than
    /// this is still read whole).
    pub read_batch_events: usize,
    /// A catching-up watch joins the live stream once it misses at most this many revisions; they
    /// are read while the hub waits, so this bounds that pause.
    pub handover_max_revisions: u64,
    /// Catch-up history reads running at once.
    pub concurrent_catch_up_reads: usize,
    /// Periodic bookmarks for a stream that names no interval; `None` turns them off.
    pub default_progress_interval: Option<Duration>,
    /// The shortest interval a stream may ask for.
    pub min_progress_interval: Duration,
    /// The longest interval a stream may ask for.
    pub max_progress_interval: Duration,
}

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits {
            stream_buffer_messages: 128,
            // With etcd's largest request (1.5 MiB) a revision can be that large; 128 of them
            // would pin 192 MiB for one stalled reader.
            stream_buffer_bytes: 16 * 1024 * 1024,
            max_watchers: 65_536,
            read_batch_events: 1024,
            handover_max_revisions: 32,
            concurrent_catch_up_reads: 2,
            // etcd's default progress-notify interval.
            default_progress_interval: Some(Duration::from_secs(600)),
            min_progress_interval: Duration::from_millis(10),
            max_progress_interval: Duration::from_secs(24 * 3600),
        }
    }
}

/// The largest `stream_buffer_bytes`: a gRPC stream's queue counts its room in a semaphore's
/// `u32` permits.
pub const MOST_STREAM_BUFFER_BYTES: usize = u32::MAX as usize;

impl WatchLimits {
    /// Checks that the limits fit together.
    pub fn check(&self) -> Result<(), String> {
        let hand_over_messages = self.handover_max_revisions as usize + 1;
        if self.stream_buffer_messages <= hand_over_messages {
            return Err(format!(
                "the watch stream buffer ({}) must hold more than a hand-over ({} messages)",
                self.stream_buffer_messages, hand_over_messages
            ));
        }
        if self.max_watchers == 0
            || self.stream_buffer_bytes == 0
            || self.read_batch_events == 0
            || self.concurrent_catch_up_reads == 0
        {
            return Err("watch limits must be at least 1".into());
        }
        if self.stream_buffer_bytes > MOST_STREAM_BUFFER_BYTES {
            return Err(format!(
                "the watch buffer bytes ({}) must be at most {MOST_STREAM_BUFFER_BYTES} (4 GiB)",
                self.stream_buffer_bytes
            ));
        }
        if self.min_progress_interval > self.max_progress_interval {
            return Err("the minimum progress interval exceeds the maximum".into());
        }
        Ok(())
    }

    /// The periodic bookmark interval for a stream that asked for `requested` (`None`: the
    /// member default). Zero turns periodic bookmarks off for that stream.
    pub fn progress_interval(
        &self,
        requested: Option<Duration>,
    ) -> Result<Option<Duration>, NodeError> {
        match requested {
            None => Ok(self.default_progress_interval),
            Some(interval) if interval.is_zero() => Ok(None),
            Some(interval)
                if interval < self.min_progress_interval
                    || interval > self.max_progress_interval =>
            {
                Err(NodeError::Invalid(format!(
                    "progress_notify_ms must be 0 or between {} and {}",
                    self.min_progress_interval.as_millis(),
                    self.max_progress_interval.as_millis()
                )))
            }
            Some(interval) => Ok(Some(interval)),
        }
    }
}
