//! Consistency-check metrics: how many checks of the members' replica hashes this member ran, by
//! result, so an operator sees that the check runs at all (`ok` rising), that it could not
//! compare (`skipped`: too few members answered, or compactions kept moving the revision), and
//! when it found members that disagree (`mismatch`, which also raises the CORRUPT alarm).

use prometheus::{IntCounterVec, Registry};

use crate::registration::counter_vec;

/// How one consistency check ended: the bounded label set of `revkv_corruption_checks_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorruptionCheckResult {
    /// Every member that answered holds the same data.
    Ok,
    /// Some member's hash differs from the others' at the same revision.
    Mismatch,
    /// Nothing could be compared (too few answers, or compactions moved the revision each time).
    Skipped,
}

impl CorruptionCheckResult {
    fn label(self) -> &'static str {
        match self {
            CorruptionCheckResult::Ok => "ok",
            CorruptionCheckResult::Mismatch => "mismatch",
            CorruptionCheckResult::Skipped => "skipped",
        }
    }
}

/// The consistency-check metrics of one member.
#[derive(Clone, Debug)]
pub struct ConsistencyMetrics {
    checks_total: IntCounterVec,
}

impl ConsistencyMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        let checks_total = counter_vec(
            registry,
            "revkv_corruption_checks_total",
            "Consistency checks this member ran (comparing the members' replica hashes at one \
             revision), by result: ok, mismatch (the CORRUPT alarm is raised) or skipped.",
            &["result"],
        )?;
        // Every result is a series from the start, so `increase()` sees the first mismatch.
        for result in [
            CorruptionCheckResult::Ok,
            CorruptionCheckResult::Mismatch,
            CorruptionCheckResult::Skipped,
        ] {
            checks_total.with_label_values(&[result.label()]);
        }
        Ok(ConsistencyMetrics { checks_total })
    }

    /// Counts one check.
    pub fn record_check(&self, result: CorruptionCheckResult) {
        self.checks_total.with_label_values(&[result.label()]).inc();
    }
}
