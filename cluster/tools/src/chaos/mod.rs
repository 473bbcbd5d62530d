//! `revkv chaos`: the fault-injection harness. It starts a three-member cluster as separate
//! `revkv serve` processes behind link proxies, runs a randomized concurrent workload and watches
//! against all members while a nemesis kills, pauses, partitions (one member or groups of them),
//! slows and degrades members, moves leadership, replaces members (the leader too), grows the
//! cluster to five and shrinks it back, and compacts; then it checks everything it recorded:
//!
//! - linearizability of the key-value operations, no lost and no phantom writes ([`check::kv`]);
//! - leases: every leased key deleted when its lease ended, never before ([`check::leases`]);
//! - the watch properties on every stream across resumes ([`check::watch`]);
//! - serializable reads never going backwards on a member;
//! - at the end, equal `/v1/hash` on every member, every member's range equal to the history, and
//!   historical reads at sampled revisions equal to the history.
//!
//! Modules: [`members`] (processes), [`proxy`] (links), [`schedule`], [`nemesis`] and
//! [`membership_faults`] (faults), [`workload`], [`lease_workload`] and [`watchers`] (traffic and
//! its record), [`leaderships`] (leader changes as seen, for the lease bounds), [`history`],
//! [`check`] (over the record), [`store_check`] (the healed store against the history),
//! [`report`], and [`run`] (one run, start to verdict).

pub mod check;
pub mod history;
pub mod leaderships;
pub mod lease_workload;
pub mod members;
pub mod membership_faults;
pub mod nemesis;
pub mod proxy;
pub mod report;
pub mod run;
pub mod schedule;
pub mod store_check;
pub mod watchers;
pub mod workload;

use std::path::PathBuf;
use std::time::Duration;

pub use report::Report;
pub use run::{run_chaos, ChaosSettings};

/// `revkv chaos` options.
#[derive(clap::Args, Clone, Debug)]
pub struct ChaosArgs {
    /// How long the workload and the faults run (then the cluster heals and is checked).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// The seed of the fault schedule and of the workers' choices (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Concurrent workload workers.
    #[arg(long, default_value_t = 6)]
    pub workers: usize,
    /// Concurrent lease workers (grants, keep-alives, revokes, leased puts and reads; 0: none).
    #[arg(long, default_value_t = 2)]
    pub lease_workers: usize,
    /// How many keys the workload spreads over (few keys: many conflicts).
    #[arg(long, default_value_t = 8)]
    pub keys: usize,
    /// The `revkv` binary that runs the members (default: this one).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Where members keep their data and logs (default: a temporary directory, removed after a
    /// clean run and kept after a failed one).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Limits on the options, so a typo cannot start a run that swamps the machine.
const MAX_WORKERS: usize = 64;
const MAX_KEYS: usize = 1_000;
/// One hour: the history and the watch records are kept in memory, and a two-minute run peaked at
/// 160 MB (about 5 GB for an hour).
const MAX_DURATION: Duration = Duration::from_secs(3600);

impl ChaosArgs {
    /// The settings for a run, with defaults filled in and limits checked.
    pub fn settings(&self) -> Result<ChaosSettings, String> {
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(format!("--workers must be 1..={MAX_WORKERS}"));
        }
        if self.lease_workers > MAX_WORKERS {
            return Err(format!("--lease-workers must be 0..={MAX_WORKERS}"));
        }
        if self.keys < 3 || self.keys > MAX_KEYS {
            return Err(format!("--keys must be 3..={MAX_KEYS}"));
        }
        if self.duration > MAX_DURATION {
            return Err(format!("--duration must be at most {MAX_DURATION:?}"));
        }
        let binary = match &self.binary {
            Some(binary) => binary.clone(),
            None => {
                std::env::current_exe().map_err(|error| format!("find this binary: {error}"))?
            }
        };
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| since.as_nanos() as u64)
        });
        Ok(ChaosSettings {
            duration: self.duration,
            seed,
            workers: self.workers,
            lease_workers: self.lease_workers,
            keys: self.keys,
            binary,
            dir: self.dir.clone(),
        })
    }
}

/// `revkv chaos`: runs the harness, prints the report, and exits 0 only for a clean run.
pub async fn run(args: ChaosArgs) -> std::process::ExitCode {
    let settings = match args.settings() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("revkv chaos: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!(
        "revkv chaos: seed {} for {:?} ({} workers, {} lease workers, {} keys)",
        settings.seed, settings.duration, settings.workers, settings.lease_workers, settings.keys
    );
    let report = run_chaos(&settings).await;
    println!("{report}");
    if report.is_clean() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
