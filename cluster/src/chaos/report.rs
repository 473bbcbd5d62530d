//! The report of one run: what was done (operations by type and outcome, faults by type), what
//! the checkers found (each violation with the slice of history that shows it), and the seed that
//! replays the same schedule.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::check::Violation;
use super::history::Operation;
use super::nemesis::InjectedFault;
use super::proxy::ProxyCounts;

/// How many violations the report prints in full (all are counted).
const VIOLATIONS_PRINTED: usize = 20;

#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub duration: Duration,
    /// Operations by (type, outcome).
    pub operations: BTreeMap<(&'static str, &'static str), usize>,
    pub faults: Vec<InjectedFault>,
    /// What the link proxies did to the members' traffic.
    pub proxies: ProxyCounts,
    /// Watch streams: name, segments (one per connection), messages.
    pub watches: Vec<(String, usize, usize)>,
    pub final_revision: u64,
    pub compact_revision: u64,
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
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        )?;
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
        let mut fault_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for fault in &self.faults {
            *fault_counts.entry(fault.name).or_default() += 1;
        }
        writeln!(out, "faults ({}): {fault_counts:?}", self.faults.len())?;
        for fault in &self.faults {
            writeln!(
                out,
                "  {:>8.3}s {:<20} {}",
                fault.at.as_secs_f64(),
                fault.name,
                fault.detail
            )?;
        }
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
        if let Some(reason) = &self.aborted {
            writeln!(out, "ABORTED: {reason}")?;
        }
        writeln!(out, "violations: {}", self.violations.len())?;
        for violation in self.violations.iter().take(VIOLATIONS_PRINTED) {
            writeln!(out, "  {violation}")?;
        }
        if let Some(directory) = &self.directory {
            writeln!(out, "member data and logs: {}", directory.display())?;
        }
        write!(out, "{}", if self.is_clean() { "CLEAN" } else { "FAILED" })
    }
}
