//! What a run reports: latency percentiles read from the HDR histogram, throughput, failures by
//! kind, rendered as an aligned table for people or as one JSON document for scripts; and the
//! progress line printed while a run goes on. The shapes the driver fills in (`RunTotals`, the
//! latency histogram) are defined here, so the driver depends on the report and not both ways.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::options::BenchPlan;
use super::target::{FailureKind, TargetKind};
use super::workload::{ReadConsistency, Workload, WorkloadKind};
use crate::cli::OutputFormat;

/// The largest latency the histograms hold, in microseconds (one hour; larger values are clamped).
pub const LARGEST_RECORDED_LATENCY_MICROS: u64 = 3_600_000_000;

/// Significant decimal digits the histograms keep (0.1 % resolution).
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// What the measured part of a run produced, all client tasks together.
#[derive(Debug)]
pub struct RunTotals {
    /// Latency of every successful operation, in microseconds.
    pub latencies_micros: Histogram<u64>,
    pub succeeded: u64,
    pub failures: BTreeMap<FailureKind, u64>,
    /// From the start of the first task to the end of the last one.
    pub elapsed: Duration,
    /// The cas workload's attempts and conflicts, all increments together (zero for others).
    pub cas_attempts: u64,
    pub cas_conflicts: u64,
}

/// An empty latency histogram with the driver's bounds and precision.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(
        1,
        LARGEST_RECORDED_LATENCY_MICROS,
        HISTOGRAM_SIGNIFICANT_DIGITS,
    )
    .expect("the histogram bounds are valid")
}

/// Latency of the successful operations, in microseconds. All zero when none succeeded.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct LatencySummary {
    pub samples: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl LatencySummary {
    /// Reads the percentiles off `histogram` (values in microseconds). Each is the highest value
    /// the histogram cannot tell apart from the true one (exact below 2,048 µs, within 0.1 % above).
    pub fn from_histogram(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencySummary {
                samples: 0,
                mean_us: 0.0,
                p50_us: 0,
                p90_us: 0,
                p99_us: 0,
                max_us: 0,
            };
        }
        LatencySummary {
            samples: histogram.len(),
            mean_us: histogram.mean(),
            p50_us: histogram.value_at_quantile(0.50),
            p90_us: histogram.value_at_quantile(0.90),
            p99_us: histogram.value_at_quantile(0.99),
            max_us: histogram.max(),
        }
    }
}

/// The result of one run: what ran, against what, and what was measured. Also the JSON output.
#[derive(Serialize, Debug, Clone)]
pub struct BenchReport {
    pub workload: WorkloadKind,
    pub description: String,
    pub target: TargetKind,
    pub endpoints: Vec<String>,
    pub clients: usize,
    /// The gRPC connections the clients shared (`--target etcd-grpc` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_connections: Option<usize>,
    pub value_size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consistency: Option<ReadConsistency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    pub operation_limit: Option<u64>,
    pub time_limit_seconds: f64,
    pub elapsed_seconds: f64,
    pub succeeded: u64,
    pub failed: u64,
    /// Failure count by kind (`timeout`, `http 503 unavailable`, ...).
    pub failures: BTreeMap<String, u64>,
    /// Successful operations per second of elapsed time.
    pub throughput_ops_per_second: f64,
    pub latency: LatencySummary,
    /// The cas workload: attempts and conflicts of all increments (absent for other workloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cas: Option<CasSummary>,
}

/// What retry-on-conflict cost in a cas run.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct CasSummary {
    /// Read-modify-write attempts, successful or not.
    pub attempts: u64,
    /// Attempts whose conditional write found the counter changed.
    pub conflicts: u64,
    /// Attempts per increment tried (1.0: no conflict at all).
    pub attempts_per_increment: f64,
}

impl BenchReport {
    pub fn new(plan: &BenchPlan, totals: &RunTotals) -> Self {
        let (value_size, consistency, keys) = match plan.workload {
            Workload::Put { value_size } => (value_size, None, None),
            Workload::Cas { hot_keys } => (0, None, Some(hot_keys)),
            Workload::Get {
                consistency,
                key_count,
                value_size,
            } => (value_size, Some(consistency), Some(key_count)),
        };
        let elapsed_seconds = totals.elapsed.as_secs_f64();
        let throughput_ops_per_second = if elapsed_seconds > 0.0 {
            totals.succeeded as f64 / elapsed_seconds
        } else {
            0.0
        };
        BenchReport {
            workload: plan.workload.kind(),
            description: plan.workload.describe(),
            target: plan.target,
            endpoints: plan.endpoints.clone(),
            clients: plan.client_count,
            grpc_connections: (plan.target == TargetKind::EtcdGrpc)
                .then_some(plan.grpc_connections),
            value_size,
            consistency,
            keys,
            operation_limit: plan.limits.operation_limit,
            time_limit_seconds: plan.limits.time_limit.as_secs_f64(),
            elapsed_seconds,
            succeeded: totals.succeeded,
            failed: totals.failures.values().sum(),
            failures: totals
                .failures
                .iter()
                .map(|(failure, count)| (failure.to_string(), *count))
                .collect(),
            throughput_ops_per_second,
            latency: LatencySummary::from_histogram(&totals.latencies_micros),
            cas: cas_summary(plan, totals),
        }
    }

    pub fn render(&self, format: OutputFormat) -> String {
        match format {
            OutputFormat::Table => self.render_table(),
            OutputFormat::Json => {
                serde_json::to_string_pretty(self).expect("a report always serialises")
            }
        }
    }

    /// The report for people: one aligned line per fact.
    pub fn render_table(&self) -> String {
        let target_name = self.target.name();
        let limit = match self.operation_limit {
            Some(operations) => format!(
                "{} operations or {} s",
                with_thousands(operations),
                self.time_limit_seconds
            ),
            None => format!("{} s", self.time_limit_seconds),
        };
        let latency = &self.latency;
        let mut lines = vec![
            format!("revkv bench: {}", self.description),
            format!(
                "  target      {target_name} at {}",
                self.endpoints.join(", ")
            ),
            match self.grpc_connections {
                Some(connections) => {
                    format!(
                        "  clients     {} over {connections} gRPC connection(s)",
                        self.clients
                    )
                }
                None => format!("  clients     {}", self.clients),
            },
            format!(
                "  ran         {:.2} s (limit: {limit})",
                self.elapsed_seconds
            ),
            format!(
                "  operations  {} succeeded, {} failed",
                with_thousands(self.succeeded),
                with_thousands(self.failed)
            ),
            format!(
                "  throughput  {} ops/s",
                with_thousands(self.throughput_ops_per_second.round() as u64)
            ),
            format!(
                "  latency     p50 {}  p90 {}  p99 {}  max {}  (mean {})",
                milliseconds(latency.p50_us),
                milliseconds(latency.p90_us),
                milliseconds(latency.p99_us),
                milliseconds(latency.max_us),
                milliseconds(latency.mean_us.round() as u64),
            ),
        ];
        if let Some(cas) = &self.cas {
            lines.push(format!(
                "  cas         {} attempts ({:.2} per increment), {} conflicts",
                with_thousands(cas.attempts),
                cas.attempts_per_increment,
                with_thousands(cas.conflicts)
            ));
        }
        if self.failures.is_empty() {
            lines.push("  failures    none".to_string());
        } else {
            for (index, (kind, count)) in self.failures.iter().enumerate() {
                let label = if index == 0 { "failures" } else { "" };
                lines.push(format!("  {label:<10}  {kind}: {}", with_thousands(*count)));
            }
        }
        lines.join("\n")
    }
}

/// The attempts and conflicts of a cas run; None for other workloads.
fn cas_summary(plan: &BenchPlan, totals: &RunTotals) -> Option<CasSummary> {
    if !matches!(plan.workload, Workload::Cas { .. }) {
        return None;
    }
    let increments = totals.succeeded + totals.failures.values().sum::<u64>();
    Some(CasSummary {
        attempts: totals.cas_attempts,
        conflicts: totals.cas_conflicts,
        attempts_per_increment: totals.cas_attempts as f64 / increments.max(1) as f64,
    })
}

/// The line shown on stderr while a run goes on.
pub fn progress_line(
    elapsed: Duration,
    time_limit: Duration,
    succeeded: u64,
    failed: u64,
    recent_ops_per_second: f64,
) -> String {
    format!(
        "[{:.0}/{:.0} s] {} ok, {} failed, {} ops/s in the last interval",
        elapsed.as_secs_f64(),
        time_limit.as_secs_f64(),
        with_thousands(succeeded),
        with_thousands(failed),
        with_thousands(recent_ops_per_second.round() as u64),
    )
}

/// Microseconds shown as milliseconds with microsecond precision: `1234` is `1.234 ms`.
pub fn milliseconds(micros: u64) -> String {
    format!("{}.{:03} ms", micros / 1000, micros % 1000)
}

/// `1234567` as `1,234,567`.
pub fn with_thousands(number: u64) -> String {
    let digits = number.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (position, digit) in digits.chars().enumerate() {
        if position > 0 && (digits.len() - position).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::super::options::RunLimits;
    use super::super::target::FailureKind;
    use super::*;

    fn histogram_of(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut histogram = new_latency_histogram();
        for value in values {
            histogram.record(value).unwrap();
        }
        histogram
    }

    #[test]
    fn percentiles_of_one_to_a_hundred_are_exact() {
        let summary = LatencySummary::from_histogram(&histogram_of(1..=100));
        assert_eq!(summary.samples, 100);
        assert_eq!(summary.p50_us, 50);
        assert_eq!(summary.p90_us, 90);
        assert_eq!(summary.p99_us, 99);
        assert_eq!(summary.max_us, 100);
        assert!((summary.mean_us - 50.5).abs() < 1e-9);
    }

    #[test]
    fn a_slow_tail_shows_in_p99_and_max_but_not_in_p50() {
        let fast = std::iter::repeat_n(1_000, 980);
        let slow = std::iter::repeat_n(250_000, 20);
        let summary = LatencySummary::from_histogram(&histogram_of(fast.chain(slow)));
        assert_eq!(summary.p50_us, 1_000);
        assert_eq!(summary.p90_us, 1_000);
        // 250,000 µs is kept to 3 significant digits: within 0.1 % of the true value.
        assert!(
            summary.p99_us.abs_diff(250_000) <= 250,
            "{}",
            summary.p99_us
        );
        assert!(
            summary.max_us.abs_diff(250_000) <= 250,
            "{}",
            summary.max_us
        );
    }

    #[test]
    fn an_empty_histogram_reports_zeros() {
        let summary = LatencySummary::from_histogram(&new_latency_histogram());
        assert_eq!(summary.samples, 0);
        assert_eq!(summary.p99_us, 0);
        assert_eq!(summary.max_us, 0);
    }

    fn report_of_a_small_run() -> BenchReport {
        let plan = BenchPlan {
            workload: Workload::Put { value_size: 256 },
            target: TargetKind::Etcd,
            endpoints: vec!["http://e:1".to_string(), "http://e:2".to_string()],
            client_count: 4,
            grpc_connections: 1,
            limits: RunLimits {
                operation_limit: None,
                time_limit: Duration::from_secs(2),
            },
            request_timeout: Duration::from_secs(10),
            output_format: OutputFormat::Table,
            show_progress: false,
            run_tag: "t".to_string(),
            tls: Default::default(),
            cas_backoff: crate::bench::options::CasBackoff::DefaultRetry,
        };
        let totals = RunTotals {
            latencies_micros: histogram_of(1..=100),
            succeeded: 100,
            failures: BTreeMap::from([
                (FailureKind::Timeout, 2),
                (
                    FailureKind::Status {
                        status: 503,
                        reason: "unavailable".to_string(),
                    },
                    1,
                ),
            ]),
            elapsed: Duration::from_millis(2_000),
            cas_attempts: 0,
            cas_conflicts: 0,
        };
        BenchReport::new(&plan, &totals)
    }

    #[test]
    fn the_report_computes_throughput_and_groups_failures_by_kind() {
        let report = report_of_a_small_run();
        assert!((report.throughput_ops_per_second - 50.0).abs() < 1e-9);
        assert_eq!(report.failed, 3);
        assert_eq!(report.failures["timeout"], 2);
        assert_eq!(report.failures["http 503 unavailable"], 1);
    }

    #[test]
    fn the_json_report_carries_the_fields_scripts_read() {
        let json: serde_json::Value =
            serde_json::from_str(&report_of_a_small_run().render(OutputFormat::Json)).unwrap();
        assert_eq!(json["workload"], "put");
        assert_eq!(json["target"], "etcd");
        assert_eq!(json["clients"], 4);
        assert_eq!(json["succeeded"], 100);
        assert_eq!(json["throughput_ops_per_second"], 50.0);
        assert_eq!(json["latency"]["p50_us"], 50);
        assert_eq!(json["latency"]["p99_us"], 99);
        assert!(json.get("consistency").is_none());
    }

    #[test]
    fn the_table_shows_throughput_latency_and_each_failure_kind() {
        let table = report_of_a_small_run().render_table();
        assert!(table.contains("throughput  50 ops/s"), "{table}");
        assert!(table.contains("p50 0.050 ms"), "{table}");
        assert!(table.contains("max 0.100 ms"), "{table}");
        assert!(
            table.contains("failures    http 503 unavailable: 1"),
            "{table}"
        );
        assert!(table.contains("timeout: 2"), "{table}");
    }

    #[test]
    fn numbers_are_formatted_for_reading() {
        assert_eq!(with_thousands(0), "0");
        assert_eq!(with_thousands(999), "999");
        assert_eq!(with_thousands(1_000), "1,000");
        assert_eq!(with_thousands(1_234_567), "1,234,567");
        assert_eq!(milliseconds(1_234), "1.234 ms");
        assert_eq!(milliseconds(56), "0.056 ms");
        assert_eq!(
            progress_line(
                Duration::from_secs(3),
                Duration::from_secs(10),
                12_000,
                1,
                4_000.4
            ),
            "[3/10 s] 12,000 ok, 1 failed, 4,000 ops/s in the last interval"
        );
    }
}
