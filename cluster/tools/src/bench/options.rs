//! The command line of `revkv bench` and its validation into a [`BenchPlan`], the fully resolved
//! description of one run (defaults filled in, limits decided, endpoints normalised).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::held_watches::HeldWatchesPlan;
use super::target::TargetKind;
use super::workload::{ReadConsistency, Workload, WorkloadKind};
use crate::cli::{parse_duration, terse_output_format_parser, OutputFormat, TlsArgs};
use revkv_client::ClientTls;

/// How long a run lasts when neither `--total` nor `--duration` is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// The time limit of a run given only `--total`: every run has one, so that it stops by itself even
/// if the cluster stalls.
pub const TIME_CEILING_FOR_COUNTED_RUNS: Duration = Duration::from_secs(600);

/// The largest `--value-size` accepted (well above what either system is tuned for).
pub const LARGEST_VALUE_SIZE: usize = 1024 * 1024;

/// The largest `--clients` accepted.
pub const MOST_CLIENTS: usize = 4096;

/// `revkv bench WORKLOAD [options]`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The workload: `put` writes distinct keys, `get` reads pre-written keys, `cas` increments
    /// `--keys` hot counters with read-modify-write and retry-on-conflict.
    #[arg(value_enum)]
    pub workload: WorkloadKind,

    /// The system to drive: revkv's HTTP API, etcd's v3 JSON gateway, or etcd's native gRPC API.
    #[arg(long, value_enum, default_value_t = TargetKind::Revkv)]
    pub target: TargetKind,

    /// Comma-separated base URLs; client task i uses endpoint i mod (number of endpoints).
    /// Default: the target's local three-member cluster (revkv: ports 7001-7003, etcd and
    /// etcd-grpc: 12379, 22379, 32379 on 127.0.0.1).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,

    /// Concurrent client tasks, each with one request in flight: with the HTTP targets each on a
    /// keep-alive connection of its own, with etcd-grpc sharing `--conns` connections.
    #[arg(long, default_value_t = 1)]
    pub clients: usize,

    /// gRPC connections the client tasks share (etcd-grpc only; default 1), as etcd's own
    /// `benchmark --conns --clients` and Kubernetes' apiserver share few: connection j goes to
    /// endpoint j mod (number of endpoints), client task i uses connection i mod N. At most
    /// `--clients`.
    #[arg(long)]
    pub conns: Option<usize>,

    /// Stop after this many operations (all clients together).
    #[arg(long)]
    pub total: Option<u64>,

    /// Stop after this long, e.g. `10s`, `500ms`, `2m` (default 10s; with only `--total`, a
    /// ceiling of 10 minutes still applies).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Bytes per value written (the put workload, and the keys the get workload pre-writes).
    #[arg(long, default_value_t = 256)]
    pub value_size: usize,

    /// Read consistency of the get workload.
    #[arg(long, value_enum)]
    pub consistency: Option<ReadConsistency>,

    /// Number of distinct keys the get workload reads at random (written before the measured
    /// part), or of hot counters the cas workload increments (default 1).
    #[arg(long)]
    pub keys: Option<u64>,

    /// How the cas workload's increments back off between retries: client-go's `default-retry`
    /// (5 attempts about 10 ms apart) or `default-backoff` (4 attempts, 10/50/250 ms), or
    /// `adaptive` (5 attempts; waits follow each counter's recent conflicts, with full jitter).
    #[arg(long, value_enum, default_value_t = CasBackoff::DefaultRetry)]
    pub backoff: CasBackoff,

    /// Limit on one request, connection included; a request over it counts as a `timeout` failure.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub request_timeout: Duration,

    /// Report format.
    #[arg(short = 'o', long = "output", value_parser = terse_output_format_parser(), default_value = "table")]
    pub output: OutputFormat,

    /// Print no progress line on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// Watches the watch workload opens (spread over the endpoints): over HTTP each on a stream
    /// of its own, over etcd-grpc `--watches-per-stream` to a gRPC Watch stream.
    #[arg(long, default_value_t = 1)]
    pub watchers: usize,

    /// Watches that share one gRPC Watch stream (etcd-grpc's watch workload; default 100, etcd's
    /// `benchmark watch --watch-per-stream`), as clientv3 multiplexes a process's watches.
    #[arg(long)]
    pub watches_per_stream: Option<usize>,

    /// hold-watches: the share of the watches, in percent, whose streams are never read after
    /// their watches are created.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub stalled_percent: u8,

    /// Writes per second of the watch workload's single writer.
    #[arg(long, default_value_t = 10)]
    pub write_rate: u32,

    #[command(flatten)]
    pub tls: TlsArgs,
}

impl BenchArgs {
    /// `--endpoints` checked and normalised, or the target's local cluster when none are given.
    /// The default endpoints are `https://` when `--cacert` is given, as in `revkv ctl`.
    fn resolved_endpoints(&self) -> Result<Vec<String>, String> {
        let https_allowed = self.tls.cacert.is_some() && self.target != TargetKind::EtcdGrpc;
        if self.endpoints.is_empty() {
            let defaults = self.target.default_endpoints();
            if !https_allowed {
                return Ok(defaults);
            }
            return Ok(self
                .tls
                .adjust_default_endpoints(defaults.clone(), &defaults));
        }
        self.endpoints
            .iter()
            .map(|endpoint| normalise_endpoint(endpoint, https_allowed))
            .collect()
    }

    /// The plan of the watch workload, which measures streams rather than requests.
    pub fn into_watch_plan(self) -> Result<WatchLatencyPlan, String> {
        if self.watchers == 0 || self.watchers > MOST_WATCHERS {
            return Err(format!("--watchers must be between 1 and {MOST_WATCHERS}"));
        }
        let grpc = self.target == TargetKind::EtcdGrpc;
        if !grpc && (self.conns.is_some() || self.watches_per_stream.is_some()) {
            return Err("--conns and --watches-per-stream apply to --target etcd-grpc only".into());
        }
        let watches_per_stream = self.checked_watches_per_stream()?;
        let streams = self.watchers.div_ceil(watches_per_stream);
        let grpc_connections = self.conns.unwrap_or(1);
        if grpc_connections == 0 || grpc_connections > streams {
            return Err(format!(
                "--conns must be between 1 and the number of watch streams ({streams})"
            ));
        }
        if self.write_rate == 0 || self.write_rate > 10_000 {
            return Err("--write-rate must be between 1 and 10000 writes per second".into());
        }
        if self.value_size > LARGEST_VALUE_SIZE {
            return Err(format!(
                "--value-size must be at most {LARGEST_VALUE_SIZE} bytes"
            ));
        }
        let endpoints = self.resolved_endpoints()?;
        Ok(WatchLatencyPlan {
            target: self.target,
            endpoints,
            watchers: self.watchers,
            grpc_connections,
            watches_per_stream,
            write_rate: self.write_rate,
            duration: self.duration.unwrap_or(DEFAULT_DURATION),
            value_size: self.value_size,
            run_tag: run_tag_from_clock(),
            tls: self.tls.client_tls(),
        })
    }
}

impl BenchArgs {
    /// `--watches-per-stream`, or etcd's benchmark's default, checked.
    fn checked_watches_per_stream(&self) -> Result<usize, String> {
        let watches_per_stream = self
            .watches_per_stream
            .unwrap_or(DEFAULT_WATCHES_PER_STREAM);
        if watches_per_stream == 0 || watches_per_stream > MOST_WATCHERS {
            return Err(format!(
                "--watches-per-stream must be between 1 and {MOST_WATCHERS}"
            ));
        }
        Ok(watches_per_stream)
    }

    /// The plan of the hold-watches workload, which holds watches and measures nothing.
    pub fn into_held_watches_plan(self) -> Result<HeldWatchesPlan, String> {
        if self.target != TargetKind::EtcdGrpc {
            return Err("hold-watches speaks etcd's gRPC API only: give --target etcd-grpc".into());
        }
        if self.watchers == 0 || self.watchers > MOST_WATCHERS {
            return Err(format!("--watchers must be between 1 and {MOST_WATCHERS}"));
        }
        let watches_per_stream = self.checked_watches_per_stream()?;
        let reading_connections = self.conns.unwrap_or(1);
        if reading_connections == 0 || reading_connections > MOST_CLIENTS {
            return Err(format!("--conns must be between 1 and {MOST_CLIENTS}"));
        }
        let endpoints = self.resolved_endpoints()?;
        Ok(HeldWatchesPlan {
            endpoints,
            watchers: self.watchers,
            watches_per_stream,
            reading_connections,
            stalled_percent: self.stalled_percent,
            duration: self.duration.unwrap_or(TIME_CEILING_FOR_COUNTED_RUNS),
        })
    }
}

/// Most watchers one run opens (each is one HTTP connection on both sides).
pub const MOST_WATCHERS: usize = 16_384;

/// Watches per gRPC Watch stream unless told otherwise: etcd's `benchmark watch` default.
pub const DEFAULT_WATCHES_PER_STREAM: usize = 100;

/// What one watch-latency run does.
#[derive(Debug, Clone)]
pub struct WatchLatencyPlan {
    pub target: TargetKind,
    pub endpoints: Vec<String>,
    pub watchers: usize,
    /// etcd-grpc: the connections the Watch streams share, and the watches on each stream.
    pub grpc_connections: usize,
    pub watches_per_stream: usize,
    /// Writes per second.
    pub write_rate: u32,
    pub duration: Duration,
    pub value_size: usize,
    pub run_tag: String,
    /// The CA and client certificate for `https://` endpoints.
    pub tls: ClientTls,
}

/// The retry policies the cas workload can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CasBackoff {
    DefaultRetry,
    DefaultBackoff,
    Adaptive,
}

/// When a run stops: after `operation_limit` operations (if set) or after `time_limit`, whichever
/// comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub operation_limit: Option<u64>,
    pub time_limit: Duration,
}

/// Everything one run needs, resolved from [`BenchArgs`].
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub workload: Workload,
    pub target: TargetKind,
    pub endpoints: Vec<String>,
    pub client_count: usize,
    /// The gRPC connections the client tasks share (etcd-grpc; 1 for the HTTP targets, where
    /// every task has its own).
    pub grpc_connections: usize,
    pub limits: RunLimits,
    pub request_timeout: Duration,
    pub output_format: OutputFormat,
    pub show_progress: bool,
    /// Distinguishes this run's keys from earlier runs' (put writes new keys every run).
    pub run_tag: String,
    /// The CA and client certificate for `https://` endpoints.
    pub tls: ClientTls,
    /// How the cas workload's increments back off.
    pub cas_backoff: CasBackoff,
}

impl BenchArgs {
    /// Checks the arguments against each other and fills in the defaults.
    pub fn into_plan(self) -> Result<BenchPlan, String> {
        let run_tag = run_tag_from_clock();
        self.into_plan_with_run_tag(run_tag)
    }

    /// [`BenchArgs::into_plan`] with a given run tag (tests use a fixed one).
    pub fn into_plan_with_run_tag(self, run_tag: String) -> Result<BenchPlan, String> {
        self.check_options_every_workload_shares()?;
        let workload = self.workload_from_its_options()?;
        let endpoints = self.resolved_endpoints()?;
        Ok(BenchPlan {
            workload,
            target: self.target,
            endpoints,
            client_count: self.clients,
            grpc_connections: self.conns.unwrap_or(1),
            limits: run_limits(self.total, self.duration),
            request_timeout: self.request_timeout,
            output_format: self.output,
            show_progress: !self.quiet,
            run_tag,
            tls: self.tls.client_tls(),
            cas_backoff: self.backoff,
        })
    }

    /// Checks the options that bound every request-driven run (clients, count, duration, request
    /// timeout, value size), before any workload-specific one, so that their messages come first.
    fn check_options_every_workload_shares(&self) -> Result<(), String> {
        if self.clients == 0 || self.clients > MOST_CLIENTS {
            return Err(format!("--clients must be between 1 and {MOST_CLIENTS}"));
        }
        if let Some(conns) = self.conns {
            if self.target != TargetKind::EtcdGrpc {
                return Err(
                    "--conns applies to --target etcd-grpc only (an HTTP/1.1 connection \
                            carries one request at a time, so each client task has its own)"
                        .to_string(),
                );
            }
            if conns == 0 || conns > self.clients {
                return Err("--conns must be between 1 and --clients".to_string());
            }
        }
        if self.total == Some(0) {
            return Err("--total must be at least 1".to_string());
        }
        if self.duration == Some(Duration::ZERO) {
            return Err("--duration must be longer than zero".to_string());
        }
        if self.request_timeout.is_zero() {
            return Err("--request-timeout must be longer than zero".to_string());
        }
        if self.value_size > LARGEST_VALUE_SIZE {
            return Err(format!(
                "--value-size must be at most {LARGEST_VALUE_SIZE} bytes"
            ));
        }
        Ok(())
    }

    /// The workload with its defaults filled in, refusing options that do not apply to it
    /// (`--consistency` is for get only, `--keys` for get and cas) and a zero `--keys`.
    fn workload_from_its_options(&self) -> Result<Workload, String> {
        match self.workload {
            WorkloadKind::Put => {
                if self.consistency.is_some() || self.keys.is_some() {
                    return Err("--consistency and --keys apply to the get workload only".into());
                }
                Ok(Workload::Put {
                    value_size: self.value_size,
                })
            }
            WorkloadKind::Get => {
                let key_count = self.keys.unwrap_or(1);
                if key_count == 0 {
                    return Err("--keys must be at least 1".to_string());
                }
                Ok(Workload::Get {
                    consistency: self.consistency.unwrap_or(ReadConsistency::Linearizable),
                    key_count,
                    value_size: self.value_size,
                })
            }
            WorkloadKind::Cas => {
                if self.consistency.is_some() {
                    return Err("--consistency applies to the get workload only".into());
                }
                let hot_keys = self.keys.unwrap_or(1);
                if hot_keys == 0 {
                    return Err("--keys must be at least 1".to_string());
                }
                Ok(Workload::Cas { hot_keys })
            }
            WorkloadKind::Watch => Err("the watch workload is planned by into_watch_plan".into()),
            WorkloadKind::HoldWatches => {
                Err("the hold-watches workload is planned by into_held_watches_plan".into())
            }
        }
    }
}

/// The limits from `--total` and `--duration`: both when both are given; the default duration
/// when neither is; the ceiling when only a count is.
pub fn run_limits(total: Option<u64>, duration: Option<Duration>) -> RunLimits {
    let time_limit = match (total, duration) {
        (_, Some(duration)) => duration,
        (Some(_), None) => TIME_CEILING_FOR_COUNTED_RUNS,
        (None, None) => DEFAULT_DURATION,
    };
    RunLimits {
        operation_limit: total,
        time_limit,
    }
}

/// An endpoint as given, checked to be an `http://` URL (or `https://` when `https_allowed`: a CA
/// was given and the target speaks HTTP), without a trailing slash.
pub fn normalise_endpoint(endpoint: &str, https_allowed: bool) -> Result<String, String> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let host_and_port = match trimmed.strip_prefix("https://") {
        Some(host_and_port) if https_allowed => Some(host_and_port),
        Some(_) => None,
        None => trimmed.strip_prefix("http://"),
    };
    let Some(host_and_port) = host_and_port else {
        return Err(format!(
            "endpoint {endpoint:?} must start with http://, or https:// with --cacert (not for \
             etcd-grpc)"
        ));
    };
    if host_and_port.is_empty() || host_and_port.contains('/') {
        return Err(format!(
            "endpoint {endpoint:?} must be http://host:port with no path"
        ));
    }
    Ok(trimmed.to_string())
}

/// A short tag from the wall clock (milliseconds since the epoch, base 36).
fn run_tag_from_clock() -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since_epoch| since_epoch.as_millis())
        .unwrap_or(0);
    to_base36(millis)
}

fn to_base36(mut number: u128) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut digits = Vec::new();
    loop {
        digits.push(DIGITS[(number % 36) as usize]);
        number /= 36;
        if number == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).expect("base-36 digits are ASCII")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct CommandLineUnderTest {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn plan_from(words: &[&str]) -> Result<BenchPlan, String> {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(words);
        let parsed =
            CommandLineUnderTest::try_parse_from(argv).map_err(|error| error.to_string())?;
        parsed.bench.into_plan_with_run_tag("tag".to_string())
    }

    #[test]
    fn put_with_no_options_is_one_client_for_ten_seconds_against_local_revkv() {
        let plan = plan_from(&["put"]).unwrap();
        assert!(matches!(plan.workload, Workload::Put { value_size: 256 }));
        assert_eq!(plan.target, TargetKind::Revkv);
        assert_eq!(
            plan.endpoints,
            [
                "http://127.0.0.1:7001",
                "http://127.0.0.1:7002",
                "http://127.0.0.1:7003"
            ]
        );
        assert_eq!(plan.client_count, 1);
        assert_eq!(
            plan.limits,
            RunLimits {
                operation_limit: None,
                time_limit: DEFAULT_DURATION
            }
        );
        assert_eq!(plan.output_format, OutputFormat::Table);
        assert!(plan.show_progress);
    }

    #[test]
    fn get_options_are_parsed_and_etcd_gets_its_own_default_endpoints() {
        let plan = plan_from(&[
            "get",
            "--target",
            "etcd",
            "--consistency",
            "serializable",
            "--keys",
            "1000",
            "--clients",
            "16",
            "--duration",
            "2500ms",
            "-o",
            "json",
            "--quiet",
        ])
        .unwrap();
        assert!(matches!(
            plan.workload,
            Workload::Get {
                consistency: ReadConsistency::Serializable,
                key_count: 1000,
                value_size: 256
            }
        ));
        assert_eq!(plan.target, TargetKind::Etcd);
        assert_eq!(
            plan.endpoints,
            [
                "http://127.0.0.1:12379",
                "http://127.0.0.1:22379",
                "http://127.0.0.1:32379"
            ]
        );
        assert_eq!(plan.client_count, 16);
        assert_eq!(plan.limits.time_limit, Duration::from_millis(2500));
        assert_eq!(plan.output_format, OutputFormat::Json);
        assert!(!plan.show_progress);
    }

    #[test]
    fn cas_takes_its_hot_key_count_from_keys() {
        let plan = plan_from(&["cas", "--keys", "2", "--clients", "64"]).unwrap();
        assert_eq!(plan.workload, Workload::Cas { hot_keys: 2 });
        assert_eq!(
            plan_from(&["cas"]).unwrap().workload,
            Workload::Cas { hot_keys: 1 }
        );
    }

    #[test]
    fn get_defaults_to_one_key_read_linearizably() {
        let plan = plan_from(&["get"]).unwrap();
        assert!(matches!(
            plan.workload,
            Workload::Get {
                consistency: ReadConsistency::Linearizable,
                key_count: 1,
                ..
            }
        ));
    }

    #[test]
    fn endpoints_are_split_on_commas_and_lose_trailing_slashes() {
        let plan = plan_from(&["put", "--endpoints", "http://a:1/,http://b:2"]).unwrap();
        assert_eq!(plan.endpoints, ["http://a:1", "http://b:2"]);
    }

    #[test]
    fn a_count_alone_keeps_a_time_ceiling_and_both_limits_can_be_combined() {
        let counted = plan_from(&["put", "--total", "500"]).unwrap();
        assert_eq!(
            counted.limits,
            RunLimits {
                operation_limit: Some(500),
                time_limit: TIME_CEILING_FOR_COUNTED_RUNS
            }
        );
        let both = plan_from(&["put", "--total", "500", "--duration", "3s"]).unwrap();
        assert_eq!(
            both.limits,
            RunLimits {
                operation_limit: Some(500),
                time_limit: Duration::from_secs(3)
            }
        );
    }

    #[test]
    fn inconsistent_arguments_are_refused_with_a_reason() {
        for (words, expected_words) in [
            (&["put", "--clients", "0"][..], "--clients"),
            (&["put", "--total", "0"][..], "--total"),
            (&["put", "--duration", "0s"][..], "--duration"),
            (&["put", "--keys", "5"][..], "get workload only"),
            (
                &["put", "--consistency", "serializable"][..],
                "get workload only",
            ),
            (&["get", "--keys", "0"][..], "--keys"),
            (&["cas", "--keys", "0"][..], "--keys"),
            (
                &["cas", "--consistency", "linearizable"][..],
                "get workload only",
            ),
            (&["put", "--endpoints", "https://a:1"][..], "http://"),
            (&["put", "--endpoints", "http://a:1/v1"][..], "no path"),
            (&["put", "--value-size", "2000000"][..], "--value-size"),
            (&["put", "--conns", "2"][..], "etcd-grpc only"),
            (
                &["put", "--target", "etcd-grpc", "--conns", "0"][..],
                "--conns",
            ),
            (
                &[
                    "put",
                    "--target",
                    "etcd-grpc",
                    "--clients",
                    "4",
                    "--conns",
                    "5",
                ][..],
                "--conns",
            ),
        ] {
            let error = plan_from(words).unwrap_err();
            assert!(
                error.contains(expected_words),
                "{words:?} gave {error:?}, expected it to mention {expected_words:?}"
            );
        }
    }

    #[test]
    fn grpc_clients_share_one_connection_unless_told_otherwise() {
        let one = plan_from(&["put", "--target", "etcd-grpc", "--clients", "64"]).unwrap();
        assert_eq!(one.grpc_connections, 1);
        let words = [
            "put",
            "--target",
            "etcd-grpc",
            "--clients",
            "64",
            "--conns",
            "8",
        ];
        assert_eq!(plan_from(&words).unwrap().grpc_connections, 8);
    }

    #[test]
    fn etcd_grpc_plans_every_request_workload_against_the_local_etcd_cluster() {
        for workload in ["put", "get", "cas"] {
            let plan = plan_from(&[workload, "--target", "etcd-grpc"]).unwrap();
            assert_eq!(plan.target, TargetKind::EtcdGrpc);
            assert_eq!(
                plan.endpoints,
                [
                    "http://127.0.0.1:12379",
                    "http://127.0.0.1:22379",
                    "http://127.0.0.1:32379"
                ]
            );
        }
        let serializable = plan_from(&[
            "get",
            "--target",
            "etcd-grpc",
            "--consistency",
            "serializable",
        ])
        .unwrap();
        assert!(matches!(
            serializable.workload,
            Workload::Get {
                consistency: ReadConsistency::Serializable,
                ..
            }
        ));
    }

    #[test]
    fn the_watch_workload_over_grpc_puts_its_watches_on_shared_streams() {
        let plan_of = |words: &[&str]| {
            let mut argv = vec!["bench", "watch"];
            argv.extend_from_slice(words);
            CommandLineUnderTest::try_parse_from(argv)
                .unwrap()
                .bench
                .into_watch_plan()
        };
        let plan = plan_of(&["--target", "etcd-grpc", "--watchers", "1000"]).unwrap();
        assert_eq!((plan.grpc_connections, plan.watches_per_stream), (1, 100));
        let words = [
            "--target",
            "etcd-grpc",
            "--watchers",
            "10",
            "--watches-per-stream",
            "3",
        ];
        let words = [&words[..], &["--conns", "4"]].concat();
        assert_eq!(plan_of(&words).unwrap().grpc_connections, 4);
        for (words, expected) in [
            (&["--conns", "2"][..], "etcd-grpc only"),
            (&["--watches-per-stream", "2"][..], "etcd-grpc only"),
            (
                &["--target", "etcd-grpc", "--watches-per-stream", "0"][..],
                "--watches-per-stream",
            ),
            // Ten watches on one stream: a second connection would carry nothing.
            (
                &["--target", "etcd-grpc", "--watchers", "10", "--conns", "2"][..],
                "--conns",
            ),
        ] {
            let error = plan_of(words).unwrap_err();
            assert!(error.contains(expected), "{words:?} gave {error:?}");
        }
    }

    #[test]
    fn unknown_workloads_and_targets_are_refused_by_the_parser() {
        assert!(plan_from(&["scan"]).is_err());
        assert!(plan_from(&["put", "--target", "consul"]).is_err());
    }

    #[test]
    fn run_tags_are_base36() {
        assert_eq!(to_base36(0), "0");
        assert_eq!(to_base36(35), "z");
        assert_eq!(to_base36(36), "10");
    }
}
