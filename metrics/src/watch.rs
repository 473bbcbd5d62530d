//! Watch metrics: open watchers, events and bookmarks sent, and watchers canceled because they
//! could not keep up. Plain handles for the watch hub to call; the hub owns no Prometheus types.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use crate::registration::{counter, counter_vec, gauge};

/// Which of a watcher's two buffer bounds it hit when the member ended it `slow_consumer`: the
/// `limit` label of `revkv_watch_slow_consumer_cancels_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchBufferBound {
    /// `--watch-buffer-messages`.
    Messages,
    /// `--watch-buffer-bytes`.
    Bytes,
}

impl WatchBufferBound {
    fn label(self) -> &'static str {
        match self {
            WatchBufferBound::Messages => "messages",
            WatchBufferBound::Bytes => "bytes",
        }
    }
}

/// The watch metrics of one member.
#[derive(Clone, Debug)]
pub struct WatchMetrics {
    watchers: IntGauge,
    events_sent_total: IntCounter,
    bookmarks_sent_total: IntCounter,
    slow_consumer_cancels_total: IntCounterVec,
    buffered_bytes: IntGauge,
}

impl WatchMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(WatchMetrics {
            watchers: gauge(
                registry,
                "revkv_watch_watchers",
                "Watch streams open on this member.",
            )?,
            events_sent_total: counter(
                registry,
                "revkv_watch_events_sent_total",
                "Events sent to watchers (each PUT or DELETE event counts once).",
            )?,
            bookmarks_sent_total: counter(
                registry,
                "revkv_watch_bookmarks_sent_total",
                "BOOKMARK messages sent to watchers.",
            )?,
            slow_consumer_cancels_total: slow_consumer_cancels(registry)?,
            buffered_bytes: gauge(
                registry,
                "revkv_watch_buffered_bytes",
                "Bytes of key-values queued in watchers' buffers, waiting for their readers.",
            )?,
        })
    }

    /// A watch stream opened; pair it with exactly one [`WatchMetrics::watcher_closed`].
    pub fn watcher_opened(&self) {
        self.watchers.inc();
    }

    /// A watch stream ended, for whatever reason.
    pub fn watcher_closed(&self) {
        self.watchers.dec();
    }

    /// Counts `events` events sent in one message.
    pub fn record_events_sent(&self, events: u64) {
        self.events_sent_total.inc_by(events);
    }

    pub fn record_bookmark_sent(&self) {
        self.bookmarks_sent_total.inc();
    }

    /// Sets `revkv_watch_buffered_bytes` to what the watch hub's buffers hold now; read just
    /// before each scrape, so the hub's hot path moves one counter and no gauge.
    pub fn observe_buffered_bytes(&self, bytes: usize) {
        self.buffered_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

/// Counts one open watcher for as long as it lives: [`WatchMetrics::track_watcher`] increments the
/// gauge and dropping the guard decrements it, so an early return can never leak a watcher. The
/// member ends a watcher that falls too far behind through its guard, so that the end is counted
/// when the member decides it, even if the client never reads far enough to see it.
#[derive(Debug)]
pub struct WatcherGuard {
    watchers: IntGauge,
    slow_consumer_cancels_total: IntCounterVec,
}

impl WatcherGuard {
    /// The member ended this watcher with reason `slow_consumer`, its buffer full by `bound`.
    pub fn record_slow_consumer_cancel(&self, bound: WatchBufferBound) {
        self.slow_consumer_cancels_total
            .with_label_values(&[bound.label()])
            .inc();
    }
}

/// `revkv_watch_slow_consumer_cancels_total{limit}`, with both series present from the start.
fn slow_consumer_cancels(registry: &Registry) -> prometheus::Result<IntCounterVec> {
    let cancels = counter_vec(
        registry,
        "revkv_watch_slow_consumer_cancels_total",
        "Watchers canceled with reason slow_consumer because they fell too far behind, by the \
         buffer bound they hit (limit: messages or bytes).",
        &["limit"],
    )?;
    for bound in [WatchBufferBound::Messages, WatchBufferBound::Bytes] {
        cancels.with_label_values(&[bound.label()]);
    }
    Ok(cancels)
}

impl WatchMetrics {
    /// Counts a watch stream as open until the returned guard is dropped.
    pub fn track_watcher(&self) -> WatcherGuard {
        self.watcher_opened();
        WatcherGuard {
            watchers: self.watchers.clone(),
            slow_consumer_cancels_total: self.slow_consumer_cancels_total.clone(),
        }
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.watchers.dec();
    }
}
