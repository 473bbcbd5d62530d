//! A run's event trace: every message the network carried or lost, every fault, every client
//! operation and its answer, stamped with the simulated time. Two runs of one seed must produce
//! the same trace; its fingerprint is how a test checks that, and a replay prints it.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The most events a trace keeps; later ones only count towards the fingerprint. A bound, so
/// that a long soak cannot exhaust memory; a replay is of one seed and rarely reaches it.
pub const MAX_TRACE_EVENTS: usize = 2_000_000;

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Simulated time since the run began.
    pub at: Duration,
    /// The member it happened on or was sent from, if any.
    pub member: Option<u64>,
    /// The key it concerns, if any.
    pub key: Option<String>,
    pub text: String,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let member = self
            .member
            .map(|id| format!("m{id}"))
            .unwrap_or_else(|| "--".into());
        write!(
            formatter,
            "{:>11.6}s {member:<3} {}",
            self.at.as_secs_f64(),
            self.text
        )
    }
}

/// What a replay prints: everything, or the events of one key or one member.
#[derive(Clone, Debug, Default)]
pub struct TraceFilter {
    pub key: Option<String>,
    pub member: Option<u64>,
}

impl TraceFilter {
    pub fn admits(&self, event: &TraceEvent) -> bool {
        let key_matches = self.key.is_none() || event.key == self.key;
        let member_matches = self.member.is_none() || event.member == self.member;
        key_matches && member_matches
    }
}

#[derive(Default)]
struct Recorded {
    events: Vec<TraceEvent>,
    count: u64,
    fingerprint: xxhash_rust::xxh3::Xxh3Default,
    redacted: Option<String>,
}

/// The shared trace of one run. Cloning shares it.
#[derive(Clone)]
pub struct Trace {
    started: Instant,
    recorded: Arc<Mutex<Recorded>>,
}

impl Trace {
    /// A trace whose times count from now (the simulated clock).
    pub fn start() -> Self {
        Trace {
            started: Instant::now(),
            recorded: Arc::default(),
        }
    }

    /// From now on, `directory` (the run's own temporary directory, whose name differs from run
    /// to run) is written as `$RUN` in the events' text, so that it does not change the
    /// fingerprint.
    pub fn redact_directory(&self, directory: &std::path::Path) {
        lock(&self.recorded).redacted = Some(directory.display().to_string());
    }

    /// Records one event.
    pub fn record(&self, member: Option<u64>, key: Option<&str>, mut text: String) {
        if let Some(redacted) = lock(&self.recorded).redacted.as_deref() {
            if text.contains(redacted) {
                text = text.replace(redacted, "$RUN");
            }
        }
        let event = TraceEvent {
            at: self.started.elapsed(),
            member,
            key: key.map(str::to_owned),
            text,
        };
        let mut recorded = lock(&self.recorded);
        let line = event.to_string();
        recorded.fingerprint.update(line.as_bytes());
        recorded.fingerprint.update(b"\n");
        recorded.count += 1;
        if recorded.events.len() < MAX_TRACE_EVENTS {
            recorded.events.push(event);
        }
    }

    /// Simulated time since the run began.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// A hash of every event recorded so far, in order: equal for two runs that did the same.
    pub fn fingerprint(&self) -> u64 {
        lock(&self.recorded).fingerprint.digest()
    }

    /// How many events were recorded (kept or not).
    pub fn len(&self) -> u64 {
        lock(&self.recorded).count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kept events the filter admits.
    pub fn events(&self, filter: &TraceFilter) -> Vec<TraceEvent> {
        let recorded = lock(&self.recorded);
        recorded
            .events
            .iter()
            .filter(|event| filter.admits(event))
            .cloned()
            .collect()
    }
}

/// Every holder leaves the trace whole (one push per lock), so a panic elsewhere cannot
/// corrupt it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
