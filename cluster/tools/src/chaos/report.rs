//! The report of one run: what was done (operations by type and outcome, faults by type), what
//! the checkers found (each violation with the slice of history that shows it), and the seed that
//! replays the same schedule.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::check::Violation;
use super::history::{Operation, Outcome};
use super::leaderships::LeadershipSeen;
use super::nemesis::InjectedFault;
use super::proxy::ProxyCounts;

/// How many violations the report prints in full (all are counted).
const VIOLATIONS_PRINTED: usize = 20;
/// How many classes of failure reason the report lists.
const REASONS_PRINTED: usize = 8;

/// A failure reason without the parts that differ between occurrences: the status and the error
/// code of an answer, or the first words of a transport error without its details in brackets.
fn reason_class(reason: &str) -> String {
    if let Some(code_at) = reason.find("\"code\":\"") {
        let status = reason.split_whitespace().next().unwrap_or_default();
        let code = &reason[code_at + 8..];
        let code = code.split('"').next().unwrap_or_default();
        return format!("{status} {code}");
    }
    let without_details = reason.split(" (").next().unwrap_or(reason);
    without_details
        .split_whitespace()
        .take(6)
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub duration: Duration,
    /// Operations by (type, outcome).
    pub operations: BTreeMap<(&'static str, &'static str), usize>,
    /// Why operations failed or ended unknown, by the reason's first words.
    pub failure_reasons: BTreeMap<String, usize>,
    pub faults: Vec<InjectedFault>,
    /// What the link proxies did to the members' traffic.
    pub proxies: ProxyCounts,
    /// Watch streams: name, segments (one per connection), messages.
    pub watches: Vec<(String, usize, usize)>,
    pub final_revision: u64,
    pub compact_revision: u64,
    /// New raft terms with a leader that the harness saw (the lease bounds allow a TTL for each).
    pub leaderships: Vec<LeadershipSeen>,
    /// What the leader-claims checker had to go on: status answers naming a leader, and members
    /// the nemesis cut off from a majority.
    pub leader_claims_checked: (usize, usize),
    pub violations: Vec<Violation>,
    /// A failure of the harness or the cluster that ended the run before it could be checked.
    pub aborted: Option<String>,
    /// Where the members' data and logs are (kept when the run is not clean).
    pub directory: Option<PathBuf>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.aborted.is_none()
    }

    pub fn count_operations(&mut self, operations: &[Operation]) {
        for operation in operations {
            let key = (operation.request.name(), operation.outcome_name());
            *self.operations.entry(key).or_default() += 1;
            if let Outcome::Failed { reason } | Outcome::Unknown { reason } = &operation.outcome {
                *self
                    .failure_reasons
                    .entry(reason_class(reason))
                    .or_default() += 1;
            }
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_run_summary(out)?;
        self.write_operations(out)?;
        self.write_failure_reasons(out)?;
        self.write_faults_and_leaderships(out)?;
        self.write_proxies_and_watches(out)?;
        self.write_verdict(out)
    }
}

/// The parts of the printed report, in the order they appear.
impl Report {
    /// The heading, the seed (with how to replay it) and the run's length and revisions.
    fn write_run_summary(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(out, "revkv chaos report")?;
        writeln!(
            out,
            "  seed {} (rerun with --seed {})",
            self.seed, self.seed
        )?;
        writeln!(
            out,
            "  duration {:?}, final revision {}, compacted at {}",
            self.duration, self.final_revision, self.compact_revision
        )
    }

    /// The operations' total, then one line per type with the count of each outcome.
    fn write_operations(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total: usize = self.operations.values().sum();
        writeln!(out, "operations ({total}):")?;
        let mut by_type: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((name, outcome), count) in &self.operations {
            by_type
                .entry(name)
                .or_default()
                .push(format!("{outcome} {count}"));
        }
        for (name, outcomes) in by_type {
            writeln!(out, "  {name:<20} {}", outcomes.join(", "))?;
        }
        Ok(())
    }

    /// The commonest classes of failure reason, most frequent first (at most
    /// [`REASONS_PRINTED`]).
    fn write_failure_reasons(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut reasons: Vec<(&String, &usize)> = self.failure_reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1));
        writeln!(out, "why operations failed or ended unknown:")?;
        for (reason, count) in reasons.iter().take(REASONS_PRINTED) {
            writeln!(out, "  {count:>8}  {reason}")?;
        }
        Ok(())
    }

    /// The faults counted by type, the leaderships seen, then every fault with its time and
    /// detail (the leaderships come between so the counts stay at the top).
    fn write_faults_and_leaderships(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut fault_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for fault in &self.faults {
            *fault_counts.entry(fault.name).or_default() += 1;
        }
        writeln!(out, "faults ({}): {fault_counts:?}", self.faults.len())?;
        let leaderships: Vec<String> = self
            .leaderships
            .iter()
            .map(|seen| format!("term {} by {:.3}s", seen.term, seen.by.as_secs_f64()))
            .collect();
        writeln!(
            out,
            "leaderships seen ({}): {}",
            leaderships.len(),
            leaderships.join(", ")
        )?;
        let (answers, isolations) = self.leader_claims_checked;
        writeln!(
            out,
            "leader claims checked: {answers} answers naming a leader, {isolations} members cut off from a majority"
        )?;
        for fault in &self.faults {
            writeln!(
                out,
                "  {:>8.3}s {:<20} {}",
                fault.at.as_secs_f64(),
                fault.name,
                fault.detail
            )?;
        }
        Ok(())
    }

    /// What the link proxies did, then each watch stream's connections and messages.
    fn write_proxies_and_watches(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proxies = self.proxies;
        writeln!(
            out,
            "link proxies: {} connections refused, {} cut by partitions, {} lost, {} chunks delayed",
            proxies.refused, proxies.cut, proxies.lost, proxies.delayed
        )?;
        writeln!(out, "watch streams:")?;
        for (name, segments, messages) in &self.watches {
            writeln!(
                out,
                "  {name:<20} {segments} connections, {messages} messages"
            )?;
        }
        Ok(())
    }

    /// Why the run aborted (if it did), the violations counted by kind and the first
    /// [`VIOLATIONS_PRINTED`] in full, where the kept data is, and last CLEAN or FAILED (with no
    /// line ending, as the caller adds its own).
    fn write_verdict(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(reason) = &self.aborted {
            writeln!(out, "ABORTED: {reason}")?;
        }
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for violation in &self.violations {
            *kinds.entry(violation.kind).or_default() += 1;
        }
        writeln!(out, "violations: {} {kinds:?}", self.violations.len())?;
        for violation in self.violations.iter().take(VIOLATIONS_PRINTED) {
            writeln!(out, "  {violation}")?;
        }
        if let Some(directory) = &self.directory {
            writeln!(out, "member data and logs: {}", directory.display())?;
        }
        write!(out, "{}", if self.is_clean() { "CLEAN" } else { "FAILED" })
    }
}

#[cfg(test)]
mod tests {
    use super::reason_class;

    #[test]
    fn failure_reasons_are_grouped_without_what_differs_between_them() {
        let answer = r#"503 {"error":{"code":"unavailable","message":"no leader after 1.2s"}}"#;
        assert_eq!(reason_class(answer), "503 unavailable");
        let refused = "connect error: Connection refused (os error 111)";
        assert_eq!(reason_class(refused), "connect error: Connection refused");
    }
}
