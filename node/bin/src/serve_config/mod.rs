//! `revkv serve` configuration: command-line flags, `REVKV_*` environment variables and an optional
//! TOML file (in that order of precedence), turned into a `NodeConfig`.
//!
//! With no flags at all, `revkv serve` runs a single-member cluster in `./revkv-data` with the
//! client API on 127.0.0.1:7001 and the peer listener on 127.0.0.1:7101.
//!
//! This file holds the flags themselves and the TOML overlay. `assembly` puts them together into a
//! `NodeConfig`, `subsystems` turns each group of flags into one subsystem's checked settings,
//! `tls` loads the listeners' certificates, and `addresses` works out the URLs members are reached
//! at and the initial cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Deserialize;

mod addresses;
mod assembly;
mod grpc;
mod subsystems;
#[cfg(test)]
mod tests;
mod tls;

pub(crate) use addresses::parse_member_list;

/// How new passwords are hashed (`--password-hash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PasswordHashArg {
    #[default]
    Argon2id,
    Bcrypt,
}

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
    /// Origins a browser page may call the gRPC port's plain-HTTP paths from (the JSON gateway,
    /// `/version`, `/health`, `/metrics`), as etcd's `--cors`: `*` (the default) or an empty
    /// value allows every origin, a comma-separated list (`https://console.example:8443`) only
    /// those, `none` sends no CORS header.
    #[arg(long, env = "REVKV_GRPC_CORS")]
    pub grpc_cors: Option<String>,
    /// Streams open at once through the gRPC port's JSON gateway (`/v3/watch`,
    /// `/v3/lease/keepalive`, `/v3/maintenance/snapshot`; default 1000); one more is answered
    /// 429.
    #[arg(long, env = "REVKV_MAX_GATEWAY_STREAMS")]
    pub max_gateway_streams: Option<usize>,
    /// The etcd version the gRPC port reports (`Status`, `/version`), as kine's flag of the same
    /// name: `3.MINOR.PATCH` (default 3.5.13, etcd 3.5's API with working watch-progress
    /// requests). Clients such as kube-apiserver switch features on by it.
    #[arg(long, env = "REVKV_EMULATED_ETCD_VERSION")]
    pub emulated_etcd_version: Option<String>,
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
    /// Ask the other members whether they would vote before starting an election (Raft's
    /// Pre-Vote; default true, as etcd's `--pre-vote`). Turning it off brings back slow
    /// elections when a leader can answer but no longer send.
    #[arg(long, env = "REVKV_PRE_VOTE", num_args = 0..=1, default_missing_value = "true")]
    pub pre_vote: Option<bool>,
    /// The longest an append to one peer is waited for, in milliseconds (default 10000). Each
    /// peer's wait follows four times its slowest recent round trip (its fsync), from the election
    /// timeout up to this, so a follower on a slow disk is not sent every append twice.
    #[arg(long, env = "REVKV_MAX_APPEND_TIMEOUT_MS")]
    pub max_append_timeout_ms: Option<u64>,
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
    /// Page cache of the state file (redb), in bytes (default 64 MiB). Reads of pages outside it go
    /// to the kernel's page cache, which holds the file too; raise it for read-heavy stores.
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
    /// Most ops and compares in all the nested txns of one txn together (default 1024).
    #[arg(long, env = "REVKV_MAX_NESTED_TXN_OPS")]
    pub max_nested_txn_ops: Option<usize>,
    /// Most leases granted at once; a grant beyond it is refused (default 100000). The leader
    /// keeps every lease's deadline in memory.
    #[arg(long, env = "REVKV_MAX_LEASES")]
    pub max_leases: Option<u64>,
    /// Most keys attached to one lease (default 10000); a revoke deletes them in one revision.
    #[arg(long, env = "REVKV_MAX_KEYS_PER_LEASE")]
    pub max_keys_per_lease: Option<u64>,
    /// Most keys one delete may remove (a delete range, or all of one txn branch's), default
    /// 1000000; a larger delete is refused whole with `invalid`, and is done in smaller ranges.
    #[arg(long, env = "REVKV_MAX_DELETE_KEYS")]
    pub max_delete_keys: Option<u64>,
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
    /// HTTP/2 streams one client connection may have open at once, on the client listener and
    /// the gRPC port (default 4294967295, etcd's `--max-concurrent-streams`).
    #[arg(long, env = "REVKV_MAX_CONCURRENT_STREAMS")]
    pub max_concurrent_streams: Option<u32>,
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
    /// How this member hashes new passwords: `argon2id` (default) or `bcrypt`, as etcd does (cost
    /// 10). Choose bcrypt on every member when the store may go back to etcd: an etcd-format
    /// snapshot keeps bcrypt hashes, and refuses users whose hashes etcd cannot check. Members
    /// check both kinds whatever this says.
    #[arg(long, env = "REVKV_PASSWORD_HASH", value_enum)]
    pub password_hash: Option<PasswordHashArg>,
    /// Most leases in one checkpoint entry (default 1000, etcd's); at most one checkpoint is
    /// proposed per expiry check.
    #[arg(long, env = "REVKV_MAX_LEASES_PER_CHECKPOINT")]
    pub max_leases_per_checkpoint: Option<usize>,
    /// Async worker threads of this member's process (default: one per core, tokio's default,
    /// which `TOKIO_WORKER_THREADS` also sets). Three members sharing two cores may run one each:
    /// less CPU per write, a ceiling of one core per member (docs/guide/operations.md).
    #[arg(long, env = "REVKV_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
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
    /// Compare this member's data with the other members' once it has caught up after its start
    /// (etcd's `--experimental-initial-corrupt-check`; default false). A member whose hash of the
    /// history differs from the majority's at the same revision gets the CORRUPT alarm, and every
    /// member then refuses writes (500 `corrupt`) until the alarm is disarmed.
    #[arg(long, env = "REVKV_INITIAL_CORRUPT_CHECK", num_args = 0..=1, default_missing_value = "true")]
    pub initial_corrupt_check: Option<bool>,
    /// How often the leader compares the members' data, as a span such as `5m` or `1h` (etcd's
    /// `--experimental-corrupt-check-time`); 0, the default, turns the periodic check off. At
    /// least 1s: each check hashes every member's whole history.
    #[arg(long, env = "REVKV_CORRUPT_CHECK_TIME")]
    pub corrupt_check_time: Option<String>,
    /// Periodic bookmark interval of a watch that names none, in milliseconds; 0 turns them off
    /// (default 600000, etcd's ten minutes).
    #[arg(long, env = "REVKV_WATCH_PROGRESS_NOTIFY_INTERVAL_MS")]
    pub watch_progress_notify_interval_ms: Option<u64>,
    /// Most watches open on this member (default 65536).
    #[arg(long, env = "REVKV_MAX_WATCHES")]
    pub max_watches: Option<usize>,
    /// Most watches one gRPC `Watch` stream may hold (default: `--max-watches`, so, as on etcd,
    /// no stream has a limit of its own below the member's).
    #[arg(long, env = "REVKV_MAX_WATCHES_PER_STREAM")]
    pub max_watches_per_stream: Option<usize>,
    /// Messages a watch stream may hold for a slow reader before it is canceled (default 128).
    #[arg(long, env = "REVKV_WATCH_BUFFER_MESSAGES")]
    pub watch_buffer_messages: Option<usize>,
    /// Bytes of key-values a watch may hold for a slow reader before it is canceled, and of
    /// encoded responses a gRPC Watch stream queues for its client (default 16 MiB; a single
    /// larger revision still reaches a reader that keeps up).
    #[arg(long, env = "REVKV_WATCH_BUFFER_BYTES")]
    pub watch_buffer_bytes: Option<usize>,
    /// A learner added with `--auto-promote` and no bound of its own is promoted by this member,
    /// when it leads, once its log is at most this many entries behind (default 1000).
    #[arg(long, env = "REVKV_AUTO_PROMOTE_MAX_LAG")]
    pub auto_promote_max_lag: Option<u64>,
    /// An `--auto-promote` intent whose learner has not joined the membership this many seconds
    /// after the leader first saw it (its add never happened) is forgotten (default 60).
    #[arg(long, env = "REVKV_AUTO_PROMOTE_INTENT_GRACE_SECONDS")]
    pub auto_promote_intent_grace_seconds: Option<u64>,
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
            advertise_grpc, grpc_cors, max_gateway_streams, emulated_etcd_version, advertise_peer, peer_source_address, initial_cluster, join, heartbeat_ms,
            election_timeout_ms, pre_vote, max_append_timeout_ms, snapshot_entries, snapshot_keep_entries, durable_commit_interval_ms,
            state_cache_bytes, log_segment_bytes, log_tail_entries, log_tail_bytes,
            request_timeout_ms, max_body_bytes, max_key_bytes, max_value_bytes, max_txn_ops, max_nested_txn_ops,
            max_leases, max_keys_per_lease, max_delete_keys, max_lease_ttl_seconds, lease_expiry_check_interval_ms,
            lease_checkpoint_interval_ms, max_leases_per_checkpoint, max_lease_keepalive_streams,
            lease_keepalive_idle_timeout_ms, max_client_connections, max_connections_per_client,
            header_read_timeout_ms, max_header_bytes, max_concurrent_streams, max_snapshot_streams, hot_keys_capacity, hot_keys_window_seconds, max_snapshot_bytes, compaction_batch_limit,
            compaction_sleep_interval_ms, auth_token_ttl_seconds,
            max_concurrent_password_checks, password_hash, worker_threads, log_format, auto_compaction_mode, auto_compaction_retention,
            quota_backend_bytes, initial_corrupt_check, corrupt_check_time,
            auto_compaction_interval_ms, watch_progress_notify_interval_ms, max_watches,
            max_watches_per_stream, watch_buffer_messages, watch_buffer_bytes, auto_promote_max_lag, auto_promote_intent_grace_seconds, metrics_prefix_depth, metrics_max_prefixes, cert_file, key_file,
            trusted_ca_file, client_cert_auth, peer_cert_file, peer_key_file, peer_trusted_ca_file,
            peer_client_cert_auth),
        )
    }
}
