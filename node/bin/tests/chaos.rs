//! The short fault-injection run of every CI build: `revkv chaos` (the harness in
//! `revkv_tools::chaos`) against three `revkv serve` processes of this build, with kills, pauses,
//! partitions (of one member or into groups), slow and lossy links, leader transfers, member
//! replacements (the leader's too), growth to five members and back, and compaction, with
//! key-value and lease workloads, then every checker (the lease checker too) over the recorded
//! history. The run must be clean.
//!
//! The seed comes from `REVKV_CHAOS_SEED` or the clock, and is printed, so a failure can be
//! replayed with `scripts/chaos.sh --seed N`. `REVKV_CHAOS_DURATION` (e.g. `90s`) sets the length.

use std::time::Duration;

use revkv_tools::chaos::{run_chaos, ChaosSettings};

/// Long enough for every kind of fault to come up in most schedules, short enough for CI.
const DEFAULT_DURATION: Duration = Duration::from_secs(45);

/// Why a run failed, returned instead of panicked: the test harness prints a returned error last
/// and without a backtrace, so the verdict is what the tail of a CI log shows.
struct Failure(String);

impl std::fmt::Debug for Failure {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str(&self.0)
    }
}

/// `Err(Failure)` with `message` unless `holds`.
fn ensure(holds: bool, message: impl FnOnce() -> String) -> Result<(), Failure> {
    if holds {
        Ok(())
    } else {
        Err(Failure(message()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_chaos_run_is_clean() -> Result<(), Failure> {
    let seed = match std::env::var("REVKV_CHAOS_SEED") {
        Ok(text) => text.parse().expect("REVKV_CHAOS_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock is past 1970")
            .as_secs(),
    };
    let duration = match std::env::var("REVKV_CHAOS_DURATION") {
        Ok(text) => humantime::parse_duration(&text).expect("REVKV_CHAOS_DURATION is a duration"),
        Err(_) => DEFAULT_DURATION,
    };
    println!("chaos seed {seed}, duration {duration:?}");
    let settings = ChaosSettings {
        duration,
        seed,
        workers: 6,
        lease_workers: 2,
        keys: 8,
        binary: env!("CARGO_BIN_EXE_revkv").into(),
        dir: None,
    };
    let report = run_chaos(&settings).await;
    println!("{report}");
    ensure(report.is_clean(), || {
        format!("the chaos run with seed {seed} found problems:\n{report}")
    })?;
    // A run in which nothing happened proves nothing: the workload and the nemesis must have done
    // their part.
    let operations: usize = report.operations.values().sum();
    ensure(operations > 1_000, || {
        format!("only {operations} operations ran")
    })?;
    ensure(!report.faults.is_empty(), || "no fault was injected".into())?;
    // The lease checker needs leases that lived, were renewed and ended.
    let count = |name, outcome| {
        report
            .operations
            .get(&(name, outcome))
            .copied()
            .unwrap_or(0)
    };
    ensure(
        count("lease-grant", "ok") > 10 && count("lease-put", "ok") > 100,
        || {
            format!(
                "too little lease traffic: {} grants and {} leased puts acknowledged",
                count("lease-grant", "ok"),
                count("lease-put", "ok")
            )
        },
    )?;
    ensure(report.final_revision > 100, || {
        format!("the store reached only revision {}", report.final_revision)
    })
}
