//! Automatic compaction, as etcd's `--auto-compaction-mode` and `--auto-compaction-retention`:
//! keep the last N revisions, or the revisions of the last D of time. Only the leader decides, and
//! it compacts through raft like `POST /v1/compact`, so every member compacts at the same revision
//! and a compaction survives a leader change like any other entry.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use revkv_raft::clock::Instant;
use revkv_storage::Request;
use tokio::sync::watch;

use crate::backend::KvBackend;
use crate::error::NodeError;

/// Most revision samples a periodic compactor keeps: one per tenth of the retention, plus slack.
const MAX_PERIODIC_SAMPLES: usize = 16;

/// What automatic compaction keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Never compact by itself (`POST /v1/compact` still works).
    Off,
    /// Keep the last `keep` revisions, checked every `check_interval`.
    Revisions { keep: u64, check_interval: Duration },
    /// Keep what changed within `retention`, checked every tenth of it.
    Periodic { retention: Duration },
}

impl AutoCompaction {
    /// How often the compactor wakes.
    fn check_interval(&self) -> Option<Duration> {
        match *self {
            AutoCompaction::Off => None,
            AutoCompaction::Revisions { check_interval, .. } => Some(check_interval),
            AutoCompaction::Periodic { retention } => Some(retention / 10),
        }
    }
}

/// Where the periodic compactor remembers which revision was current when.
#[derive(Debug, Default)]
pub struct RevisionSamples {
    samples: VecDeque<(Instant, u64)>,
}

impl RevisionSamples {
    /// Records the revision current at `now`, forgetting the oldest sample beyond the bound.
    pub fn record(&mut self, now: Instant, revision: u64) {
        if self.samples.len() == MAX_PERIODIC_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((now, revision));
    }

    /// The newest revision that was current at least `retention` before `now`: compacting to it
    /// keeps every revision written within the retention.
    pub fn revision_older_than(&self, now: Instant, retention: Duration) -> Option<u64> {
        self.samples
            .iter()
            .rev()
            .find(|(at, _)| now.duration_since(*at) >= retention)
            .map(|(_, revision)| *revision)
    }
}

/// Starts the compactor; it stops when `stop` turns true.
/// It works through any [`KvBackend`], like `POST /v1/compact`, so it depends on no member type.
pub fn spawn<B: KvBackend>(backend: Arc<B>, policy: AutoCompaction, stop: watch::Receiver<bool>) {
    let Some(period) = policy.check_interval() else {
        return;
    };
    tokio::spawn(run(backend, policy, period, stop));
}

async fn run<B: KvBackend>(
    backend: Arc<B>,
    policy: AutoCompaction,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = revkv_raft::clock::interval_at(Instant::now() + period, period);
    let mut samples = RevisionSamples::default();
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let Ok(current) = backend.header().map(|header| header.revision) else {
            continue;
        };
        let target = match policy {
            AutoCompaction::Off => return,
            AutoCompaction::Revisions { keep, .. } => current.checked_sub(keep),
            AutoCompaction::Periodic { retention } => {
                let now = Instant::now();
                samples.record(now, current);
                samples.revision_older_than(now, retention)
            }
        };
        if let Some(target) = target {
            compact_if_leader(backend.as_ref(), target).await;
        }
    }
}

/// Compacts to `target` when this member leads and the store is not compacted that far yet.
async fn compact_if_leader<B: KvBackend>(backend: &B, target: u64) {
    let Ok(status) = backend.status().await else {
        return;
    };
    let leads = status.leader_id == Some(status.member_id);
    if !leads || target <= status.compact_revision {
        return;
    }
    match backend.write(Request::Compact { revision: target }).await {
        Ok(_) => tracing::info!(revision = target, "automatic compaction"),
        // A manual compaction may have gone further meanwhile; nothing is lost by skipping.
        Err(NodeError::Storage(revkv_storage::Error::Compacted { .. })) => {}
        Err(error) => tracing::warn!(%error, revision = target, "automatic compaction failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_compaction_keeps_the_revisions_within_the_retention() {
        let start = Instant::now();
        let mut samples = RevisionSamples::default();
        let minute = Duration::from_secs(60);
        for (minutes, revision) in [(0, 10), (1, 20), (2, 35), (3, 50)] {
            samples.record(start + minute * minutes, revision);
        }
        let now = start + minute * 3;
        assert_eq!(samples.revision_older_than(now, minute * 2), Some(20));
        assert_eq!(samples.revision_older_than(now, minute * 3), Some(10));
        assert_eq!(samples.revision_older_than(now, minute * 4), None);
    }

    #[test]
    fn samples_are_bounded() {
        let start = Instant::now();
        let mut samples = RevisionSamples::default();
        for second in 0..100 {
            samples.record(start + Duration::from_secs(second), second);
        }
        assert_eq!(samples.samples.len(), MAX_PERIODIC_SAMPLES);
        assert_eq!(
            samples.samples.front().unwrap().1,
            100 - MAX_PERIODIC_SAMPLES as u64
        );
    }

    #[test]
    fn the_check_interval_follows_the_mode() {
        assert_eq!(AutoCompaction::Off.check_interval(), None);
        let periodic = AutoCompaction::Periodic {
            retention: Duration::from_secs(3600),
        };
        assert_eq!(periodic.check_interval(), Some(Duration::from_secs(360)));
    }
}
