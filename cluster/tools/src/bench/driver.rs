//! The driver: runs a [`BenchPlan`]'s client tasks and collects what they measured.
//!
//! Each client task owns one [`Connection`] and has at most one request in flight: for the HTTP
//! targets a `reqwest::Client` limited to one idle keep-alive connection of its own (task i to
//! endpoint i mod n), for `--target etcd-grpc` a handle on one of the `--conns` gRPC channels the
//! tasks share ([`EtcdGrpcConnection`]; task i uses channel i mod conns). The same loop drives both; only [`Connection::perform`]
//! looks at which it holds. Before each operation a task takes a ticket from the shared
//! [`OperationBudget`], which says no once the run's operation limit is used up or its deadline has
//! passed; so every loop is bounded in both count and time, and a request itself is bounded by
//! `--request-timeout`. Each task records its successes' latencies in its own HDR histogram; the
//! histograms are added up when the tasks end. While they run, a progress line goes to stderr
//! once a second.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use reqwest::header::CONTENT_TYPE;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::cas::{self, CasCounters};
use super::etcd_grpc::EtcdGrpcConnection;
use super::options::BenchPlan;
use super::report::{new_latency_histogram, progress_line, RunTotals};
use super::target::{FailureKind, HttpMethod, TargetKind};
use super::workload::{Operation, OperationSource};
use revkv_client::ClientTls;

/// How often the progress line is refreshed.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How often a setup write is tried before the run is abandoned, and the pause between tries.
const SETUP_WRITE_ATTEMPTS: u32 = 5;
const SETUP_WRITE_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The endpoint client task `client_index` talks to: round-robin over `endpoints` (never empty).
pub fn endpoint_for_client(endpoints: &[String], client_index: usize) -> &str {
    &endpoints[client_index % endpoints.len()]
}

/// The tickets of a run: one per operation, until the operation limit or the deadline.
#[derive(Debug)]
pub struct OperationBudget {
    operation_limit: Option<u64>,
    deadline: Instant,
    tickets_taken: AtomicU64,
}

impl OperationBudget {
    pub fn new(operation_limit: Option<u64>, deadline: Instant) -> Self {
        OperationBudget {
            operation_limit,
            deadline,
            tickets_taken: AtomicU64::new(0),
        }
    }

    /// Whether one more operation may start at `now`.
    pub fn take_ticket(&self, now: Instant) -> bool {
        if now >= self.deadline {
            return false;
        }
        match self.operation_limit {
            None => true,
            Some(limit) => self.tickets_taken.fetch_add(1, Ordering::Relaxed) < limit,
        }
    }
}

/// Counters the progress line reads while the tasks run.
#[derive(Debug, Default)]
struct LiveCounters {
    succeeded: AtomicU64,
    failed: AtomicU64,
}

/// What one client task measured.
struct ClientTotals {
    latencies_micros: Histogram<u64>,
    succeeded: u64,
    failures: BTreeMap<FailureKind, u64>,
}

/// A client that keeps one connection open to its endpoint (one request at a time per client).
fn http_client_with_one_connection(
    request_timeout: Duration,
    tls: &ClientTls,
) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .tcp_nodelay(true)
        .timeout(request_timeout)
        .connect_timeout(request_timeout.min(Duration::from_secs(5)))
        .no_proxy();
    tls.configure(builder)
        .map_err(|error| error.to_string())?
        .build()
        .map_err(|error| format!("cannot build an HTTP client: {error}"))
}

/// One client task's connection to its endpoint, in the protocol of the target.
pub enum Connection {
    /// revkv's HTTP API or etcd's JSON gateway.
    Http {
        http: reqwest::Client,
        target: TargetKind,
        endpoint: String,
    },
    /// etcd's native gRPC API (boxed: a tonic client handle is several times the HTTP variant's
    /// size, and the tasks move their connection around).
    EtcdGrpc(Box<EtcdGrpcConnection>),
}

impl Connection {
    /// A connection of the plan's target to `endpoint`.
    pub async fn open(plan: &BenchPlan, endpoint: &str) -> Result<Self, String> {
        match plan.target {
            TargetKind::EtcdGrpc => Ok(Connection::EtcdGrpc(Box::new(
                EtcdGrpcConnection::connect(endpoint, plan.request_timeout).await?,
            ))),
            TargetKind::Revkv | TargetKind::Etcd => Ok(Connection::Http {
                http: http_client_with_one_connection(plan.request_timeout, &plan.tls)?,
                target: plan.target,
                endpoint: endpoint.to_string(),
            }),
        }
    }

    /// Performs `operation` and judges the answer. An increment (cas) takes several requests and
    /// counts its attempts and conflicts in `cas_counters`.
    pub async fn perform(
        &mut self,
        operation: &Operation,
        cas_counters: &CasCounters,
    ) -> Result<(), FailureKind> {
        match self {
            Connection::Http {
                http,
                target,
                endpoint,
            } => perform_over_http(http, *target, endpoint, operation, cas_counters).await,
            Connection::EtcdGrpc(connection) => connection.perform(operation, cas_counters).await,
        }
    }
}

/// Sends `operation` to `endpoint` and judges the answer. An increment (cas) takes several
/// requests and counts its attempts and conflicts in `cas_counters`.
async fn perform_over_http(
    http: &reqwest::Client,
    target: TargetKind,
    endpoint: &str,
    operation: &Operation,
    cas_counters: &CasCounters,
) -> Result<(), FailureKind> {
    if let Operation::Increment { key } = operation {
        return cas::increment(http, target, endpoint, key, cas_counters).await;
    }
    let planned = target.plan_request(endpoint, operation);
    let mut request = match planned.method {
        HttpMethod::Get => http.get(&planned.url),
        HttpMethod::Put => http.put(&planned.url),
        HttpMethod::Post => http.post(&planned.url),
    };
    if let Some(body) = planned.json_body {
        request = request.header(CONTENT_TYPE, "application/json").body(body);
    }
    let response = request.send().await.map_err(failure_of_transport)?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(failure_of_transport)?;
    target.judge_answer(operation, status, &body)
}

fn failure_of_transport(error: reqwest::Error) -> FailureKind {
    if error.is_timeout() {
        FailureKind::Timeout
    } else if error.is_connect() {
        FailureKind::Connect
    } else {
        FailureKind::Transport
    }
}

/// Writes the keys the workload reads (none for `put`), spread over up to `--clients` tasks, each
/// write tried a bounded number of times. Fails on the first key that could not be written.
pub async fn write_keys_the_workload_reads(plan: &BenchPlan) -> Result<(), String> {
    let operations = plan.workload.setup_operations();
    if operations.is_empty() {
        return Ok(());
    }
    let task_count = plan.client_count.min(operations.len());
    let operations = Arc::new(operations);
    let mut tasks = JoinSet::new();
    for task_index in 0..task_count {
        let endpoint = endpoint_for_client(&plan.endpoints, task_index).to_string();
        let mut connection = Connection::open(plan, &endpoint).await?;
        let operations = Arc::clone(&operations);
        tasks.spawn(async move {
            for operation in operations.iter().skip(task_index).step_by(task_count) {
                write_with_retries(&mut connection, &endpoint, operation).await?;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|error| format!("a setup task failed: {error}"))??;
    }
    Ok(())
}

async fn write_with_retries(
    connection: &mut Connection,
    endpoint: &str,
    operation: &Operation,
) -> Result<(), String> {
    let mut attempt = 1;
    loop {
        let no_increments = CasCounters::default();
        match connection.perform(operation, &no_increments).await {
            Ok(()) => return Ok(()),
            Err(failure) if attempt >= SETUP_WRITE_ATTEMPTS => {
                return Err(format!(
                    "writing {operation:?} to {endpoint} failed {attempt} times, last with {failure}"
                ));
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(SETUP_WRITE_RETRY_PAUSE).await;
            }
        }
    }
}

/// Runs the client tasks until the budget is spent, printing progress, and adds up their results.
pub async fn run_measured_part(plan: &BenchPlan) -> Result<RunTotals, String> {
    let connections = open_client_connections(plan).await?;
    let started = Instant::now();
    let budget = Arc::new(OperationBudget::new(
        plan.limits.operation_limit,
        started + plan.limits.time_limit,
    ));
    let live = Arc::new(LiveCounters::default());
    let cas_counters = Arc::new(CasCounters::new(plan.cas_backoff));
    let mut tasks = JoinSet::new();
    for (client_index, connection) in connections.into_iter().enumerate() {
        let operations = plan
            .workload
            .operations_for_client(client_index, &plan.run_tag);
        tasks.spawn(run_client_until_the_budget_is_spent(
            connection,
            operations,
            Arc::clone(&budget),
            Arc::clone(&live),
            Arc::clone(&cas_counters),
        ));
    }
    let mut progress = ProgressPrinter::new(plan.show_progress, plan.limits.time_limit);
    let mut totals =
        add_up_client_totals_while_printing_progress(tasks, started, &live, &mut progress).await?;
    totals.elapsed = started.elapsed();
    totals.cas_attempts = cas_counters.attempts.load(Ordering::Relaxed);
    totals.cas_conflicts = cas_counters.conflicts.load(Ordering::Relaxed);
    progress.finish();
    Ok(totals)
}

/// Opens every client task's connection before the clock starts, so that connecting is not
/// measured. Over HTTP client task i gets a connection of its own to endpoint i mod n; over gRPC
/// the plan's shared connections are opened, connection j to endpoint j mod n, and task i uses
/// connection i mod (their number), as etcd's benchmark shares its `--conns`.
async fn open_client_connections(plan: &BenchPlan) -> Result<Vec<Connection>, String> {
    if plan.target == TargetKind::EtcdGrpc {
        let mut shared = Vec::with_capacity(plan.grpc_connections);
        for connection_index in 0..plan.grpc_connections.clamp(1, plan.client_count) {
            let endpoint = endpoint_for_client(&plan.endpoints, connection_index);
            shared.push(EtcdGrpcConnection::connect(endpoint, plan.request_timeout).await?);
        }
        let shared_by = |client_index: usize| shared[client_index % shared.len()].clone();
        return Ok((0..plan.client_count)
            .map(|client_index| Connection::EtcdGrpc(Box::new(shared_by(client_index))))
            .collect());
    }
    let mut connections = Vec::with_capacity(plan.client_count);
    for client_index in 0..plan.client_count {
        let endpoint = endpoint_for_client(&plan.endpoints, client_index);
        connections.push(Connection::open(plan, endpoint).await?);
    }
    Ok(connections)
}

/// One client task: performs its operations one at a time while the budget hands out tickets,
/// recording each success's latency in its own histogram (so the tasks never contend for one) and
/// bumping the shared live counters the progress line reads.
async fn run_client_until_the_budget_is_spent(
    mut connection: Connection,
    mut operations: OperationSource,
    budget: Arc<OperationBudget>,
    live: Arc<LiveCounters>,
    cas_counters: Arc<CasCounters>,
) -> ClientTotals {
    let mut totals = ClientTotals::empty();
    while budget.take_ticket(Instant::now()) {
        let operation = operations.next_operation();
        let sent_at = Instant::now();
        let outcome = connection.perform(&operation, &cas_counters).await;
        let latency_micros = sent_at.elapsed().as_micros();
        totals.record(outcome, latency_micros, &live);
    }
    totals
}

/// Waits for every client task to end, adding its totals to the run's as it ends, and refreshes
/// the progress line once a [`PROGRESS_INTERVAL`] meanwhile. A task that panicked panics here too,
/// so the panic is not lost; a task that ended otherwise (cancelled) fails the run.
async fn add_up_client_totals_while_printing_progress(
    mut tasks: JoinSet<ClientTotals>,
    started: Instant,
    live: &LiveCounters,
    progress: &mut ProgressPrinter,
) -> Result<RunTotals, String> {
    let mut ticker = tokio::time::interval_at(started + PROGRESS_INTERVAL, PROGRESS_INTERVAL);
    let mut totals = empty_run_totals();
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(client)) => client.add_to(&mut totals),
                Some(Err(join_error)) if join_error.is_panic() => {
                    std::panic::resume_unwind(join_error.into_panic())
                }
                Some(Err(join_error)) => return Err(format!("a client task ended: {join_error}")),
            },
            _ = ticker.tick() => progress.print(
                started.elapsed(),
                live.succeeded.load(Ordering::Relaxed),
                live.failed.load(Ordering::Relaxed),
            ),
        }
    }
    Ok(totals)
}

/// Run totals with nothing counted yet; the elapsed time and the cas counters are filled in once
/// every client task has ended.
fn empty_run_totals() -> RunTotals {
    RunTotals {
        latencies_micros: new_latency_histogram(),
        succeeded: 0,
        failures: BTreeMap::new(),
        elapsed: Duration::ZERO,
        cas_attempts: 0,
        cas_conflicts: 0,
    }
}

impl ClientTotals {
    fn empty() -> Self {
        ClientTotals {
            latencies_micros: new_latency_histogram(),
            succeeded: 0,
            failures: BTreeMap::new(),
        }
    }

    /// Counts one operation's outcome here and in the live counters: a success with its latency
    /// (saturated at the histogram's top rather than lost), a failure by its kind.
    fn record(
        &mut self,
        outcome: Result<(), FailureKind>,
        latency_micros: u128,
        live: &LiveCounters,
    ) {
        match outcome {
            Ok(()) => {
                self.latencies_micros
                    .saturating_record(u64::try_from(latency_micros).unwrap_or(u64::MAX));
                self.succeeded += 1;
                live.succeeded.fetch_add(1, Ordering::Relaxed);
            }
            Err(failure) => {
                *self.failures.entry(failure).or_insert(0) += 1;
                live.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Adds this client task's latencies, successes and failures to the run's totals.
    fn add_to(self, run_totals: &mut RunTotals) {
        run_totals
            .latencies_micros
            .add(&self.latencies_micros)
            .expect("histograms with the same bounds add up");
        run_totals.succeeded += self.succeeded;
        for (failure, count) in self.failures {
            *run_totals.failures.entry(failure).or_insert(0) += count;
        }
    }
}

/// Prints the progress line on stderr: rewritten in place on a terminal, one line per second
/// otherwise (so logs of scripted runs stay readable).
struct ProgressPrinter {
    enabled: bool,
    in_place: bool,
    time_limit: Duration,
    previous_elapsed: Duration,
    previous_succeeded: u64,
}

impl ProgressPrinter {
    fn new(enabled: bool, time_limit: Duration) -> Self {
        ProgressPrinter {
            enabled,
            in_place: crate::cli::draws_progress(),
            time_limit,
            previous_elapsed: Duration::ZERO,
            previous_succeeded: 0,
        }
    }

    fn print(&mut self, elapsed: Duration, succeeded: u64, failed: u64) {
        if !self.enabled {
            return;
        }
        let interval_seconds = (elapsed - self.previous_elapsed).as_secs_f64();
        let recent_ops_per_second = if interval_seconds > 0.0 {
            (succeeded - self.previous_succeeded) as f64 / interval_seconds
        } else {
            0.0
        };
        self.previous_elapsed = elapsed;
        self.previous_succeeded = succeeded;
        let line = progress_line(
            elapsed,
            self.time_limit,
            succeeded,
            failed,
            recent_ops_per_second,
        );
        let mut stderr = std::io::stderr().lock();
        let _ = if self.in_place {
            write!(stderr, "\r{line}\x1b[K")
        } else {
            writeln!(stderr, "{line}")
        };
        let _ = stderr.flush();
    }

    fn finish(&self) {
        if self.enabled && self.in_place && !self.previous_elapsed.is_zero() {
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_spread_round_robin_over_the_endpoints() {
        let endpoints: Vec<String> = ["http://a", "http://b", "http://c"]
            .iter()
            .map(|endpoint| endpoint.to_string())
            .collect();
        let assigned: Vec<&str> = (0..7)
            .map(|client_index| endpoint_for_client(&endpoints, client_index))
            .collect();
        assert_eq!(
            assigned,
            ["http://a", "http://b", "http://c", "http://a", "http://b", "http://c", "http://a"]
        );
        let single = vec!["http://only".to_string()];
        assert_eq!(endpoint_for_client(&single, 5), "http://only");
    }

    #[test]
    fn the_budget_hands_out_exactly_the_operation_limit() {
        let now = Instant::now();
        let budget = OperationBudget::new(Some(3), now + Duration::from_secs(3600));
        let granted = (0..10).filter(|_| budget.take_ticket(now)).count();
        assert_eq!(granted, 3);
    }

    #[test]
    fn the_budget_says_no_at_the_deadline_even_with_operations_left() {
        let now = Instant::now();
        let budget = OperationBudget::new(None, now + Duration::from_secs(1));
        assert!(budget.take_ticket(now));
        assert!(!budget.take_ticket(now + Duration::from_secs(1)));
        let counted = OperationBudget::new(Some(100), now);
        assert!(!counted.take_ticket(now));
    }

    #[test]
    fn latency_histograms_hold_from_one_microsecond_to_an_hour() {
        let mut histogram = new_latency_histogram();
        histogram.record(1).unwrap();
        histogram
            .record(crate::bench::report::LARGEST_RECORDED_LATENCY_MICROS)
            .unwrap();
        histogram.saturating_record(u64::MAX);
        assert_eq!(histogram.len(), 3);
    }
}
