//! The assembly of a `NodeConfig` from the flags: the defaults filled in, each subsystem's
//! settings taken from `subsystems.rs`, `tls.rs` and `addresses.rs`, and the member's own raft,
//! store and peer settings put together. Every check runs before anything starts, so a bad
//! setting stops `revkv serve` with a message that names the flag.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use revkv_node::http::HttpLimits;
use revkv_node::NodeConfig;
use revkv_raft::{MemberConfig, MemberNode, PeerLimits, RaftTiming};
use revkv_storage::{Limits, StoreOptions};

use super::addresses::{advertised_grpc_url, advertised_url, parse_initial_cluster, scheme};
use super::ServeArgs;

/// The longest `--auto-promote-intent-grace-seconds`: a day, far past any add's time.
const MOST_INTENT_GRACE_SECONDS: u64 = 24 * 60 * 60;

impl ServeArgs {
    /// Fills defaults and checks the settings fit together.
    pub fn into_node_config(self) -> Result<NodeConfig, String> {
        let watch = self.watch_limits()?;
        let http = self.http_limits()?;
        let compaction_cleaner = self.compaction_cleaner()?;
        let auto_compaction = self.auto_compaction()?;
        let space_quota = self.space_quota();
        let corruption_check = self.corruption_check()?;
        let client_connections = self.client_connection_limits()?;
        let metric_prefix_labels = self.metric_prefix_labels()?;
        let client_tls = self.client_tls()?;
        let member = self.member_config(client_tls.is_some(), compaction_cleaner.batch_entries)?;
        Ok(NodeConfig {
            member,
            listen_client: self.listen_client(),
            http,
            request_timeout: self.request_timeout(),
            watch,
            auto_compaction,
            compaction_cleaner,
            recovery_timeout: Duration::from_secs(60),
            metric_prefix_labels,
            client_tls,
            space_quota,
            corruption_check,
            client_connections,
        })
    }

    /// The member's own settings: its raft timing, log and store, its leases, how its peers and
    /// clients reach it, and the cluster it starts or joins.
    fn member_config(
        &self,
        client_tls: bool,
        compaction_inline_entries: usize,
    ) -> Result<MemberConfig, String> {
        let (log, log_tail) = self.log_options()?;
        let timing = self.raft_timing();
        let lease_limits = self.lease_limits(&timing)?;
        let lease = self.lease_settings(lease_limits.max_leases)?;
        let peer_tls = self.peer_tls()?;
        let advertise = self.advertised_node(client_tls, peer_tls.is_some())?;
        let id = self.id.unwrap_or(1);
        let join = self.join.unwrap_or(false);
        let initial_cluster = match (&self.initial_cluster, join) {
            (_, true) => BTreeMap::new(),
            (Some(text), false) => {
                parse_initial_cluster(text, id, &advertise, scheme(peer_tls.is_some()))?
            }
            (None, false) => BTreeMap::from([(id, advertise.clone())]),
        };
        Ok(MemberConfig {
            id,
            data_dir: self
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("revkv-data")),
            listen_peer: self.listen_peer(),
            advertise,
            initial_cluster,
            join,
            timing,
            peer_limits: self.peer_limits(),
            store: self.store_options(lease_limits, compaction_inline_entries),
            log,
            log_tail,
            // `Node` fills in its metrics observer when it starts the member.
            timings: Default::default(),
            peer_append_timings: Default::default(),
            peer_source_address: self.peer_source_address,
            peer_tls,
            lease,
            lease_events: Default::default(),
            learner_promotion: self.learner_promotion()?,
            learner_promotion_events: Default::default(),
            peer_network: Default::default(),
            disks: Default::default(),
        })
    }

    /// How this member, leading, promotes learners added with `--auto-promote`.
    fn learner_promotion(&self) -> Result<revkv_raft::LearnerPromotionSettings, String> {
        let defaults = revkv_raft::LearnerPromotionSettings::default();
        let default_max_lag_entries = match self.auto_promote_max_lag {
            None => defaults.default_max_lag_entries,
            Some(0) => return Err("--auto-promote-max-lag must be at least 1 entry".into()),
            Some(entries) => entries,
        };
        let stranded_intent_grace = match self.auto_promote_intent_grace_seconds {
            None => defaults.stranded_intent_grace,
            Some(seconds) if (1..=MOST_INTENT_GRACE_SECONDS).contains(&seconds) => {
                Duration::from_secs(seconds)
            }
            Some(_) => {
                return Err(format!(
                    "--auto-promote-intent-grace-seconds must be between 1 and \
                     {MOST_INTENT_GRACE_SECONDS} (a day)"
                ))
            }
        };
        Ok(revkv_raft::LearnerPromotionSettings {
            default_max_lag_entries,
            stranded_intent_grace,
            ..defaults
        })
    }

    fn listen_client(&self) -> SocketAddr {
        self.listen_client.unwrap_or(([127, 0, 0, 1], 7001).into())
    }

    fn listen_peer(&self) -> SocketAddr {
        self.listen_peer.unwrap_or(([127, 0, 0, 1], 7101).into())
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.unwrap_or(5000))
    }

    /// The URLs this member gives its peers and clients, with the schemes its listeners' TLS
    /// calls for.
    fn advertised_node(&self, client_tls: bool, peer_tls: bool) -> Result<MemberNode, String> {
        let (client_scheme, peer_scheme) = (scheme(client_tls), scheme(peer_tls));
        Ok(MemberNode {
            peer_url: advertised_url(
                self.advertise_peer.clone(),
                self.listen_peer(),
                "peer",
                peer_scheme,
            )?,
            client_url: advertised_url(
                self.advertise_client.clone(),
                self.listen_client(),
                "client",
                client_scheme,
            )?,
            grpc_url: advertised_grpc_url(
                self.listen_grpc,
                self.advertise_grpc.clone(),
                client_scheme,
            )?,
        })
    }

    fn raft_timing(&self) -> RaftTiming {
        let election_min = Duration::from_millis(self.election_timeout_ms.unwrap_or(1000));
        let defaults = RaftTiming::default();
        RaftTiming {
            heartbeat_interval: Duration::from_millis(self.heartbeat_ms.unwrap_or(100)),
            election_timeout_min: election_min,
            election_timeout_max: election_min * 2,
            snapshot_after_entries: self
                .snapshot_entries
                .unwrap_or(defaults.snapshot_after_entries),
            log_entries_kept_after_snapshot: self
                .snapshot_keep_entries
                .unwrap_or(defaults.log_entries_kept_after_snapshot),
            append_timeout_max: self
                .max_append_timeout_ms
                .map_or(defaults.append_timeout_max, Duration::from_millis),
            pre_vote: self.pre_vote.unwrap_or(defaults.pre_vote),
        }
    }

    /// The store's options; `lease_limits` already holds the lease flags' limits.
    fn store_options(
        &self,
        lease_limits: Limits,
        compaction_inline_entries: usize,
    ) -> StoreOptions {
        let default_limits = Limits::default();
        let limits = Limits {
            max_key_bytes: self.max_key_bytes.unwrap_or(default_limits.max_key_bytes),
            max_value_bytes: self
                .max_value_bytes
                .unwrap_or(default_limits.max_value_bytes),
            max_txn_ops: self.max_txn_ops.unwrap_or(default_limits.max_txn_ops),
            max_nested_txn_ops: self
                .max_nested_txn_ops
                .unwrap_or(default_limits.max_nested_txn_ops),
            ..lease_limits
        };
        StoreOptions {
            limits,
            durable_commit_interval: Duration::from_millis(
                self.durable_commit_interval_ms.unwrap_or(500),
            ),
            cache_bytes: self
                .state_cache_bytes
                .unwrap_or(StoreOptions::default().cache_bytes),
            compaction_inline_entries,
            clock: StoreOptions::default().clock,
        }
    }

    /// Peer calls time out with client requests, so a forwarded request never outlives its
    /// caller's wait.
    fn peer_limits(&self) -> PeerLimits {
        PeerLimits {
            call_timeout: self.request_timeout(),
            max_snapshot_bytes: self
                .max_snapshot_bytes
                .unwrap_or(PeerLimits::default().max_snapshot_bytes),
            ..PeerLimits::default()
        }
    }

    pub(super) fn http_limits(&self) -> Result<HttpLimits, String> {
        Ok(HttpLimits {
            max_body_bytes: self
                .max_body_bytes
                .unwrap_or(HttpLimits::default().max_body_bytes),
            lease_stream: self.lease_stream_limits()?,
            max_snapshot_streams: self.max_snapshot_streams()?,
            hot_keys: self.hot_key_limits()?,
            // Ten minutes in five-second steps; no flag, as the console's chart is drawn for it.
            conflict_rates: revkv_node::conflict_rates::ConflictRateLimits::default(),
            auth: self.auth_options()?,
        })
    }
}
