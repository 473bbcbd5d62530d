//! Seeds run as CI runs them: the same seed twice gives the same trace, and a fixed set of
//! seeds under every kind of fault is clean.

use std::time::Duration;

use revkv_sim::{run_seed, FaultKind, RunReport, SimOptions};

/// Runs `seed`, or fails the test with why it could not run (a `RUSTFLAGS` variable that dropped
/// `--cfg tokio_unstable`, say) in words rather than a debug dump.
pub fn run(seed: u64, options: &SimOptions) -> RunReport {
    run_seed(seed, options).unwrap_or_else(|error| panic!("seed {seed} did not run: {error}"))
}

fn short_run() -> SimOptions {
    SimOptions {
        workload: Duration::from_secs(10),
        ..SimOptions::default()
    }
}

#[test]
fn the_same_seed_runs_the_same_events_and_another_seed_does_not() {
    let first = run(7, &short_run());
    let again = run(7, &short_run());
    let other = run(8, &short_run());
    assert!(
        first.operations > 0 && first.trace.len() > 1_000,
        "the run did something"
    );
    assert_eq!(first.trace.len(), again.trace.len());
    assert_eq!(first.trace.fingerprint(), again.trace.fingerprint());
    assert_ne!(first.trace.fingerprint(), other.trace.fingerprint());
}

/// The seeds CI runs on every change, all fault kinds on: about a minute on two cores.
const CI_SEEDS: std::ops::RangeInclusive<u64> = 1..=200;

#[test]
fn a_fixed_set_of_seeds_under_every_fault_passes_every_check() {
    let options = SimOptions::default();
    let next = std::sync::atomic::AtomicU64::new(*CI_SEEDS.start());
    let failures = std::sync::Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if seed > *CI_SEEDS.end() {
                    return;
                }
                let report = run(seed, &options);
                assert!(report.operations > 0, "seed {seed} ran no operation");
                if let Some(violation) = report.violations.first() {
                    let failure = format!(
                        "seed {seed}: {violation} (replay: scripts/sim.sh --replay {seed})"
                    );
                    failures.lock().expect("the failures").push(failure);
                }
            });
        }
    });
    let failures = failures.into_inner().expect("the failures");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Seeds that once found a bug, each run again on every change. The seed's run changes with the
/// code, so each bug also has a test of its own next to the code it fixed; these keep the
/// original circumstances in play.
/// - 865 (2026-11-28, ce9695d): a crash at the fsync of a new raft log segment's header left the
///   segment file without a header, and the member refused to start on it
///   (`storage/tests/log_store.rs`, `a_newest_segment_whose_header_a_crash_lost_...`).
/// - 1050, 7177, 9556 (2026-11-28, 0d004c1, bugs of the simulator): a member whose add timed out
///   was in the leader's uncommitted membership when the run read it, the next leader dropped it,
///   and the run waited for it to converge (the run follows the membership after healing now).
/// - 5303 (the same soak): a replacement whose add failed still removed a member, shrinking the
///   cluster below three (`membership.rs` checks the bounds at each step now).
/// - 9069 (the same soak): a sleep armed while a member's clock ran slow kept its slow deadline
///   after the clock kept time again, stalling replication for a minute (`revkv_raft::clock`'s
///   `a_sleep_armed_while_the_clock_ran_slow_ends_on_time_once_it_keeps_time_again`).
///
/// Each seed runs with the fault kinds it was found under: another set of kinds makes it another
/// run.
const REGRESSION_SEEDS: [(u64, FoundUnder); 6] = [
    (865, FoundUnder::FaultsBeforeClocks),
    (1050, FoundUnder::AllFaults),
    (5303, FoundUnder::AllFaults),
    (7177, FoundUnder::AllFaults),
    (9069, FoundUnder::AllFaults),
    (9556, FoundUnder::AllFaults),
];

/// The fault kinds a regression seed was found under.
#[derive(Clone, Copy)]
enum FoundUnder {
    /// Every kind there was before clock faults (2026-11-28).
    FaultsBeforeClocks,
    AllFaults,
}

impl FoundUnder {
    fn kinds(self) -> Vec<FaultKind> {
        let before_clocks = |kind: &FaultKind| *kind != FaultKind::Clock;
        match self {
            FoundUnder::FaultsBeforeClocks => {
                FaultKind::ALL.into_iter().filter(before_clocks).collect()
            }
            FoundUnder::AllFaults => FaultKind::ALL.to_vec(),
        }
    }
}

#[test]
fn the_seeds_that_found_bugs_pass_every_check() {
    for (seed, found_under) in REGRESSION_SEEDS {
        let options = SimOptions {
            faults: found_under.kinds(),
            ..SimOptions::default()
        };
        let report = run(seed, &options);
        assert!(report.operations > 0, "seed {seed} ran no operation");
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
    }
}
