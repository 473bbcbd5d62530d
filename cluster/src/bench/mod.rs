//! `revkv bench`: a load generator that measures revkv and etcd with the same workloads.
//!
//! One run drives one workload against one cluster: `--clients N` concurrent client tasks, each on
//! its own keep-alive HTTP connection to one endpoint (clients are spread round-robin over
//! `--endpoints`), until `--total N` operations were issued or `--duration` passed, whichever comes
//! first (a run always has a time limit, so it always stops by itself). Every successful operation's
//! latency, from sending the request to having read the whole answer, goes into an HDR histogram;
//! failures are counted by kind. The report gives throughput, p50/p90/p99/max latency and the
//! failures, as a table or as JSON (`-o json`, what `scripts/bench-vs-etcd.sh` reads).
//!
//! The same tool drives both systems so that they are measured the same way: `--target revkv`
//! speaks revkv's HTTP/JSON API (`shared/spec/API.md` section 4), `--target etcd` speaks etcd's v3
//! JSON gateway (`POST /v3/kv/put`, `POST /v3/kv/range`, base64 keys and values).
//!
//! Workloads built now: `put` (distinct keys, `--value-size` bytes), `get` (`--consistency
//! linearizable|serializable`, one key or `--keys N` random keys written before the measured part)
//! and `cas` (clients incrementing `--keys N` hot counters with read-modify-write and
//! retry-on-conflict, reporting attempts and conflicts; on etcd through a txn comparing the
//! counter's mod revision), and `watch` (`--watchers W` streams on one prefix that the clients
//! write to; the latency reported is each event's, from sending its write to a watcher parsing it).
//! The `watch` workload on revkv needs the server side of `GET /v1/watch`.
//!
//! The parts, one idea per file:
//! - [`options`]: the command line ([`BenchArgs`]) and its validation into a [`options::BenchPlan`].
//! - [`workload`]: what each workload does: the operations and the keys and values they use.
//! - [`target`]: how an operation becomes an HTTP request to revkv or etcd, and how an answer is
//!   judged a success or a failure of some kind.
//! - [`cas`]: the increment of the cas workload (a read and a conditional write, retried on
//!   conflict).
//! - [`watch`]: the watchers of the watch workload, and the time stamps in its values.
//! - [`driver`]: the client tasks, the shared operation budget, setup writes and the progress line.
//! - [`report`]: latency percentiles from the histogram, and the table and JSON output.

pub mod cas;
pub mod driver;
pub mod options;
pub mod report;
pub mod target;
pub mod watch;
pub mod workload;

use std::process::ExitCode;

pub use options::BenchArgs;

/// Runs `revkv bench` with parsed arguments: validates them, writes the keys a workload reads,
/// runs the measured part, and prints the report on stdout (the progress line goes to stderr).
///
/// Fails when the arguments are inconsistent, when the setup writes fail, or when not one measured
/// operation succeeded; a run with some failures still succeeds and reports them.
pub async fn run(args: BenchArgs) -> ExitCode {
    let plan = match args.into_plan() {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("revkv bench: {message}");
            return ExitCode::from(2);
        }
    };
    if let Err(message) = driver::write_keys_the_workload_reads(&plan).await {
        eprintln!("revkv bench: setup failed: {message}");
        return ExitCode::FAILURE;
    }
    let (totals, watch_summary) = match run_with_watchers(&plan).await {
        Ok(measured) => measured,
        Err(message) => {
            eprintln!("revkv bench: {message}");
            return ExitCode::FAILURE;
        }
    };
    let report = report::BenchReport::new(&plan, &totals).with_watch(watch_summary);
    println!("{}", report.render(plan.output_format));
    if report.succeeded == 0 {
        eprintln!("revkv bench: no operation succeeded");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The watchers a watch run keeps in its report (the rest are counted, not listed).
const LISTED_WATCHER_FAILURES: usize = 5;

/// The measured part; for the watch workload with its watchers open before the writers start,
/// and the event latencies in place of the writes' latencies.
async fn run_with_watchers(
    plan: &options::BenchPlan,
) -> Result<(driver::RunTotals, Option<report::WatchSummary>), String> {
    let workload::Workload::Watch { watchers, .. } = plan.workload else {
        return Ok((driver::run_measured_part(plan).await?, None));
    };
    let prefix = workload::watch_prefix(&plan.run_tag);
    let running = watch::start_watchers(
        plan.target,
        &plan.endpoints,
        &prefix,
        watchers,
        plan.request_timeout,
    )
    .await?;
    let mut totals = driver::run_measured_part(plan).await?;
    let measured = running.finish(totals.succeeded).await;
    totals.latencies_micros = measured.latencies_micros;
    let summary = report::WatchSummary {
        watchers,
        events_expected: totals.succeeded * watchers as u64,
        events_received: measured.events_received,
        watcher_failures: measured
            .failures
            .into_iter()
            .take(LISTED_WATCHER_FAILURES)
            .collect(),
    };
    Ok((totals, Some(summary)))
}
