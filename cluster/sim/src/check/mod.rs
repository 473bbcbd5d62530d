//! The checks every run must pass. Each takes the run's plain records (`crate::history`) and
//! answers the violations it found; an empty answer is a clean run.

pub mod leases;
pub mod linearizability;
pub mod replicas;
pub mod watches;

use std::fmt;

/// One thing a run did that revkv promises never happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which promise: "stale read", "lost write", ...
    pub kind: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}: {}", self.kind, self.detail)
    }
}

/// The most violations a check reports: one is enough to fail the seed, and a few show the
/// pattern.
pub const MAX_VIOLATIONS_REPORTED: usize = 20;

/// Collects violations up to the bound.
#[derive(Default)]
pub struct Violations(Vec<Violation>);

impl Violations {
    pub fn add(&mut self, kind: &'static str, detail: String) {
        if self.0.len() < MAX_VIOLATIONS_REPORTED {
            self.0.push(Violation { kind, detail });
        }
    }

    pub fn into_vec(self) -> Vec<Violation> {
        self.0
    }
}
