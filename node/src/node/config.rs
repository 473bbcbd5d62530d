//! `NodeConfig`: everything a member needs to start, the raft member's configuration plus the
//! client listener's, its limits and its background tasks' settings, with the defaults an
//! embedding application or a test starts from.

use std::net::SocketAddr;
use std::time::Duration;

use crate::space_quota::SpaceQuota;
use revkv_metrics::PrefixLabelConfig;
use revkv_raft::{MemberConfig, MemberNode, PeerLimits, RaftTiming};
use revkv_storage::StoreOptions;

use crate::compaction::AutoCompaction;
use crate::compaction_cleaner::CleanerSettings;
use crate::corruption_check::CorruptionCheckSettings;
use crate::http::HttpLimits;
use crate::watch::WatchLimits;

/// How a node starts: the raft member's configuration plus the client listener's.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub member: MemberConfig,
    /// Where the client HTTP API binds.
    pub listen_client: SocketAddr,
    pub http: HttpLimits,
    /// Longest wait for a write, a read barrier or `min_revision` before answering `timeout`.
    pub request_timeout: Duration,
    /// Bounds on watches and the member's default bookmark interval.
    pub watch: WatchLimits,
    /// What automatic compaction keeps (run by the leader, through raft).
    pub auto_compaction: AutoCompaction,
    /// How the background compaction cleaner works through a compacted window.
    pub compaction_cleaner: CleanerSettings,
    /// Longest wait at start for the state machine to re-apply committed entries before the client
    /// listener opens.
    pub recovery_timeout: Duration,
    /// How keys become the `prefix` label of conflict and retry metrics.
    pub metric_prefix_labels: PrefixLabelConfig,
    /// TLS on the client listener (`None`: plain HTTP). Peer TLS is `member.peer_tls`.
    pub client_tls: Option<revkv_tls::ServerTls>,
    /// Past this size of its state file the member raises the NOSPACE alarm (`space_quota`).
    pub space_quota: SpaceQuota,
    /// When members compare their data (at start, periodically); both off by default, as in etcd.
    pub corruption_check: CorruptionCheckSettings,
    /// Bounds on the client listener's connections (count, per client address, header read
    /// time and size).
    pub client_connections: revkv_tls::ConnectionLimits,
}

impl NodeConfig {
    /// A single-member cluster with every default `revkv serve` uses when given only these three
    /// settings: member id 1, advertising its listen addresses, automatic compaction off. The
    /// `revkv` binary's flag parsing is checked to give exactly this (its `serve_config` tests),
    /// so an embedder that starts here gets what `revkv serve` would run.
    pub fn single_member(
        data_dir: std::path::PathBuf,
        listen_client: SocketAddr,
        listen_peer: SocketAddr,
    ) -> NodeConfig {
        let advertise = MemberNode {
            peer_url: format!("http://{listen_peer}"),
            client_url: format!("http://{listen_client}"),
            grpc_url: None,
        };
        let request_timeout = Duration::from_secs(5);
        let member = MemberConfig {
            id: 1,
            data_dir,
            listen_peer,
            advertise: advertise.clone(),
            initial_cluster: std::collections::BTreeMap::from([(1, advertise)]),
            join: false,
            timing: RaftTiming::default(),
            peer_limits: PeerLimits {
                call_timeout: request_timeout,
                ..PeerLimits::default()
            },
            store: StoreOptions {
                durable_commit_interval: Duration::from_millis(500),
                ..StoreOptions::default()
            },
            log: Default::default(),
            log_tail: Default::default(),
            // `Node` fills in its metrics observer when it starts the member.
            timings: Default::default(),
            peer_append_timings: Default::default(),
            peer_source_address: None,
            peer_tls: None,
            lease: Default::default(),
            lease_events: Default::default(),
            learner_promotion: Default::default(),
            learner_promotion_events: Default::default(),
            peer_network: Default::default(),
            disks: Default::default(),
        };
        NodeConfig {
            member,
            listen_client,
            http: HttpLimits::default(),
            request_timeout,
            watch: WatchLimits::default(),
            auto_compaction: AutoCompaction::Off,
            compaction_cleaner: CleanerSettings::default(),
            recovery_timeout: Duration::from_secs(60),
            metric_prefix_labels: PrefixLabelConfig::default(),
            client_tls: None,
            space_quota: SpaceQuota::default(),
            corruption_check: CorruptionCheckSettings::default(),
            client_connections: revkv_tls::ConnectionLimits::default(),
        }
    }

    /// Advertises `grpc_url` as this member's etcd gRPC URL (where the embedder serves
    /// `revkv-grpc`), in its own entry of the initial cluster too; `MemberList` then names it.
    pub fn advertising_grpc_url(mut self, grpc_url: String) -> NodeConfig {
        self.member.advertise.grpc_url = Some(grpc_url);
        if let Some(own) = self.member.initial_cluster.get_mut(&self.member.id) {
            own.grpc_url = self.member.advertise.grpc_url.clone();
        }
        self
    }
}
