//! The checkers the fault harness runs over what it recorded, and the violations they report.
//!
//! - [`states`]: the store's history (changes per revision, values at any revision), built from a
//!   recording watch and checked against the data model as it is built.
//! - [`kv`]: linearizability of the key-value operations, no lost and no phantom writes.
//! - [`leases`]: every leased key deleted when its lease ended (within the documented bounds),
//!   never before, and a lease's keys deleted together; [`revision_clock`] bounds when revisions
//!   happened, for it.
//! - [`leader_claims`]: a member cut off from a majority stops calling itself leader, and the
//!   members it cannot reach stop naming it, once its lease has lapsed.
//! - [`watch`]: the six watch properties, per stream, across resumes.
//! - [`recording`]: how the recording watch's segments become the history, refusing a recording
//!   whose overlapping segments disagree.
//!
//! Every checker has tests that plant a violation in a correct history and require it reported.

pub mod kv;
pub mod leader_claims;
pub mod leases;
pub mod recording;
pub mod revision_clock;
pub mod states;
pub mod watch;

#[cfg(test)]
mod planted;
#[cfg(test)]
mod planted_leases;

use crate::chaos::history::{Operation, Outcome};

/// One thing the checkers found wrong, with the operations that show it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// A short name of the rule broken (`stale-read`, `lost-write`, `watch`, ...).
    pub kind: &'static str,
    pub detail: String,
    /// The smallest slice of the history that shows the violation, one line per operation.
    pub operations: Vec<String>,
}

impl Violation {
    pub fn new(kind: &'static str, detail: String, operations: &[&Operation]) -> Violation {
        Violation {
            kind,
            detail,
            operations: operations
                .iter()
                .map(|operation| describe(operation))
                .collect(),
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}: {}", self.kind, self.detail)?;
        for operation in &self.operations {
            write!(formatter, "\n    {operation}")?;
        }
        Ok(())
    }
}

/// One operation as a line of a report.
pub fn describe(operation: &Operation) -> String {
    let outcome = match &operation.outcome {
        Outcome::Ok { revision, answer } => format!("ok at revision {revision}: {answer:?}"),
        Outcome::Conflict { current } => format!("conflict, current {current:?}"),
        Outcome::NotFound => "not found".to_string(),
        Outcome::Failed { reason } => format!("failed: {reason}"),
        Outcome::Unknown { reason } => format!("outcome unknown: {reason}"),
    };
    format!(
        "op {} (worker {}, member {}) {:?} invoked {:.3}s completed {:.3}s: {outcome}",
        operation.id,
        operation.worker,
        operation.member,
        operation.request,
        operation.invoked.as_secs_f64(),
        operation.completed.as_secs_f64(),
    )
}
