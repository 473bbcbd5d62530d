//! The flags that configure one subsystem each (leases, watches, compaction, auth, the hot-key
//! top-k, the raft log, metrics labels, client connections, the space quota), turned into that
//! subsystem's settings. Each method fills the defaults and refuses a value out of range with an
//! error that names the flag, so a bad setting stops `revkv serve` before it starts anything.

use std::time::Duration;

use revkv_metrics::PrefixLabelConfig;
use revkv_raft::{LeaseSettings, RaftTiming, TailLimits};
use revkv_storage::{Limits, LogOptions};

use revkv_node::auth::password::PasswordHashScheme;
use revkv_node::auth::AuthOptions;
use revkv_node::compaction::AutoCompaction;
use revkv_node::compaction_cleaner::CleanerSettings;
use revkv_node::corruption_check::CorruptionCheckSettings;
use revkv_node::hot_keys::HotKeyLimits;
use revkv_node::http::{LeaseStreamLimits, DEFAULT_MAX_SNAPSHOT_STREAMS};
use revkv_node::space_quota::{SpaceQuota, DEFAULT_QUOTA_BACKEND_BYTES};
use revkv_node::watch::WatchLimits;

use super::{AutoCompactionMode, ServeArgs};

impl ServeArgs {
    /// The `prefix` label settings; a depth of 0 would make every key its own nothing.
    pub(super) fn metric_prefix_labels(&self) -> Result<PrefixLabelConfig, String> {
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
pub(super) const LONGEST_LEASE_TTL_SECONDS: i64 = 9_000_000_000;

impl ServeArgs {
    /// The lease limits and the delete limit (the other limits at their defaults), each checked
    /// against its floor.
    pub(super) fn lease_limits(&self, timing: &RaftTiming) -> Result<Limits, String> {
        let defaults = Limits::default();
        let limits = Limits {
            max_leases: self.max_leases.unwrap_or(defaults.max_leases),
            max_keys_per_lease: self
                .max_keys_per_lease
                .unwrap_or(defaults.max_keys_per_lease),
            max_lease_ttl_seconds: self
                .max_lease_ttl_seconds
                .unwrap_or(defaults.max_lease_ttl_seconds),
            max_delete_keys: self.max_delete_keys.unwrap_or(defaults.max_delete_keys),
            ..defaults
        };
        if limits.max_leases == 0 {
            return Err("--max-leases must be at least 1".into());
        }
        if limits.max_keys_per_lease == 0 {
            return Err("--max-keys-per-lease must be at least 1".into());
        }
        if limits.max_delete_keys == 0 {
            return Err("--max-delete-keys must be at least 1".into());
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
    pub(super) fn max_snapshot_streams(&self) -> Result<usize, String> {
        let streams = self
            .max_snapshot_streams
            .unwrap_or(DEFAULT_MAX_SNAPSHOT_STREAMS);
        if !(1..=64).contains(&streams) {
            return Err("--max-snapshot-streams must be between 1 and 64".into());
        }
        Ok(streams)
    }

    /// How compaction cleans its window: the step size and the pause between steps.
    pub(super) fn compaction_cleaner(&self) -> Result<CleanerSettings, String> {
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
    pub(super) fn auth_options(&self) -> Result<AuthOptions, String> {
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
        let password_hash = match self.password_hash.unwrap_or_default() {
            super::PasswordHashArg::Argon2id => PasswordHashScheme::Argon2id,
            super::PasswordHashArg::Bcrypt => PasswordHashScheme::Bcrypt,
        };
        Ok(AuthOptions {
            token_ttl,
            max_concurrent_password_checks: checks,
            password_hash,
        })
    }

    /// The hot-key top-k's size and window.
    pub(super) fn hot_key_limits(&self) -> Result<HotKeyLimits, String> {
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
    pub(super) fn lease_stream_limits(&self) -> Result<LeaseStreamLimits, String> {
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
    pub(super) fn lease_settings(&self, max_leases: u64) -> Result<LeaseSettings, String> {
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
    pub(super) fn log_options(&self) -> Result<(LogOptions, TailLimits), String> {
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

    /// The watch hub's limits: the periodic bookmark interval of a watch that names none (0 turns
    /// the bookmarks off), the most watchers and each stream's buffer, checked together.
    pub(crate) fn watch_limits(&self) -> Result<WatchLimits, String> {
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
            stream_buffer_bytes: self
                .watch_buffer_bytes
                .unwrap_or(defaults.stream_buffer_bytes),
            ..defaults
        };
        limits.check()?;
        Ok(limits)
    }

    /// etcd's `--auto-compaction-mode` and `--auto-compaction-retention`, turned into the
    /// compactor's schedule.
    pub(super) fn auto_compaction(&self) -> Result<AutoCompaction, String> {
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

impl ServeArgs {
    /// The client listener's connection limits, from their flags and the defaults.
    pub(crate) fn client_connection_limits(&self) -> Result<revkv_tls::ConnectionLimits, String> {
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
            max_concurrent_streams: self
                .max_concurrent_streams
                .unwrap_or(defaults.max_concurrent_streams),
        };
        limits.validate()?;
        Ok(limits)
    }

    /// The quota of `--quota-backend-bytes`; 0 (or none) is etcd's default of 2 GiB.
    pub(super) fn space_quota(&self) -> SpaceQuota {
        let quota_bytes = match self.quota_backend_bytes {
            None | Some(0) => DEFAULT_QUOTA_BACKEND_BYTES,
            Some(bytes) => bytes,
        };
        SpaceQuota {
            quota_bytes,
            ..SpaceQuota::default()
        }
    }

    /// `--initial-corrupt-check` and `--corrupt-check-time`, both off by default as in etcd.
    pub(super) fn corruption_check(&self) -> Result<CorruptionCheckSettings, String> {
        let interval = match self.corrupt_check_time.as_deref().map(str::trim) {
            None | Some("0") => None,
            Some(text) => {
                let interval = humantime::parse_duration(text)
                    .map_err(|error| format!("corrupt-check-time {text:?}: {error}"))?;
                if !(MIN_CORRUPT_CHECK_TIME..=MAX_CORRUPT_CHECK_TIME).contains(&interval) {
                    return Err(format!(
                        "corrupt-check-time {text:?} must be 0 (off) or between 1s and 7 days"
                    ));
                }
                Some(interval)
            }
        };
        Ok(CorruptionCheckSettings {
            initial: self.initial_corrupt_check.unwrap_or(false),
            interval,
        })
    }
}

/// The shortest period of the consistency check: each check hashes every member's whole history,
/// so a shorter one would keep the members busy hashing.
const MIN_CORRUPT_CHECK_TIME: Duration = Duration::from_secs(1);

/// The longest period: beyond a week a check finds a fault too late to matter, and a typo (a
/// missing unit) is more likely than the wish.
const MAX_CORRUPT_CHECK_TIME: Duration = Duration::from_secs(7 * 24 * 3600);
