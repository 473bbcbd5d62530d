//! `revkv-sim`: runs seeds of the deterministic simulator in parallel and prints each failing
//! seed with the command that replays it, or replays one seed and prints its event trace.

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use revkv_sim::elections::{
    measure_leader_loss, within_twice_a_plain_loss, ElectionSettings, LeaderLoss, Spread,
};
use revkv_sim::trace::TraceFilter;
use revkv_sim::{run_seed, FaultKind, RunReport, SimOptions};

#[derive(Parser, Debug)]
#[command(about = "Deterministic simulation of revkv clusters: soak many seeds or replay one")]
struct Arguments {
    /// How many seeds to run, from --first-seed on.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Seeds run at once, each on its own thread (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// The faults to inject; default all.
    #[arg(long, value_delimiter = ',', value_enum)]
    faults: Option<Vec<FaultKind>>,
    /// Simulated seconds of clients and faults per seed.
    #[arg(long, default_value_t = 20)]
    workload_seconds: u64,
    #[arg(long, default_value_t = 3)]
    members: u64,
    #[arg(long, default_value_t = 3)]
    clients: u64,
    /// Clients that each hold one lease at a time.
    #[arg(long, default_value_t = 1)]
    lease_clients: u64,
    /// Replay this one seed and print its trace instead of soaking.
    #[arg(long)]
    replay: Option<u64>,
    /// With --replay: print only the events of this key.
    #[arg(long)]
    key: Option<String>,
    /// With --replay: print only the events of this member.
    #[arg(long)]
    member: Option<u64>,
    /// Instead of soaking: measure, for each seed, how long three members go without a leader
    /// after each of these ways of losing it (`revkv_sim::elections`), and print the spread.
    #[arg(long, value_delimiter = ',', value_enum)]
    elections: Option<Vec<LeaderLoss>>,
    /// With --elections: the members run without Raft's Pre-Vote.
    #[arg(long)]
    no_pre_vote: bool,
}

impl Arguments {
    fn options(&self) -> SimOptions {
        SimOptions {
            members: self.members,
            clients: self.clients,
            lease_clients: self.lease_clients,
            workload: Duration::from_secs(self.workload_seconds),
            faults: self
                .faults
                .clone()
                .unwrap_or_else(|| FaultKind::ALL.to_vec()),
            ..SimOptions::default()
        }
    }

    /// The command that replays `seed` with these options.
    fn replay_command(&self, seed: u64) -> String {
        let faults: Vec<String> = self
            .options()
            .faults
            .iter()
            .map(|kind| format!("{kind:?}").to_lowercase())
            .collect();
        format!(
            "scripts/sim.sh --replay {seed} --faults {} --workload-seconds {} --members {} --clients {} --lease-clients {}",
            if faults.is_empty() { "''".to_owned() } else { faults.join(",") },
            self.workload_seconds,
            self.members,
            self.clients,
            self.lease_clients
        )
    }
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    if let Some(losses) = &arguments.elections {
        return elections(&arguments, losses);
    }
    match arguments.replay {
        Some(seed) => replay(&arguments, seed),
        None => soak(&arguments),
    }
}

/// Each seed's time without a leader after each loss, then each loss's spread.
fn elections(arguments: &Arguments, losses: &[LeaderLoss]) -> ExitCode {
    let jobs = arguments
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cores| cores.get()));
    let runs: Vec<(u64, LeaderLoss)> = (arguments.first_seed
        ..arguments.first_seed + arguments.seeds)
        .flat_map(|seed| losses.iter().map(move |loss| (seed, *loss)))
        .collect();
    let settings = ElectionSettings {
        pre_vote: !arguments.no_pre_vote,
    };
    let next = AtomicU64::new(0);
    let measured = Mutex::new(Vec::new());
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let Some((seed, loss)) = runs.get(next.fetch_add(1, Ordering::Relaxed) as usize)
                else {
                    return;
                };
                let outcome =
                    std::panic::catch_unwind(AssertUnwindSafe(|| {
                        measure_leader_loss(*seed, *loss, settings)
                    }));
                match outcome {
                    Ok(Ok(leaderless)) => {
                        println!(
                            "seed {seed} {loss:?}: member {} led, then {:?}, after {:.3} s ({:.2} wall s)",
                            leaderless.old_leader,
                            leaderless.new_leader,
                            leaderless.leaderless.as_secs_f64(),
                            leaderless.wall.as_secs_f64()
                        );
                        measured.lock().unwrap_or_else(|p| p.into_inner()).push(leaderless);
                    }
                    Ok(Err(error)) => {
                        println!("seed {seed} {loss:?} FAILED: did not run: {error}");
                        failed.lock().unwrap_or_else(|p| p.into_inner()).push(*seed);
                    }
                    Err(_panic) => {
                        println!("seed {seed} {loss:?} FAILED: panicked");
                        failed.lock().unwrap_or_else(|p| p.into_inner()).push(*seed);
                    }
                }
            });
        }
    });
    let measured = measured.into_inner().unwrap_or_else(|p| p.into_inner());
    let spread_of = |loss: LeaderLoss| Spread::of(&measured, loss);
    for loss in losses {
        if let Some(spread) = spread_of(*loss) {
            println!(
                "{loss:?}: {} seeds, without a leader median {:.3} s, p90 {:.3} s, p99 {:.3} s, max {:.3} s, never elected {}",
                spread.count,
                spread.median.as_secs_f64(),
                spread.p90.as_secs_f64(),
                spread.p99.as_secs_f64(),
                spread.max.as_secs_f64(),
                spread.never_elected
            );
        }
    }
    if let (Some(plain), Some(cut)) = (
        spread_of(LeaderLoss::PowerCut),
        spread_of(LeaderLoss::OutgoingCallsCut),
    ) {
        match within_twice_a_plain_loss(&plain, &cut) {
            Ok(()) => println!("a cut leader's calls cost at most twice a plain loss: yes"),
            Err(why) => println!("a cut leader's calls cost at most twice a plain loss: no, {why}"),
        }
    }
    let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failed seeds: {failed:?}");
        ExitCode::FAILURE
    }
}

fn replay(arguments: &Arguments, seed: u64) -> ExitCode {
    let report = match run_seed(seed, &arguments.options()) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("revkv-sim: {error}");
            return ExitCode::FAILURE;
        }
    };
    let filter = TraceFilter {
        key: arguments.key.clone(),
        member: arguments.member,
    };
    for event in report.trace.events(&filter) {
        println!("{event}");
    }
    println!("{}", summary(&report));
    for violation in &report.violations {
        println!("violation: {violation}");
    }
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One line about a run.
fn summary(report: &RunReport) -> String {
    format!(
        "seed {}: {} operations ({} unknown), {} watch messages, {} faults, revision {}, \
         {:.1} simulated s in {:.2} wall s, {} trace events, fingerprint {:016x}",
        report.seed,
        report.operations,
        report.unknown_outcomes,
        report.watch_messages,
        report.faults,
        report.final_revision,
        report.simulated.as_secs_f64(),
        report.wall.as_secs_f64(),
        report.trace.len(),
        report.trace.fingerprint()
    )
}

fn soak(arguments: &Arguments) -> ExitCode {
    let options = arguments.options();
    let jobs = arguments
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cores| cores.get()));
    let next = AtomicU64::new(arguments.first_seed);
    let end = arguments.first_seed + arguments.seeds;
    let failed = Mutex::new(Vec::new());
    let simulated = Mutex::new(Duration::ZERO);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    return;
                }
                let outcome =
                    std::panic::catch_unwind(AssertUnwindSafe(|| run_seed(seed, &options)));
                let problem = match outcome {
                    Ok(Ok(report)) => {
                        *simulated.lock().unwrap_or_else(|p| p.into_inner()) += report.simulated;
                        println!("{}", summary(&report));
                        report.violations.first().map(ToString::to_string)
                    }
                    Ok(Err(error)) => Some(format!("did not run: {error}")),
                    Err(_panic) => Some("panicked".to_owned()),
                };
                if let Some(problem) = problem {
                    println!(
                        "seed {seed} FAILED: {problem}\n  replay: {}",
                        arguments.replay_command(seed)
                    );
                    failed.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                }
            });
        }
    });
    let wall = started.elapsed();
    let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    let simulated = simulated.into_inner().unwrap_or_else(|p| p.into_inner());
    println!(
        "{} seeds, {} failed {:?}; {:.0} simulated s in {:.1} wall s on {jobs} threads: \
         {:.1} simulated s per wall s, {:.1} seeds per minute",
        arguments.seeds,
        failed.len(),
        failed,
        simulated.as_secs_f64(),
        wall.as_secs_f64(),
        simulated.as_secs_f64() / wall.as_secs_f64(),
        arguments.seeds as f64 * 60.0 / wall.as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
