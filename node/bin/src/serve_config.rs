//! `revkv serve` configuration: command-line flags, `REVKV_*` environment variables and an optional
//! TOML file (in that order of precedence), turned into a `NodeConfig`.
//!
//! With no flags at all, `revkv serve` runs a single-member cluster in `./revkv-data` with the
//! client API on 127.0.0.1:7001 and the peer listener on 127.0.0.1:7101.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use revkv_metrics::PrefixLabelConfig;
use revkv_raft::{LeaseSettings, MemberConfig, MemberNode, PeerLimits, RaftTiming, TailLimits};
use revkv_storage::{Limits, LogOptions, StoreOptions};
use revkv_tls::{PeerTls, ServerTls, TlsFiles};
use serde::Deserialize;

use revkv_node::auth::AuthOptions;
use revkv_node::compaction::AutoCompaction;
use revkv_node::compaction_cleaner::CleanerSettings;
use revkv_node::hot_keys::HotKeyLimits;
use revkv_node::http::{HttpLimits, LeaseStreamLimits, DEFAULT_MAX_SNAPSHOT_STREAMS};
use revkv_node::space_quota::{SpaceQuota, DEFAULT_QUOTA_BACKEND_BYTES};
use revkv_node::watch::WatchLimits;
use revkv_node::NodeConfig;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Every setting of `revkv serve`. Each is optional here; `into_node_config` fills defaults.
/// The TOML file uses the flag names as keys (`data-dir = "..."`).
#[derive(Args, Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServeArgs {
    /// A TOML file with any of these settings; flags and environment variables override it.
    #[arg(long, env = "REVKV_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// This member's id (never reuse an id in a cluster).
    #[arg(long, env = "REVKV_ID")]
    pub id: Option<u64>,
    /// Where the state file and the raft log live.
    #[arg(long, env = "REVKV_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address of the client HTTP API.
    #[arg(long, env = "REVKV_LISTEN_CLIENT")]
    pub listen_client: Option<SocketAddr>,
    /// Address of etcd's v3 gRPC API (etcdctl, etcd client libraries); none when not given. It
    /// uses the client listener's TLS settings.
    #[arg(long, env = "REVKV_LISTEN_GRPC")]
    pub listen_grpc: Option<SocketAddr>,
    /// Address of the peer listener (raft traffic).
    #[arg(long, env = "REVKV_LISTEN_PEER")]
    pub listen_peer: Option<SocketAddr>,
    /// Client URL other members and clients use to reach this member.
    #[arg(long, env = "REVKV_ADVERTISE_CLIENT")]
    pub advertise_client: Option<String>,
    /// gRPC URL etcd clients use to reach this member (default: from `--listen-grpc`). etcd's
    /// `MemberList` names it as the member's client URL, so `etcdctl --cluster` and clients that
    /// sync their endpoints reach every member's gRPC listener.
    #[arg(long, env = "REVKV_ADVERTISE_GRPC")]
    pub advertise_grpc: Option<String>,
    /// Peer URL other members use to reach this member.
    #[arg(long, env = "REVKV_ADVERTISE_PEER")]
    pub advertise_peer: Option<String>,
    /// The local address this member's connections to other members come from (default: the
    /// system chooses), for hosts with several addresses.
    #[arg(long, env = "REVKV_PEER_SOURCE_ADDRESS")]
    pub peer_source_address: Option<std::net::IpAddr>,
    /// The founding members, `1=http://127.0.0.1:7101,2=...` (peer URLs). Used once, on a member
    /// with no data; a restart with existing data ignores it.
    #[arg(long, env = "REVKV_INITIAL_CLUSTER")]
    pub initial_cluster: Option<String>,
    /// Start empty and wait to be added as a learner (`POST /v1/members` on an existing member).
    #[arg(long, env = "REVKV_JOIN", num_args = 0..=1, default_missing_value = "true")]
    pub join: Option<bool>,
    /// Raft heartbeat interval in milliseconds (default 100).
    #[arg(long, env = "REVKV_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Minimum election timeout in milliseconds; the maximum is twice this (default 1000).
    #[arg(long, env = "REVKV_ELECTION_TIMEOUT_MS")]
    pub election_timeout_ms: Option<u64>,
    /// Build a snapshot after this many log entries (default 10000); a snapshot is a flush that lets
    /// the log be purged, so this bounds the log's length.
    #[arg(long, env = "REVKV_SNAPSHOT_ENTRIES")]
    pub snapshot_entries: Option<u64>,
    /// Log entries kept behind a snapshot for lagging followers (default 5000).
    #[arg(long, env = "REVKV_SNAPSHOT_KEEP_ENTRIES")]
    pub snapshot_keep_entries: Option<u64>,
    /// Longest time between durable commits of the state file, in milliseconds (default 500).
    #[arg(long, env = "REVKV_DURABLE_COMMIT_INTERVAL_MS")]
    pub durable_commit_interval_ms: Option<u64>,
    /// Page cache of the state file (redb), in bytes (default 256 MiB). Most of a member's memory
    /// under load; reads of a store larger than it go to the disk.
    #[arg(long, env = "REVKV_STATE_CACHE_BYTES")]
    pub state_cache_bytes: Option<usize>,
    /// Size at which the raft log starts a new segment file, in bytes (default 64 MiB).
    #[arg(long, env = "REVKV_LOG_SEGMENT_BYTES")]
    pub log_segment_bytes: Option<u64>,
    /// Recent raft log entries kept in memory for replication, at most (default 4096).
    #[arg(long, env = "REVKV_LOG_TAIL_ENTRIES")]
    pub log_tail_entries: Option<usize>,
    /// Bytes of recent raft log entries kept in memory for replication, at most (default 32 MiB).
    #[arg(long, env = "REVKV_LOG_TAIL_BYTES")]
    pub log_tail_bytes: Option<usize>,
    /// Longest wait for a write, a read barrier or min_revision, in milliseconds (default 5000).
    #[arg(long, env = "REVKV_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// Largest request body in bytes (default 1.5 MiB).
    #[arg(long, env = "REVKV_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Longest key in bytes (default 4096).
    #[arg(long, env = "REVKV_MAX_KEY_BYTES")]
    pub max_key_bytes: Option<usize>,
    /// Largest value in bytes (default 1 MiB).
    #[arg(long, env = "REVKV_MAX_VALUE_BYTES")]
    pub max_value_bytes: Option<usize>,
    /// Most ops per txn branch (default 128).
    #[arg(long, env = "REVKV_MAX_TXN_OPS")]
    pub max_txn_ops: Option<usize>,
    /// Most leases granted at once; a grant beyond it is refused (default 100000). The leader
    /// keeps every lease's deadline in memory.
    #[arg(long, env = "REVKV_MAX_LEASES")]
    pub max_leases: Option<u64>,
    /// Most keys attached to one lease (default 10000); a revoke deletes them in one revision.
    #[arg(long, env = "REVKV_MAX_KEYS_PER_LEASE")]
    pub max_keys_per_lease: Option<u64>,
    /// Longest lease TTL a grant may ask for, in seconds (default 9000000000, etcd's). The
    /// shortest is 1.5 x the longest election timeout, rounded up to whole seconds.
    #[arg(long, env = "REVKV_MAX_LEASE_TTL_SECONDS")]
    pub max_lease_ttl_seconds: Option<i64>,
    /// How often the leader looks for expired leases, in milliseconds (default 250): part of how
    /// late an expiry can be.
    #[arg(long, env = "REVKV_LEASE_EXPIRY_CHECK_INTERVAL_MS")]
    pub lease_expiry_check_interval_ms: Option<u64>,
    /// How long after a lease's grant or last keep-alive the leader checkpoints its remaining TTL
    /// through raft, in milliseconds (default 5000; 0 turns checkpoints off, as in etcd 3.4). With
    /// checkpoints a leader change delays an expiry by at most about this much.
    #[arg(long, env = "REVKV_LEASE_CHECKPOINT_INTERVAL_MS")]
    pub lease_checkpoint_interval_ms: Option<u64>,
    /// Streaming keep-alives (`POST /v1/leases/keepalive`) open on this member at once (default
    /// 10000); one more is answered 503.
    #[arg(long, env = "REVKV_MAX_LEASE_KEEPALIVE_STREAMS")]
    pub max_lease_keepalive_streams: Option<usize>,
    /// A streaming keep-alive that sends no line for this long is ended, in milliseconds
    /// (default 60000).
    #[arg(long, env = "REVKV_LEASE_KEEPALIVE_IDLE_TIMEOUT_MS")]
    pub lease_keepalive_idle_timeout_ms: Option<u64>,
    /// Connections open on the client listener at once (default 4096); further clients wait in
    /// the kernel's accept backlog.
    #[arg(long, env = "REVKV_MAX_CLIENT_CONNECTIONS")]
    pub max_client_connections: Option<usize>,
    /// Connections one client address may hold on the client listener (default 1024); another is
    /// closed at once.
    #[arg(long, env = "REVKV_MAX_CONNECTIONS_PER_CLIENT")]
    pub max_connections_per_client: Option<usize>,
    /// The longest a client connection may wait for the whole head of its next request, in
    /// milliseconds (default 30000): a client that trickles its headers (slowloris) is
    /// disconnected, and so is a keep-alive connection idle this long.
    #[arg(long, env = "REVKV_HEADER_READ_TIMEOUT_MS")]
    pub header_read_timeout_ms: Option<u64>,
    /// The largest request head (request line and headers) in bytes (default 65536; at least
    /// 8192); a larger one is answered 431.
    #[arg(long, env = "REVKV_MAX_HEADER_BYTES")]
    pub max_header_bytes: Option<usize>,
    /// Backups (`GET /v1/snapshot`) streaming from this member at once (default 2); one more is
    /// answered 503.
    #[arg(long, env = "REVKV_MAX_SNAPSHOT_STREAMS")]
    pub max_snapshot_streams: Option<usize>,
    /// Keys the hot-key top-k (`GET /v1/conflicts`) tracks per slice of its window (default 256;
    /// memory is at most five slices of this many keys).
    #[arg(long, env = "REVKV_HOT_KEYS_CAPACITY")]
    pub hot_keys_capacity: Option<usize>,
    /// The sliding window of the hot-key top-k, in seconds (default 300).
    #[arg(long, env = "REVKV_HOT_KEYS_WINDOW_SECONDS")]
    pub hot_keys_window_seconds: Option<u64>,
    /// Largest raft snapshot this member accepts from a leader, in bytes (default 64 GiB); it is
    /// streamed to a file under the data directory, so this bounds disk, not memory.
    #[arg(long, env = "REVKV_MAX_SNAPSHOT_BYTES")]
    pub max_snapshot_bytes: Option<u64>,
    /// History entries one step of compaction cleans, inside the compacting apply and then in
    /// the background (default 1000, etcd's `--experimental-compaction-batch-limit`).
    #[arg(long, env = "REVKV_COMPACTION_BATCH_LIMIT")]
    pub compaction_batch_limit: Option<usize>,
    /// The pause between two background compaction steps, in milliseconds (default 10, etcd's
    /// `--experimental-compaction-sleep-interval`).
    #[arg(long, env = "REVKV_COMPACTION_SLEEP_INTERVAL_MS")]
    pub compaction_sleep_interval_ms: Option<u64>,
    /// How long an auth token is valid, in seconds (default 300, as etcd's tokens).
    #[arg(long, env = "REVKV_AUTH_TOKEN_TTL_SECONDS")]
    pub auth_token_ttl_seconds: Option<u64>,
    /// Password checks (argon2, tens of milliseconds of one core each) running at once on this
    /// member (default 2); more wait, up to the request timeout.
    #[arg(long, env = "REVKV_MAX_CONCURRENT_PASSWORD_CHECKS")]
    pub max_concurrent_password_checks: Option<usize>,
    /// Most leases in one checkpoint entry (default 1000, etcd's); at most one checkpoint is
    /// proposed per expiry check.
    #[arg(long, env = "REVKV_MAX_LEASES_PER_CHECKPOINT")]
    pub max_leases_per_checkpoint: Option<usize>,
    /// Log line format.
    #[arg(long, env = "REVKV_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// What `--auto-compaction-retention` counts: `revision` or `periodic` (default periodic).
    #[arg(long, env = "REVKV_AUTO_COMPACTION_MODE", value_enum)]
    pub auto_compaction_mode: Option<AutoCompactionMode>,
    /// Revisions to keep (`revision` mode), or a time span such as `1h` or `30m` (`periodic` mode;
    /// a bare number means hours, as in etcd). 0, the default, turns automatic compaction off.
    #[arg(long, env = "REVKV_AUTO_COMPACTION_RETENTION")]
    pub auto_compaction_retention: Option<String>,
    /// How often `revision` mode checks, in milliseconds (default 300000, etcd's five minutes).
    #[arg(long, env = "REVKV_AUTO_COMPACTION_INTERVAL_MS")]
    pub auto_compaction_interval_ms: Option<u64>,
    /// Size of the state file past which this member raises the NOSPACE alarm, in bytes (default
    /// 2 GiB, etcd's; 0 means the default, as in etcd). While the alarm is raised, writes that would
    /// grow the store are refused (507 `no_space`) on every member.
    #[arg(long, env = "REVKV_QUOTA_BACKEND_BYTES")]
    pub quota_backend_bytes: Option<u64>,
    /// Periodic bookmark interval of a watch that names none, in milliseconds; 0 turns them off
    /// (default 600000, etcd's ten minutes).
    #[arg(long, env = "REVKV_WATCH_PROGRESS_NOTIFY_INTERVAL_MS")]
    pub watch_progress_notify_interval_ms: Option<u64>,
    /// Most watches open on this member (default 65536).
    #[arg(long, env = "REVKV_MAX_WATCHES")]
    pub max_watches: Option<usize>,
    /// Messages a watch stream may hold for a slow reader before it is canceled (default 128).
    #[arg(long, env = "REVKV_WATCH_BUFFER_MESSAGES")]
    pub watch_buffer_messages: Option<usize>,
    /// Key path segments in the `prefix` label of conflict and retry metrics (default 1).
    #[arg(long, env = "REVKV_METRICS_PREFIX_DEPTH")]
    pub metrics_prefix_depth: Option<usize>,
    /// Distinct `prefix` labels before further prefixes are counted as `other` (default 100).
    #[arg(long, env = "REVKV_METRICS_MAX_PREFIXES")]
    pub metrics_max_prefixes: Option<usize>,
    /// The client listener's TLS certificate (PEM). With `--key-file`, the client API is served
    /// over HTTPS only. Reloaded when the file changes.
    #[arg(long, env = "REVKV_CERT_FILE")]
    pub cert_file: Option<PathBuf>,
    /// The private key of `--cert-file` (PEM). Reloaded when the file changes.
    #[arg(long, env = "REVKV_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// The CA that client certificates must be signed by, with `--client-cert-auth` (PEM).
    #[arg(long, env = "REVKV_TRUSTED_CA_FILE")]
    pub trusted_ca_file: Option<PathBuf>,
    /// Refuse clients that present no certificate signed by `--trusted-ca-file`.
    #[arg(long, env = "REVKV_CLIENT_CERT_AUTH", num_args = 0..=1, default_missing_value = "true")]
    pub client_cert_auth: Option<bool>,
    /// The peer listener's certificate, also presented when calling other members (PEM; it must
    /// allow both server and client authentication). Turns on mutual TLS between members.
    #[arg(long, env = "REVKV_PEER_CERT_FILE")]
    pub peer_cert_file: Option<PathBuf>,
    /// The private key of `--peer-cert-file` (PEM).
    #[arg(long, env = "REVKV_PEER_KEY_FILE")]
    pub peer_key_file: Option<PathBuf>,
    /// The CA that signs every member's peer certificate (PEM): peers are verified against it both
    /// ways. Required with peer TLS.
    #[arg(long, env = "REVKV_PEER_TRUSTED_CA_FILE")]
    pub peer_trusted_ca_file: Option<PathBuf>,
    /// Refuse peers that present no certificate signed by `--peer-trusted-ca-file`. Required with
    /// peer TLS: revkv members always authenticate each other.
    #[arg(long, env = "REVKV_PEER_CLIENT_CERT_AUTH", num_args = 0..=1, default_missing_value = "true")]
    pub peer_client_cert_auth: Option<bool>,
}

/// What automatic compaction's retention counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AutoCompactionMode {
    Revision,
    #[default]
    Periodic,
}

/// Takes every setting from `preferred` when it has one, otherwise from `fallback`.
macro_rules! prefer {
    ($preferred:expr, $fallback:expr; $($field:ident),+ $(,)?) => {
        ServeArgs { config: $preferred.config, $($field: $preferred.$field.or($fallback.$field)),+ }
    };
}

impl ServeArgs {
    /// Overlays these settings (flags and environment) on the TOML file's, if one is named.
    pub fn with_config_file(self) -> Result<ServeArgs, String> {
        let Some(path) = &self.config else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let file: ServeArgs =
            toml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
        Ok(
            prefer!(self, file; id, data_dir, listen_client, listen_grpc, listen_peer, advertise_client,
            advertise_grpc, advertise_peer, peer_source_address, initial_cluster, join, heartbeat_ms,
            election_timeout_ms, snapshot_entries, snapshot_keep_entries, durable_commit_interval_ms,
            state_cache_bytes, log_segment_bytes, log_tail_entries, log_tail_bytes,
            request_timeout_ms, max_body_bytes, max_key_bytes, max_value_bytes, max_txn_ops,
            max_leases, max_keys_per_lease, max_lease_ttl_seconds, lease_expiry_check_interval_ms,
            lease_checkpoint_interval_ms, max_leases_per_checkpoint, max_lease_keepalive_streams,
            lease_keepalive_idle_timeout_ms, max_client_connections, max_connections_per_client,
            header_read_timeout_ms, max_header_bytes, max_snapshot_streams, hot_keys_capacity, hot_keys_window_seconds, max_snapshot_bytes, compaction_batch_limit,
            compaction_sleep_interval_ms, auth_token_ttl_seconds,
            max_concurrent_password_checks, log_format, auto_compaction_mode, auto_compaction_retention,
            quota_backend_bytes,
            auto_compaction_interval_ms, watch_progress_notify_interval_ms, max_watches,
            watch_buffer_messages, metrics_prefix_depth, metrics_max_prefixes, cert_file, key_file,
            trusted_ca_file, client_cert_auth, peer_cert_file, peer_key_file, peer_trusted_ca_file,
            peer_client_cert_auth),
        )
    }

    /// Fills defaults and checks the settings fit together.
    pub fn into_node_config(self) -> Result<NodeConfig, String> {
        let watch = self.watch_limits()?;
        let lease_stream = self.lease_stream_limits()?;
        let max_snapshot_streams = self.max_snapshot_streams()?;
        let hot_keys = self.hot_key_limits()?;
        let auth = self.auth_options()?;
        let compaction_cleaner = self.compaction_cleaner()?;
        let auto_compaction = self.auto_compaction()?;
        let space_quota = self.space_quota();
        let client_connections = self.client_connection_limits()?;
        let id = self.id.unwrap_or(1);
        let metric_prefix_labels = self.metric_prefix_labels()?;
        let (log, log_tail) = self.log_options()?;
        let election_min = Duration::from_millis(self.election_timeout_ms.unwrap_or(1000));
        let defaults = RaftTiming::default();
        let timing = RaftTiming {
            heartbeat_interval: Duration::from_millis(self.heartbeat_ms.unwrap_or(100)),
            election_timeout_min: election_min,
            election_timeout_max: election_min * 2,
            snapshot_after_entries: self
                .snapshot_entries
                .unwrap_or(defaults.snapshot_after_entries),
            log_entries_kept_after_snapshot: self
                .snapshot_keep_entries
                .unwrap_or(defaults.log_entries_kept_after_snapshot),
        };
        let lease_limits = self.lease_limits(&timing)?;
        let lease = self.lease_settings(lease_limits.max_leases)?;
        let listen_client = self.listen_client.unwrap_or(([127, 0, 0, 1], 7001).into());
        let listen_peer = self.listen_peer.unwrap_or(([127, 0, 0, 1], 7101).into());
        let (client_tls, peer_tls) = (self.client_tls()?, self.peer_tls()?);
        let (client_scheme, peer_scheme) =
            (scheme(client_tls.is_some()), scheme(peer_tls.is_some()));
        let grpc_url = self.advertised_grpc_url(client_scheme)?;
        let advertise = MemberNode {
            peer_url: advertised_url(self.advertise_peer, listen_peer, "peer", peer_scheme)?,
            client_url: advertised_url(
                self.advertise_client,
                listen_client,
                "client",
                client_scheme,
            )?,
            grpc_url,
        };
        let join = self.join.unwrap_or(false);
        let initial_cluster = match (&self.initial_cluster, join) {
            (_, true) => BTreeMap::new(),
            (Some(text), false) => parse_initial_cluster(text, id, &advertise, peer_scheme)?,
            (None, false) => BTreeMap::from([(id, advertise.clone())]),
        };
        let default_limits = Limits::default();
        let limits = Limits {
            max_key_bytes: self.max_key_bytes.unwrap_or(default_limits.max_key_bytes),
            max_value_bytes: self
                .max_value_bytes
                .unwrap_or(default_limits.max_value_bytes),
            max_txn_ops: self.max_txn_ops.unwrap_or(default_limits.max_txn_ops),
            ..lease_limits
        };
        let store = StoreOptions {
            limits,
            durable_commit_interval: Duration::from_millis(
                self.durable_commit_interval_ms.unwrap_or(500),
            ),
            cache_bytes: self
                .state_cache_bytes
                .unwrap_or(StoreOptions::default().cache_bytes),
            compaction_inline_entries: compaction_cleaner.batch_entries,
        };
        let request_timeout = Duration::from_millis(self.request_timeout_ms.unwrap_or(5000));
        let member = MemberConfig {
            id,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from("revkv-data")),
            listen_peer,
            advertise,
            initial_cluster,
            join,
            timing,
            peer_limits: PeerLimits {
                call_timeout: request_timeout,
                max_snapshot_bytes: self
                    .max_snapshot_bytes
                    .unwrap_or(PeerLimits::default().max_snapshot_bytes),
                ..PeerLimits::default()
            },
            store,
            log,
            log_tail,
            // `Node` fills in its metrics observer when it starts the member.
            timings: Default::default(),
            peer_source_address: self.peer_source_address,
            peer_tls,
            lease,
            lease_events: Default::default(),
        };
        let http = HttpLimits {
            max_body_bytes: self
                .max_body_bytes
                .unwrap_or(HttpLimits::default().max_body_bytes),
            lease_stream,
            max_snapshot_streams,
            hot_keys,
            auth,
        };
        Ok(NodeConfig {
            member,
            listen_client,
            http,
            request_timeout,
            watch,
            auto_compaction,
            compaction_cleaner,
            recovery_timeout: Duration::from_secs(60),
            metric_prefix_labels,
            client_tls,
            space_quota,
            client_connections,
        })
    }

    /// The client listener's connection limits, from their flags and the defaults.
    fn client_connection_limits(&self) -> Result<revkv_tls::ConnectionLimits, String> {
        let defaults = revkv_tls::ConnectionLimits::default();
        let limits = revkv_tls::ConnectionLimits {
            max_connections: self
                .max_client_connections
                .unwrap_or(defaults.max_connections),
            max_connections_per_client: self
                .max_connections_per_client
                .unwrap_or(defaults.max_connections_per_client),
            header_read_timeout: self
                .header_read_timeout_ms
                .map_or(defaults.header_read_timeout, Duration::from_millis),
            max_header_bytes: self.max_header_bytes.unwrap_or(defaults.max_header_bytes),
        };
        limits.validate()?;
        Ok(limits)
    }

    /// The quota of `--quota-backend-bytes`; 0 (or none) is etcd's default of 2 GiB.
    fn space_quota(&self) -> SpaceQuota {
        let quota_bytes = match self.quota_backend_bytes {
            None | Some(0) => DEFAULT_QUOTA_BACKEND_BYTES,
            Some(bytes) => bytes,
        };
        SpaceQuota {
            quota_bytes,
            ..SpaceQuota::default()
        }
    }
}

/// `https` with TLS, `http` without.
fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

impl ServeArgs {
    /// The client listener's TLS (etcd's `--cert-file`, `--key-file`, `--trusted-ca-file`,
    /// `--client-cert-auth`), its files read and checked now.
    fn client_tls(&self) -> Result<Option<ServerTls>, String> {
        let client_cert_auth = self.client_cert_auth.unwrap_or(false);
        let Some(files) = tls_files(
            "",
            (&self.cert_file, &self.key_file),
            &self.trusted_ca_file,
            client_cert_auth,
        )?
        else {
            return Ok(None);
        };
        if files.trusted_ca_file.is_some() && !client_cert_auth {
            tracing::warn!(
                "--trusted-ca-file without --client-cert-auth: clients are not asked for \
                 certificates (as in etcd)"
            );
        }
        let tls = ServerTls::load(&files).map_err(|error| format!("client TLS: {error}"))?;
        Ok(Some(tls))
    }

    /// Mutual TLS between members (the `--peer-` set of the same flags).
    fn peer_tls(&self) -> Result<Option<PeerTls>, String> {
        let Some(files) = tls_files(
            "peer-",
            (&self.peer_cert_file, &self.peer_key_file),
            &self.peer_trusted_ca_file,
            self.peer_client_cert_auth.unwrap_or(false),
        )?
        else {
            return Ok(None);
        };
        let tls = PeerTls::load(&files).map_err(|error| format!("peer TLS: {error}"))?;
        Ok(Some(tls))
    }
}

/// The files of one listener's TLS, or `None` when it has none; the flags are named with their
/// `prefix` (`""` or `"peer-"`) when they do not fit together.
fn tls_files(
    prefix: &str,
    (cert_file, key_file): (&Option<PathBuf>, &Option<PathBuf>),
    trusted_ca_file: &Option<PathBuf>,
    client_cert_auth: bool,
) -> Result<Option<TlsFiles>, String> {
    match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => Ok(Some(TlsFiles {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
            trusted_ca_file: trusted_ca_file.clone(),
            client_cert_auth,
        })),
        (None, None) if trusted_ca_file.is_none() && !client_cert_auth => Ok(None),
        (None, None) => Err(format!(
            "--{prefix}trusted-ca-file and --{prefix}client-cert-auth need --{prefix}cert-file and \
             --{prefix}key-file"
        )),
        _ => Err(format!(
            "--{prefix}cert-file and --{prefix}key-file go together: give both or neither"
        )),
    }
}

impl ServeArgs {
    /// The `prefix` label settings; a depth of 0 would make every key its own nothing.
    fn metric_prefix_labels(&self) -> Result<PrefixLabelConfig, String> {
        let defaults = PrefixLabelConfig::default();
        let depth = self.metrics_prefix_depth.unwrap_or(defaults.depth);
        if depth == 0 {
            return Err("--metrics-prefix-depth must be at least 1".into());
        }
        Ok(PrefixLabelConfig {
            depth,
            max_prefixes: self.metrics_max_prefixes.unwrap_or(defaults.max_prefixes),
        })
    }
}

/// The longest TTL etcd allows, and revkv's ceiling for `--max-lease-ttl-seconds`.
const LONGEST_LEASE_TTL_SECONDS: i64 = 9_000_000_000;

impl ServeArgs {
    /// The lease limits (the other limits at their defaults), each checked against its floor.
    fn lease_limits(&self, timing: &RaftTiming) -> Result<Limits, String> {
        let defaults = Limits::default();
        let limits = Limits {
            max_leases: self.max_leases.unwrap_or(defaults.max_leases),
            max_keys_per_lease: self
                .max_keys_per_lease
                .unwrap_or(defaults.max_keys_per_lease),
            max_lease_ttl_seconds: self
                .max_lease_ttl_seconds
                .unwrap_or(defaults.max_lease_ttl_seconds),
            ..defaults
        };
        if limits.max_leases == 0 {
            return Err("--max-leases must be at least 1".into());
        }
        if limits.max_keys_per_lease == 0 {
            return Err("--max-keys-per-lease must be at least 1".into());
        }
        let shortest = timing.min_lease_ttl_seconds();
        if !(shortest..=LONGEST_LEASE_TTL_SECONDS).contains(&limits.max_lease_ttl_seconds) {
            return Err(format!(
                "--max-lease-ttl-seconds must be between {shortest} (the minimum TTL, 1.5 x the \
                 longest election timeout) and {LONGEST_LEASE_TTL_SECONDS}, not {}",
                limits.max_lease_ttl_seconds
            ));
        }
        Ok(limits)
    }

    /// How many backups may stream from this member at once.
    fn max_snapshot_streams(&self) -> Result<usize, String> {
        let streams = self
            .max_snapshot_streams
            .unwrap_or(DEFAULT_MAX_SNAPSHOT_STREAMS);
        if !(1..=64).contains(&streams) {
            return Err("--max-snapshot-streams must be between 1 and 64".into());
        }
        Ok(streams)
    }

    /// How compaction cleans its window: the step size and the pause between steps.
    fn compaction_cleaner(&self) -> Result<CleanerSettings, String> {
        let defaults = CleanerSettings::default();
        let batch_entries = self
            .compaction_batch_limit
            .unwrap_or(defaults.batch_entries);
        if !(1..=1_000_000).contains(&batch_entries) {
            return Err("--compaction-batch-limit must be between 1 and 1000000".into());
        }
        let pause_between_steps = self
            .compaction_sleep_interval_ms
            .map_or(defaults.pause_between_steps, Duration::from_millis);
        if pause_between_steps > Duration::from_secs(10) {
            return Err("--compaction-sleep-interval-ms must be at most 10000".into());
        }
        Ok(CleanerSettings {
            batch_entries,
            pause_between_steps,
            ..defaults
        })
    }

    /// Token lifetime and concurrent password checks.
    fn auth_options(&self) -> Result<AuthOptions, String> {
        let defaults = AuthOptions::default();
        let token_ttl = self
            .auth_token_ttl_seconds
            .map_or(defaults.token_ttl, Duration::from_secs);
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&token_ttl) {
            return Err("--auth-token-ttl-seconds must be between 1 and 86400".into());
        }
        let checks = self
            .max_concurrent_password_checks
            .unwrap_or(defaults.max_concurrent_password_checks);
        if !(1..=64).contains(&checks) {
            return Err("--max-concurrent-password-checks must be between 1 and 64".into());
        }
        Ok(AuthOptions {
            token_ttl,
            max_concurrent_password_checks: checks,
        })
    }

    /// The hot-key top-k's size and window.
    fn hot_key_limits(&self) -> Result<HotKeyLimits, String> {
        let defaults = HotKeyLimits::default();
        let capacity = self.hot_keys_capacity.unwrap_or(defaults.capacity);
        if !(1..=100_000).contains(&capacity) {
            return Err("--hot-keys-capacity must be between 1 and 100000".into());
        }
        let window = self
            .hot_keys_window_seconds
            .map_or(defaults.window, Duration::from_secs);
        if !(Duration::from_secs(5)..=Duration::from_secs(86_400)).contains(&window) {
            return Err("--hot-keys-window-seconds must be between 5 and 86400".into());
        }
        Ok(HotKeyLimits {
            capacity,
            window,
            ..defaults
        })
    }

    /// Bounds on streaming keep-alives.
    fn lease_stream_limits(&self) -> Result<LeaseStreamLimits, String> {
        let defaults = LeaseStreamLimits::default();
        let max_streams = self
            .max_lease_keepalive_streams
            .unwrap_or(defaults.max_streams);
        if !(1..=1_000_000).contains(&max_streams) {
            return Err("--max-lease-keepalive-streams must be between 1 and 1000000".into());
        }
        let idle_timeout = self
            .lease_keepalive_idle_timeout_ms
            .map_or(defaults.idle_timeout, Duration::from_millis);
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&idle_timeout) {
            return Err(
                "--lease-keepalive-idle-timeout-ms must be between 1000 and 3600000 (ms)".into(),
            );
        }
        Ok(LeaseStreamLimits {
            max_streams,
            idle_timeout,
            ..defaults
        })
    }

    /// How the leader expires and checkpoints leases.
    fn lease_settings(&self, max_leases: u64) -> Result<LeaseSettings, String> {
        let defaults = LeaseSettings::default();
        let expiry_check_interval = self
            .lease_expiry_check_interval_ms
            .map_or(defaults.expiry_check_interval, Duration::from_millis);
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&expiry_check_interval) {
            return Err(
                "--lease-expiry-check-interval-ms must be between 10 and 60000 (ms)".into(),
            );
        }
        let checkpoint_interval = match self.lease_checkpoint_interval_ms {
            None => defaults.checkpoint_interval,
            Some(0) => None,
            Some(millis) if millis < 100 => {
                return Err(
                    "--lease-checkpoint-interval-ms must be at least 100 (ms), or 0 to turn \
                     checkpoints off"
                        .into(),
                )
            }
            Some(millis) => Some(Duration::from_millis(millis)),
        };
        let max_leases_per_checkpoint = self
            .max_leases_per_checkpoint
            .unwrap_or(defaults.max_leases_per_checkpoint);
        if max_leases_per_checkpoint == 0 || max_leases_per_checkpoint as u64 > max_leases {
            return Err(format!(
                "--max-leases-per-checkpoint must be between 1 and --max-leases ({max_leases})"
            ));
        }
        Ok(LeaseSettings {
            expiry_check_interval,
            checkpoint_interval,
            max_leases_per_checkpoint,
            ..defaults
        })
    }
}

impl ServeArgs {
    /// The raft log's segment size and in-memory tail, each checked against a floor.
    fn log_options(&self) -> Result<(LogOptions, TailLimits), String> {
        let log = LogOptions {
            segment_bytes: self
                .log_segment_bytes
                .unwrap_or(LogOptions::default().segment_bytes),
        };
        if log.segment_bytes < 64 * 1024 {
            return Err("--log-segment-bytes must be at least 65536".into());
        }
        let default_tail = TailLimits::default();
        let tail = TailLimits {
            max_entries: self.log_tail_entries.unwrap_or(default_tail.max_entries),
            max_bytes: self.log_tail_bytes.unwrap_or(default_tail.max_bytes),
        };
        Ok((log, tail))
    }

    fn watch_limits(&self) -> Result<WatchLimits, String> {
        let defaults = WatchLimits::default();
        let limits = WatchLimits {
            default_progress_interval: match self.watch_progress_notify_interval_ms {
                None => defaults.default_progress_interval,
                Some(0) => None,
                Some(millis) => Some(Duration::from_millis(millis)),
            },
            max_watchers: self.max_watches.unwrap_or(defaults.max_watchers),
            stream_buffer_messages: self
                .watch_buffer_messages
                .unwrap_or(defaults.stream_buffer_messages),
            ..defaults
        };
        limits.check()?;
        Ok(limits)
    }

    fn auto_compaction(&self) -> Result<AutoCompaction, String> {
        let retention = self
            .auto_compaction_retention
            .as_deref()
            .unwrap_or("0")
            .trim();
        if retention == "0" {
            return Ok(AutoCompaction::Off);
        }
        match self.auto_compaction_mode.unwrap_or_default() {
            AutoCompactionMode::Revision => {
                let keep: u64 = retention.parse().map_err(|_| {
                    format!("auto-compaction-retention {retention:?} is not a revision count")
                })?;
                let check_interval =
                    Duration::from_millis(self.auto_compaction_interval_ms.unwrap_or(300_000));
                if check_interval.is_zero() {
                    return Err("auto-compaction-interval-ms must be at least 1".into());
                }
                Ok(AutoCompaction::Revisions {
                    keep,
                    check_interval,
                })
            }
            AutoCompactionMode::Periodic => {
                // etcd reads a bare number as hours.
                let retention = match retention.parse::<u64>() {
                    Ok(hours) => Duration::from_secs(hours * 3600),
                    Err(_) => humantime::parse_duration(retention).map_err(|error| {
                        format!("auto-compaction-retention {retention:?}: {error}")
                    })?,
                };
                if retention < Duration::from_millis(10) {
                    return Err("a periodic auto-compaction retention must be at least 10ms".into());
                }
                Ok(AutoCompaction::Periodic { retention })
            }
        }
    }
}

/// The advertised URL, or `<scheme>://<listen address>` when the listen address is a specific
/// one. A given URL must use the listener's scheme (`https` exactly when it has TLS).
impl ServeArgs {
    /// The gRPC listener's advertised URL (its scheme is the client listener's, whose TLS it
    /// uses); none without a gRPC listener.
    fn advertised_grpc_url(&self, client_scheme: &str) -> Result<Option<String>, String> {
        match (self.listen_grpc, &self.advertise_grpc) {
            (Some(listen), given) => {
                advertised_url(given.clone(), listen, "grpc", client_scheme).map(Some)
            }
            (None, Some(_)) => Err("--advertise-grpc needs --listen-grpc".to_string()),
            (None, None) => Ok(None),
        }
    }
}

fn advertised_url(
    given: Option<String>,
    listen: SocketAddr,
    which: &str,
    scheme: &str,
) -> Result<String, String> {
    match given {
        Some(url) => {
            check_scheme(&url, scheme, &format!("--advertise-{which}"))?;
            // A member's client URLs are stored space-separated (`MemberNode`).
            if url.contains(char::is_whitespace) {
                return Err(format!("--advertise-{which}: {url:?} holds a space"));
            }
            Ok(url.trim_end_matches('/').to_string())
        }
        None if listen.ip().is_unspecified() => Err(format!(
            "listening for {which} connections on {listen} (all interfaces): give \
             --advertise-{which} too"
        )),
        None => Ok(format!("{scheme}://{listen}")),
    }
}

/// A URL of a listener with (`https`) or without (`http`) TLS must say so: otherwise every call
/// to it fails at the handshake, or would go out in the clear.
fn check_scheme(url: &str, scheme: &str, what: &str) -> Result<(), String> {
    if url.starts_with(&format!("{scheme}://")) {
        return Ok(());
    }
    let why = if scheme == "https" {
        "the listener has TLS"
    } else {
        "the listener has no TLS (give the certificate flags for https)"
    };
    Err(format!(
        "{what}: {url} must start with {scheme}:// because {why}"
    ))
}

/// Parses `1=http://host:port,2=...`. The entry for this member must match its advertised peer URL.
fn parse_initial_cluster(
    text: &str,
    own_id: u64,
    own: &MemberNode,
    peer_scheme: &str,
) -> Result<BTreeMap<u64, MemberNode>, String> {
    let members = parse_member_list(text)?;
    for (id, node) in &members {
        check_scheme(&node.peer_url, peer_scheme, "--initial-cluster")?;
        if *id == own_id && node.peer_url != own.peer_url {
            return Err(format!(
                "initial cluster says member {id} is at {}, but it advertises {}",
                node.peer_url, own.peer_url
            ));
        }
    }
    if !members.contains_key(&own_id) {
        return Err(format!(
            "initial cluster does not include this member ({own_id})"
        ));
    }
    Ok(members)
}

/// Parses an initial cluster, `1=http://host:port,2=...`, into members with peer URLs only:
/// every founding member must bootstrap with the same membership, and only peer URLs are known to
/// all of them (each member publishes its client URL after the bootstrap). Shared by `revkv serve`
/// and `revkv snapshot restore`, so a restored cluster names its members exactly as serve does.
pub(crate) fn parse_member_list(text: &str) -> Result<BTreeMap<u64, MemberNode>, String> {
    let mut members = BTreeMap::new();
    for entry in text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let (id, peer_url) = entry
            .split_once('=')
            .ok_or_else(|| format!("initial cluster entry {entry:?} is not id=url"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("initial cluster entry {entry:?}: {id:?} is not a member id"))?;
        let peer_url = peer_url.trim().trim_end_matches('/').to_string();
        if !peer_url.starts_with("http://") && !peer_url.starts_with("https://") {
            return Err(format!(
                "initial cluster entry {entry:?}: {peer_url} is not an http:// or https:// URL"
            ));
        }
        let node = MemberNode {
            peer_url,
            client_url: String::new(),
            grpc_url: None,
        };
        if members.insert(id, node).is_some() {
            return Err(format!("initial cluster names member {id} twice"));
        }
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flags_give_a_single_member_cluster_on_the_default_ports() {
        let config = ServeArgs::default().into_node_config().unwrap();
        assert_eq!(config.listen_client, "127.0.0.1:7001".parse().unwrap());
        assert_eq!(config.member.listen_peer, "127.0.0.1:7101".parse().unwrap());
        assert_eq!(config.member.data_dir, PathBuf::from("revkv-data"));
        assert_eq!(config.member.initial_cluster.len(), 1);
        assert_eq!(
            config.member.initial_cluster[&1].peer_url,
            "http://127.0.0.1:7101"
        );
    }

    #[test]
    fn no_flags_give_what_an_embedder_gets_from_node_config_single_member() {
        let listen_client: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let listen_peer: SocketAddr = "127.0.0.1:7101".parse().unwrap();
        let from_flags = ServeArgs::default().into_node_config().unwrap();
        let embedded =
            NodeConfig::single_member(PathBuf::from("revkv-data"), listen_client, listen_peer);
        assert_eq!(format!("{from_flags:?}"), format!("{embedded:?}"));
    }

    #[test]
    fn the_initial_cluster_is_parsed_and_checked() {
        let args = ServeArgs {
            id: Some(2),
            listen_peer: Some("127.0.0.1:7102".parse().unwrap()),
            initial_cluster: Some(
                "1=http://127.0.0.1:7101, 2=http://127.0.0.1:7102,3=http://127.0.0.1:7103".into(),
            ),
            ..ServeArgs::default()
        };
        let config = args.clone().into_node_config().unwrap();
        assert_eq!(config.member.initial_cluster.len(), 3);
        let wrong_url = ServeArgs {
            initial_cluster: Some("2=http://127.0.0.1:9999".into()),
            ..args.clone()
        };
        assert!(wrong_url.into_node_config().is_err());
        let missing_self = ServeArgs {
            initial_cluster: Some("1=http://127.0.0.1:7101".into()),
            ..args.clone()
        };
        assert!(missing_self.into_node_config().is_err());
        let garbage = ServeArgs {
            initial_cluster: Some("one=two".into()),
            ..args
        };
        assert!(garbage.into_node_config().is_err());
    }

    #[test]
    fn auto_compaction_settings_follow_etcd() {
        let with = |mode, retention: &str| ServeArgs {
            auto_compaction_mode: mode,
            auto_compaction_retention: Some(retention.into()),
            ..ServeArgs::default()
        };
        let off = with(None, "0").into_node_config().unwrap();
        assert_eq!(off.auto_compaction, AutoCompaction::Off);
        let hours = with(None, "2").into_node_config().unwrap();
        assert_eq!(
            hours.auto_compaction,
            AutoCompaction::Periodic {
                retention: Duration::from_secs(7200)
            }
        );
        let minutes = with(Some(AutoCompactionMode::Periodic), "30m");
        assert_eq!(
            minutes.into_node_config().unwrap().auto_compaction,
            AutoCompaction::Periodic {
                retention: Duration::from_secs(1800)
            }
        );
        let revisions = with(Some(AutoCompactionMode::Revision), "1000");
        assert_eq!(
            revisions.into_node_config().unwrap().auto_compaction,
            AutoCompaction::Revisions {
                keep: 1000,
                check_interval: Duration::from_secs(300)
            }
        );
        assert!(with(Some(AutoCompactionMode::Revision), "1h")
            .into_node_config()
            .is_err());
        assert!(with(None, "soon").into_node_config().is_err());
    }

    #[test]
    fn watch_settings_are_checked() {
        let off = ServeArgs {
            watch_progress_notify_interval_ms: Some(0),
            ..ServeArgs::default()
        };
        assert_eq!(
            off.into_node_config()
                .unwrap()
                .watch
                .default_progress_interval,
            None
        );
        let tiny_buffer = ServeArgs {
            watch_buffer_messages: Some(2),
            ..ServeArgs::default()
        };
        assert!(tiny_buffer.into_node_config().is_err());
    }

    #[test]
    fn hot_key_limits_are_taken_and_checked() {
        let args = ServeArgs {
            hot_keys_capacity: Some(32),
            hot_keys_window_seconds: Some(60),
            ..ServeArgs::default()
        };
        let limits = args.into_node_config().unwrap().http.hot_keys;
        assert_eq!(
            (limits.capacity, limits.window),
            (32, Duration::from_secs(60))
        );
        for bad in [
            ServeArgs {
                hot_keys_capacity: Some(0),
                ..ServeArgs::default()
            },
            ServeArgs {
                hot_keys_window_seconds: Some(1),
                ..ServeArgs::default()
            },
        ] {
            let error = bad.into_node_config().unwrap_err();
            assert!(error.contains("hot-keys"), "{error}");
        }
    }

    #[test]
    fn keepalive_stream_limits_are_taken_and_checked() {
        let args = ServeArgs {
            max_lease_keepalive_streams: Some(12),
            lease_keepalive_idle_timeout_ms: Some(5000),
            ..ServeArgs::default()
        };
        let limits = args.into_node_config().unwrap().http.lease_stream;
        assert_eq!(
            (limits.max_streams, limits.idle_timeout),
            (12, Duration::from_secs(5))
        );
        let snapshots = ServeArgs {
            max_snapshot_streams: Some(3),
            ..ServeArgs::default()
        };
        assert_eq!(
            snapshots
                .into_node_config()
                .unwrap()
                .http
                .max_snapshot_streams,
            3
        );
        let no_snapshots = ServeArgs {
            max_snapshot_streams: Some(0),
            ..ServeArgs::default()
        };
        let error = no_snapshots.into_node_config().unwrap_err();
        assert!(error.contains("--max-snapshot-streams"), "{error}");
        for bad in [
            ServeArgs {
                max_lease_keepalive_streams: Some(0),
                ..ServeArgs::default()
            },
            ServeArgs {
                lease_keepalive_idle_timeout_ms: Some(10),
                ..ServeArgs::default()
            },
        ] {
            let error = bad.into_node_config().unwrap_err();
            assert!(error.contains("keepalive"), "{error}");
        }
    }

    #[test]
    fn lease_settings_are_taken_and_checked_with_clear_errors() {
        let args = ServeArgs {
            max_leases: Some(50),
            max_keys_per_lease: Some(7),
            max_lease_ttl_seconds: Some(3600),
            lease_expiry_check_interval_ms: Some(100),
            lease_checkpoint_interval_ms: Some(2000),
            max_leases_per_checkpoint: Some(20),
            ..ServeArgs::default()
        };
        let config = args.clone().into_node_config().unwrap();
        let limits = &config.member.store.limits;
        assert_eq!(
            (
                limits.max_leases,
                limits.max_keys_per_lease,
                limits.max_lease_ttl_seconds
            ),
            (50, 7, 3600)
        );
        assert_eq!(limits.max_key_bytes, Limits::default().max_key_bytes);
        let lease = &config.member.lease;
        assert_eq!(lease.expiry_check_interval, Duration::from_millis(100));
        assert_eq!(lease.checkpoint_interval, Some(Duration::from_secs(2)));
        assert_eq!(lease.max_leases_per_checkpoint, 20);
        let off = ServeArgs {
            lease_checkpoint_interval_ms: Some(0),
            ..args.clone()
        };
        assert_eq!(
            off.into_node_config()
                .unwrap()
                .member
                .lease
                .checkpoint_interval,
            None
        );

        let no_leases = ServeArgs {
            max_leases: Some(0),
            ..args.clone()
        };
        fails_with(no_leases, "--max-leases must be at least 1");
        let no_keys = ServeArgs {
            max_keys_per_lease: Some(0),
            ..args.clone()
        };
        fails_with(no_keys, "--max-keys-per-lease");
        // The default election timeout (1-2 s) makes the minimum TTL 3 s.
        let below_minimum = ServeArgs {
            max_lease_ttl_seconds: Some(2),
            ..args.clone()
        };
        fails_with(below_minimum, "between 3 (the minimum TTL");
        let beyond_etcd = ServeArgs {
            max_lease_ttl_seconds: Some(LONGEST_LEASE_TTL_SECONDS + 1),
            ..args.clone()
        };
        fails_with(beyond_etcd, "--max-lease-ttl-seconds");
        let busy_check = ServeArgs {
            lease_expiry_check_interval_ms: Some(1),
            ..args.clone()
        };
        fails_with(busy_check, "--lease-expiry-check-interval-ms");
        let busy_checkpoints = ServeArgs {
            lease_checkpoint_interval_ms: Some(10),
            ..args.clone()
        };
        fails_with(busy_checkpoints, "or 0 to turn checkpoints off");
        let huge_batch = ServeArgs {
            max_leases_per_checkpoint: Some(51),
            ..args
        };
        fails_with(huge_batch, "between 1 and --max-leases (50)");
    }

    #[test]
    fn flags_override_the_toml_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("revkv.toml");
        std::fs::write(
            &path,
            "id = 7\ndata-dir = \"/from/file\"\nheartbeat-ms = 20\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            id: Some(3),
            ..ServeArgs::default()
        };
        let merged = args.with_config_file().unwrap();
        assert_eq!(merged.id, Some(3));
        assert_eq!(merged.data_dir, Some(PathBuf::from("/from/file")));
        assert_eq!(merged.heartbeat_ms, Some(20));
        std::fs::write(&path, "no-such-setting = 1\n").unwrap();
        let unknown = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        assert!(unknown.with_config_file().is_err());
    }

    /// Asserts that `args` are refused with an error that says `expected`.
    fn fails_with(args: ServeArgs, expected: &str) {
        let error = args.into_node_config().unwrap_err();
        assert!(
            error.contains(expected),
            "{error:?} should say {expected:?}"
        );
    }

    #[test]
    fn the_grpc_url_is_advertised_from_its_listener_or_the_flag() {
        let none = ServeArgs::default().into_node_config().unwrap();
        assert_eq!(none.member.advertise.grpc_url, None);
        let listening = ServeArgs {
            listen_grpc: Some(([127, 0, 0, 1], 7201).into()),
            ..ServeArgs::default()
        };
        let config = listening.clone().into_node_config().unwrap();
        assert_eq!(
            config.member.advertise.grpc_url.as_deref(),
            Some("http://127.0.0.1:7201")
        );
        let given = ServeArgs {
            advertise_grpc: Some("http://etcd.example:2379/".into()),
            ..listening.clone()
        };
        let config = given.into_node_config().unwrap();
        assert_eq!(
            config.member.advertise.grpc_url.as_deref(),
            Some("http://etcd.example:2379")
        );
        let without_listener = ServeArgs {
            advertise_grpc: Some("http://127.0.0.1:7201".into()),
            ..ServeArgs::default()
        };
        fails_with(without_listener, "--advertise-grpc needs --listen-grpc");
        let with_space = ServeArgs {
            advertise_grpc: Some("http://a b:7201".into()),
            ..listening.clone()
        };
        fails_with(with_space, "holds a space");
        let all_interfaces = ServeArgs {
            listen_grpc: Some(([0, 0, 0, 0], 7201).into()),
            ..ServeArgs::default()
        };
        fails_with(all_interfaces, "give --advertise-grpc too");
    }

    #[test]
    fn tls_flags_switch_urls_to_https_and_must_fit_together() {
        let directory = tempfile::tempdir().unwrap();
        let ca = revkv_tls::testing::TestCa::new("test CA");
        let ca_file = ca.write_certificate(&directory.path().join("ca.pem"));
        let member = ca.issue(directory.path(), "member");
        let tls = ServeArgs {
            cert_file: Some(member.cert_file.clone()),
            key_file: Some(member.key_file.clone()),
            peer_cert_file: Some(member.cert_file.clone()),
            peer_key_file: Some(member.key_file.clone()),
            peer_trusted_ca_file: Some(ca_file.clone()),
            peer_client_cert_auth: Some(true),
            ..ServeArgs::default()
        };
        let config = tls.clone().into_node_config().unwrap();
        assert!(config.client_tls.is_some() && config.member.peer_tls.is_some());
        assert_eq!(config.member.advertise.client_url, "https://127.0.0.1:7001");
        assert_eq!(
            config.member.initial_cluster[&1].peer_url,
            "https://127.0.0.1:7101"
        );

        let plain_peer_url = ServeArgs {
            initial_cluster: Some("1=http://127.0.0.1:7101".into()),
            ..tls.clone()
        };
        fails_with(plain_peer_url, "must start with https://");
        let key_missing = ServeArgs {
            key_file: None,
            ..tls.clone()
        };
        fails_with(key_missing, "--cert-file and --key-file go together");
        let one_way_peers = ServeArgs {
            peer_client_cert_auth: None,
            ..tls.clone()
        };
        fails_with(one_way_peers, "--peer-client-cert-auth");
        let auth_without_ca = ServeArgs {
            client_cert_auth: Some(true),
            ..tls.clone()
        };
        fails_with(auth_without_ca, "needs a trusted CA");
        let missing_file = ServeArgs {
            cert_file: Some(directory.path().join("nowhere.pem")),
            ..tls.clone()
        };
        fails_with(missing_file, "nowhere.pem");
        let ca_without_certificate = ServeArgs {
            trusted_ca_file: Some(ca_file),
            ..ServeArgs::default()
        };
        fails_with(ca_without_certificate, "need --cert-file and --key-file");
    }

    #[test]
    fn tls_settings_come_from_the_toml_file_too() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("revkv.toml");
        let text =
            "cert-file = \"/etc/revkv/member.pem\"\nkey-file = \"/etc/revkv/member-key.pem\"\n\
                    trusted-ca-file = \"/etc/revkv/ca.pem\"\nclient-cert-auth = true\n\
                    peer-client-cert-auth = true\n";
        std::fs::write(&path, text).unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        let merged = args.with_config_file().unwrap();
        assert_eq!(
            merged.cert_file,
            Some(PathBuf::from("/etc/revkv/member.pem"))
        );
        assert_eq!(
            merged.trusted_ca_file,
            Some(PathBuf::from("/etc/revkv/ca.pem"))
        );
        assert_eq!(merged.client_cert_auth, Some(true));
        assert_eq!(merged.peer_client_cert_auth, Some(true));
    }
}
