//! `revkv bench`: a load generator that measures revkv and etcd with the same workloads.
//!
//! One run drives one workload against one cluster: `--clients N` concurrent client tasks, each on
//! its own connection (keep-alive HTTP, or gRPC) to one endpoint (clients are spread round-robin over
//! `--endpoints`), until `--total N` operations were issued or `--duration` passed, whichever comes
//! first (a run always has a time limit, so it always stops by itself). Every successful operation's
//! latency, from sending the request to having read the whole answer, goes into an HDR histogram;
//! failures are counted by kind. The report gives throughput, p50/p90/p99/max latency and the
//! failures, as a table or as JSON (`-o json`, what `scripts/bench-vs-etcd.sh` reads).
//!
//! The same tool drives both systems so that they are measured the same way: `--target revkv`
//! speaks revkv's HTTP/JSON API (`docs/API.md` section 4), `--target etcd` speaks etcd's v3
//! JSON gateway (`POST /v3/kv/put`, `POST /v3/kv/range`, base64 keys and values), and
//! `--target etcd-grpc` speaks etcd's native gRPC API (what Kubernetes uses) through the tools'
//! etcd client (`crate::etcd_api`), the client tasks sharing `--conns` gRPC connections
//! (default 1).
//!
//! Workloads built now: `put` (distinct keys, `--value-size` bytes), `get` (`--consistency
//! linearizable|serializable`, one key or `--keys N` random keys written before the measured part)
//! and `cas` (clients incrementing `--keys N` hot counters with read-modify-write and
//! retry-on-conflict, reporting attempts and conflicts; on etcd through a txn comparing the
//! counter's mod revision), and `watch` (event delivery latency with `--watchers W` watches at
//! `--write-rate` writes per second; it measures streams, not requests, so it has its own module,
//! [`watch_latency`], and [`watch_grpc`] for its gRPC streams). `hold-watches` measures nothing:
//! it holds watches, some never read, while etcd's `benchmark` measures writes ([`held_watches`]).
//!
//! The parts, one idea per file:
//! - [`options`]: the command line ([`BenchArgs`]) and its validation into a [`options::BenchPlan`].
//! - [`workload`]: what each workload does: the operations and the keys and values they use.
//! - [`target`]: how an operation becomes an HTTP request to revkv or etcd, and how an answer is
//!   judged a success or a failure of some kind.
//! - [`cas`]: the increment of the cas workload (a read and a conditional write, retried on
//!   conflict).
//! - [`etcd_grpc`]: the operations of `--target etcd-grpc`, and how gRPC errors are reported.
//! - [`driver`]: the client tasks, the shared operation budget, setup writes and the progress line.
//! - [`report`]: latency percentiles from the histogram, and the table and JSON output.

pub mod cas;
pub mod driver;
pub mod etcd_grpc;
pub mod held_watches;
pub mod options;
pub mod report;
pub mod target;
pub mod watch_arrivals;
pub mod watch_grpc;
pub mod watch_latency;
pub mod workload;

use std::process::ExitCode;

pub use options::BenchArgs;

/// Runs `revkv bench` with parsed arguments: validates them, writes the keys a workload reads,
/// runs the measured part, and prints the report on stdout (the progress line goes to stderr).
///
/// Fails when the arguments are inconsistent, when the setup writes fail, or when not one measured
/// operation succeeded; a run with some failures still succeeds and reports them.
pub async fn run(args: BenchArgs) -> ExitCode {
    if args.workload == workload::WorkloadKind::Watch {
        return run_watch(args).await;
    }
    if args.workload == workload::WorkloadKind::HoldWatches {
        return run_hold_watches(args).await;
    }
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
    let totals = match driver::run_measured_part(&plan).await {
        Ok(totals) => totals,
        Err(message) => {
            eprintln!("revkv bench: {message}");
            return ExitCode::FAILURE;
        }
    };
    let report = report::BenchReport::new(&plan, &totals);
    println!("{}", report.render(plan.output_format));
    if report.succeeded == 0 {
        eprintln!("revkv bench: no operation succeeded");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The hold-watches workload: watches held while another client writes; its report is JSON.
async fn run_hold_watches(args: BenchArgs) -> ExitCode {
    let plan = match args.into_held_watches_plan() {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("revkv bench: {message}");
            return ExitCode::from(2);
        }
    };
    match held_watches::run(&plan).await {
        Ok(report) => {
            let json = serde_json::to_string_pretty(&report).expect("reports serialize");
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("revkv bench: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The watch workload: event delivery latency, reported as JSON or a short table.
async fn run_watch(args: BenchArgs) -> ExitCode {
    let output = args.output;
    let plan = match args.into_watch_plan() {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("revkv bench: {message}");
            return ExitCode::from(2);
        }
    };
    let report = match watch_latency::run(&plan).await {
        Ok(report) => report,
        Err(message) => {
            eprintln!("revkv bench: {message}");
            return ExitCode::FAILURE;
        }
    };
    match output {
        crate::cli::OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("reports serialize")
        ),
        crate::cli::OutputFormat::Table => {
            let latency = &report.latency;
            println!(
                "target {:?}  watchers {}  write rate {}/s  writes {}  events {}/{} ({} before ack)",
                report.target,
                report.watchers,
                report.write_rate,
                report.writes_acknowledged,
                report.events_received,
                report.events_expected,
                report.events_before_ack
            );
            println!(
                "delivery latency (ack -> event): p50 {} us  p90 {} us  p99 {} us  max {} us",
                latency.p50_us, latency.p90_us, latency.p99_us, latency.max_us
            );
        }
    }
    ExitCode::SUCCESS
}
