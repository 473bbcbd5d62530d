//! The replicated member behind the HTTP API: `Node` starts a raft member and the client listener,
//! and `MemberBackend` answers the API's operations through raft.
//!
//! Embedding: `Node::start(config)` returns a handle whose `backend()` is the `MemberBackend`,
//! whose `KvBackend` methods are the same operations the HTTP API offers, plus a few conveniences
//! (`put`, `get`, `delete`); `shutdown()` stops the member cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::space_quota::{self, SpaceQuota};
use revkv_metrics::{Metrics, PrefixLabelConfig};
use revkv_raft::{
    AdminRequest, LeaseEvents, MemberConfig, MemberError, MemberNode, PeerLimits, RaftMember,
    RaftTiming, StorageTimings,
};
use revkv_storage::{
    validate_range, validate_request, Alarm, Defragmented, DeleteRangeRequest, KeyHistory,
    KeyRange, KeyValue, PutRequest, RangeEnd, RangeRequest, Request, Response, StateHash,
    StoreOptions,
};
use tokio::sync::{oneshot, watch};

use crate::backend::{
    BackupSource, GrantedLease, KvBackend, LeaseTimeToLive, MemberInfo, MemberStatus, ReadAnswer,
    ReadConsistency, ResponseHeader, Written,
};
use crate::compaction::{self, AutoCompaction};
use crate::compaction_cleaner::{self, CleanerSettings};
use crate::error::NodeError;
use crate::http::{client_router_with_metrics, HttpLimits};
use crate::metrics_feed::{start_metrics_feeds, AppendApplyTimings, LeaseEventCounts};
use crate::watch::{WatchHub, WatchLimits};

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
            peer_source_address: None,
            peer_tls: None,
            lease: Default::default(),
            lease_events: Default::default(),
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

/// The API's operations, answered through the raft member.
pub struct MemberBackend {
    member: RaftMember,
    request_timeout: Duration,
    watch_hub: Arc<WatchHub>,
    metrics: Arc<Metrics>,
}

/// A running member with its client listener.
pub struct Node {
    backend: Arc<MemberBackend>,
    client_address: SocketAddr,
    stop_client_server: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    /// Turns true at shutdown, stopping the member's background tasks (the compactor).
    stop_background: watch::Sender<bool>,
}

impl Node {
    /// Binds the client and peer listeners from the configuration and starts the member.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        let bind = |address: SocketAddr| async move {
            tokio::net::TcpListener::bind(address)
                .await
                .map_err(|error| {
                    NodeError::Internal(format!("cannot listen on {address}: {error}"))
                })
        };
        let client_listener = bind(config.listen_client).await?;
        let peer_listener = bind(config.member.listen_peer).await?;
        Self::start_with_listeners(config, client_listener, peer_listener).await
    }

    /// Starts the member on listeners the caller has bound (tests bind port 0 first, so that every
    /// member's address is known before any starts).
    pub async fn start_with_listeners(
        config: NodeConfig,
        client_listener: tokio::net::TcpListener,
        peer_listener: tokio::net::TcpListener,
    ) -> Result<Node, NodeError> {
        let metrics = Arc::new(
            Metrics::new(config.metric_prefix_labels)
                .map_err(|error| NodeError::Internal(format!("metrics: {error}")))?,
        );
        let mut member_config = config.member.clone();
        member_config.timings =
            StorageTimings::new(Arc::new(AppendApplyTimings(metrics.raft.clone())));
        member_config.lease_events =
            LeaseEvents::new(Arc::new(LeaseEventCounts(metrics.lease.clone())));
        let member = RaftMember::start(member_config, peer_listener)
            .await
            .map_err(node_error)?;
        // Serve nothing until the state machine has re-applied what was committed before a restart,
        // so that reads never go backwards across a restart. A member that was never part of a
        // cluster (an empty `--join` member waiting to be added) has nothing to recover and no
        // leader to recover from: it serves at once, so its probes answer while it waits.
        let initialized = member
            .is_initialized()
            .await
            .map_err(|error| NodeError::Internal(format!("raft stopped at start: {error}")))?;
        if !initialized {
            tracing::info!("member is not part of a cluster yet; waiting to be added");
        } else if let Err(error) = member.wait_for_recovery(config.recovery_timeout).await {
            tracing::warn!(%error, "state machine not recovered in time; serving anyway, not ready");
        }
        let client_address = client_listener
            .local_addr()
            .map_err(|error| NodeError::Internal(error.to_string()))?;
        start_metrics_feeds(&member, &metrics);
        let watch_hub = WatchHub::start(
            member.store().clone(),
            member.applied(),
            config.watch.clone(),
            Some(metrics.watch.clone()),
        )?;
        let backend = Arc::new(MemberBackend {
            member,
            request_timeout: config.request_timeout,
            watch_hub,
            metrics: metrics.clone(),
        });
        let stop_background = watch::Sender::new(false);
        compaction::spawn(
            backend.clone(),
            config.auto_compaction,
            stop_background.subscribe(),
        );
        space_quota::spawn(
            backend.clone(),
            config.space_quota,
            stop_background.subscribe(),
        );
        compaction_cleaner::spawn(
            backend.member.store().clone(),
            config.compaction_cleaner,
            stop_background.subscribe(),
        );
        let router = client_router_with_metrics(backend.clone(), config.http.clone(), metrics);
        let (stop, stopped) = oneshot::channel::<()>();
        let tls = config.client_tls.clone();
        let connection_limits = config.client_connections.clone();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            let serving = revkv_tls::serve_with_limits(
                client_listener,
                tls.as_ref(),
                connection_limits,
                router,
                shutdown,
            );
            if let Err(error) = serving.await {
                tracing::error!(%error, "client listener failed");
            }
        });
        tracing::info!(member_id = backend.member.id(), %client_address, "member serving");
        Ok(Node {
            backend,
            client_address,
            stop_client_server: std::sync::Mutex::new(Some(stop)),
            stop_background,
        })
    }

    /// The member's operations: the same ones the HTTP API offers (`KvBackend`), plus the
    /// conveniences `put`, `get` and `delete`, the watch hub and the metrics. A named accessor
    /// rather than `Deref`, so a reader of `node.backend().put(..)` sees where the call goes.
    pub fn backend(&self) -> &Arc<MemberBackend> {
        &self.backend
    }

    /// Waits until the member stops on its own because a write or fsync of its data failed, and
    /// says why (see `RaftMember::stopped_by_fault`). Whoever runs the member should then end it
    /// without a graceful shutdown: its files can no longer be trusted. `revkv serve` exits.
    pub async fn stopped_by_fault(&self) -> String {
        self.backend.member.stopped_by_fault().await
    }

    /// The address the client listener is bound to.
    pub fn client_address(&self) -> SocketAddr {
        self.client_address
    }

    /// The address the peer listener is bound to.
    pub fn peer_address(&self) -> SocketAddr {
        self.backend.member.peer_address()
    }

    /// Ends every watch with CANCELED (so its client resumes on another member), stops serving
    /// clients, stops raft and the peer listener, and makes the store durable.
    pub async fn shutdown(&self) -> Result<(), NodeError> {
        self.backend.watch_hub.shutdown();
        self.stop_background.send_replace(true);
        let stop = self
            .stop_client_server
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        self.backend.member.shutdown().await.map_err(node_error)
    }
}

/// The one place a raft-layer error becomes a node-layer error.
fn node_error(error: MemberError) -> NodeError {
    let retry_after = Duration::from_secs(1);
    match error {
        MemberError::NoLeader(reason) => NodeError::Unavailable {
            reason,
            retry_after,
        },
        MemberError::Stopping(reason) => NodeError::Unavailable {
            reason,
            retry_after,
        },
        MemberError::Timeout(message) => NodeError::Timeout(message),
        MemberError::Refused(message) => NodeError::Invalid(message),
        MemberError::UnknownMember(id) => NodeError::NotFound(format!("member {id}")),
        MemberError::LeaseNotFound(id) => NodeError::NotFound(format!("lease {id} not found")),
        MemberError::Storage(error) => NodeError::Storage(error),
        MemberError::Startup(message) => NodeError::Internal(message),
    }
}

impl MemberBackend {
    /// Waits until this member may serve a read of the given consistency: a ReadIndex round for a
    /// linearizable read, the asked revision applied for a serializable one with `min_revision`.
    async fn wait_for_consistency(&self, consistency: ReadConsistency) -> Result<(), NodeError> {
        match consistency {
            ReadConsistency::Linearizable => self
                .member
                .linearizable_read_barrier()
                .await
                .map_err(node_error),
            ReadConsistency::Serializable {
                min_revision: Some(revision),
            } => self
                .member
                .wait_for_revision(revision, self.request_timeout)
                .await
                .map_err(node_error),
            ReadConsistency::Serializable { min_revision: None } => Ok(()),
        }
    }

    /// The raft member, for metrics and tests.
    pub fn member(&self) -> &RaftMember {
        &self.member
    }

    /// This member's metrics (what `GET /metrics` serves).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn header_at(&self, revision: u64) -> ResponseHeader {
        ResponseHeader {
            revision,
            member_id: self.member.id(),
            raft_term: self.member.status().term,
        }
    }

    /// Stores `value` under `key`.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<Written, NodeError> {
        let put = PutRequest {
            key: key.into(),
            value: value.into(),
            lease: 0,
            prev_kv: false,
        };
        self.write(Request::Put(put)).await
    }

    /// Reads one key linearizably.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<KeyValue>, NodeError> {
        let request = RangeRequest::of(KeyRange::single(key));
        let answer = self.read(request, ReadConsistency::Linearizable).await?;
        Ok(answer.response.kvs.into_iter().next())
    }

    /// Deletes one key; answers how many keys were deleted (0 or 1).
    pub async fn delete(&self, key: impl Into<Vec<u8>>) -> Result<u64, NodeError> {
        let delete = DeleteRangeRequest {
            range: KeyRange::single(key),
            prev_kv: false,
        };
        match self.write(Request::DeleteRange(delete)).await?.response {
            Response::DeleteRange(deleted) => Ok(deleted.deleted),
            other => Err(NodeError::Internal(format!("delete answered {other:?}"))),
        }
    }

    fn member_infos(&self) -> Vec<MemberInfo> {
        self.member
            .members()
            .into_iter()
            .map(|member| MemberInfo {
                id: member.id,
                peer_url: member.node.peer_url,
                client_url: member.node.client_url,
                grpc_url: member.node.grpc_url,
                is_learner: member.is_learner,
            })
            .collect()
    }

    async fn admin(&self, request: AdminRequest) -> Result<Vec<MemberInfo>, NodeError> {
        self.member.admin(request).await.map_err(node_error)?;
        Ok(self.member_infos())
    }
}

impl KvBackend for MemberBackend {
    fn member_id(&self) -> u64 {
        self.member.id()
    }

    fn cluster_id(&self) -> u64 {
        self.member.store().known_cluster_id()
    }

    fn backup_source(&self) -> BackupSource {
        BackupSource {
            store: self.member.store().clone(),
            member_id: self.member.id(),
        }
    }

    fn header(&self) -> Result<ResponseHeader, NodeError> {
        let revision = self.member.store().current_revision()?;
        Ok(self.header_at(revision))
    }

    async fn write(&self, request: Request) -> Result<Written, NodeError> {
        // Refuse bad input here, before it costs a raft round (the state machine checks again).
        validate_request(&request, self.member.store().limits())?;
        let written = self.member.write(request).await.map_err(|error| {
            self.metrics.raft.record_proposal_failed();
            node_error(error)
        })?;
        let response = written
            .outcome
            .map_err(|rejection| rejection.into_storage())?;
        Ok(Written {
            header: self.header_at(written.revision),
            response,
        })
    }

    async fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<ReadAnswer, NodeError> {
        validate_range(&request, self.member.store().limits())?;
        self.wait_for_consistency(consistency).await?;
        let read = if reads_one_key(&request) {
            // One key is a seek in the key index and one history lookup: microseconds, less than
            // the thread hop to the blocking pool and back would cost, so it runs right here.
            self.member.store().range(&request)?
        } else {
            let store = self.member.store().clone();
            tokio::task::spawn_blocking(move || store.range(&request))
                .await
                .map_err(|error| NodeError::Internal(error.to_string()))??
        };
        Ok(ReadAnswer {
            header: self.header_at(read.revision),
            response: read.response,
        })
    }

    async fn key_history(
        &self,
        key: Vec<u8>,
        from_revision: Option<u64>,
        limit: u64,
        consistency: ReadConsistency,
    ) -> Result<(ResponseHeader, KeyHistory), NodeError> {
        self.wait_for_consistency(consistency).await?;
        // A page reads up to `limit` values, so it runs off the async threads.
        let store = self.member.store().clone();
        let history =
            tokio::task::spawn_blocking(move || store.key_history(&key, from_revision, limit))
                .await
                .map_err(|error| NodeError::Internal(error.to_string()))??;
        Ok((self.header_at(history.revision), history))
    }

    async fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> Result<GrantedLease, NodeError> {
        let written = self
            .member
            .lease_grant(id, ttl_seconds)
            .await
            .map_err(node_error)?;
        match written
            .outcome
            .map_err(|rejection| rejection.into_storage())?
        {
            Response::LeaseGrant(granted) => Ok(GrantedLease {
                header: self.header_at(written.revision),
                id: granted.id,
                ttl_seconds: granted.ttl_seconds,
            }),
            other => Err(NodeError::Internal(format!(
                "lease grant answered {other:?}"
            ))),
        }
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<(ResponseHeader, i64), NodeError> {
        let ttl = self.member.lease_keep_alive(id).await.map_err(node_error)?;
        Ok((self.header()?, ttl))
    }

    async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLive, NodeError> {
        let reading = self
            .member
            .lease_time_to_live(id, with_keys)
            .await
            .map_err(node_error)?;
        Ok(LeaseTimeToLive {
            header: self.header()?,
            id: reading.id,
            granted_ttl_seconds: reading.granted_ttl_seconds,
            remaining_ttl_seconds: reading.remaining_ttl_seconds,
            keys: reading.keys,
        })
    }

    async fn lease_ids(&self) -> Result<(ResponseHeader, Vec<i64>), NodeError> {
        self.member
            .linearizable_read_barrier()
            .await
            .map_err(node_error)?;
        let store = self.member.store().clone();
        let leases = tokio::task::spawn_blocking(move || store.leases())
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))??;
        let ids = leases.into_iter().map(|lease| lease.id).collect();
        Ok((self.header()?, ids))
    }

    async fn hash(&self, revision: Option<u64>) -> Result<(ResponseHeader, StateHash), NodeError> {
        let store = self.member.store().clone();
        let hash = tokio::task::spawn_blocking(move || store.hash(revision))
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))??;
        let current = self.member.store().current_revision()?;
        Ok((self.header_at(current), hash))
    }

    async fn status(&self) -> Result<MemberStatus, NodeError> {
        let raft = self.member.status();
        let stats = self.member.store().stats()?;
        let log_db_bytes = self.member.log_store().size_bytes();
        Ok(MemberStatus {
            member_id: self.member.id(),
            leader_id: raft.leader,
            raft_term: raft.term,
            commit_index: raft.commit_index,
            applied_index: raft.applied_index,
            revision: stats.current_revision,
            compact_revision: stats.compact_revision,
            state_db_bytes: stats.file_bytes,
            state_db_bytes_in_use: stats.bytes_in_use,
            log_db_bytes,
            version: env!("CARGO_PKG_VERSION").to_string(),
            role: raft.role.as_str().to_string(),
        })
    }

    async fn members(&self) -> Result<Vec<MemberInfo>, NodeError> {
        Ok(self.member_infos())
    }

    async fn add_learner(&self, member: MemberInfo) -> Result<Vec<MemberInfo>, NodeError> {
        let node = MemberNode {
            peer_url: member.peer_url,
            client_url: member.client_url,
            grpc_url: member.grpc_url,
        };
        self.admin(AdminRequest::AddLearner {
            id: member.id,
            node,
        })
        .await
    }

    async fn add_member_at(
        &self,
        peer_url: String,
        as_learner: bool,
    ) -> Result<(MemberInfo, Vec<MemberInfo>), NodeError> {
        let identity = self
            .member
            .identify_new_member(&peer_url)
            .await
            .map_err(node_error)?;
        let added = MemberInfo {
            id: identity.id,
            peer_url,
            client_url: identity.node.client_url,
            grpc_url: identity.node.grpc_url,
            is_learner: as_learner,
        };
        let mut members = self.add_learner(added.clone()).await?;
        if !as_learner {
            members = self.promote(added.id).await?;
        }
        Ok((added, members))
    }

    async fn update_member_peer_url(
        &self,
        id: u64,
        peer_url: String,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        let url: axum::http::Uri = peer_url
            .parse()
            .map_err(|error| NodeError::Invalid(format!("peer URL {peer_url:?}: {error}")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(NodeError::Invalid(format!(
                "peer URL {peer_url:?} is not an http:// or https:// URL with a host"
            )));
        }
        let current = self
            .member_infos()
            .into_iter()
            .find(|member| member.id == id);
        let Some(current) = current else {
            return Err(NodeError::NotFound(format!("member {id} does not exist")));
        };
        // The client URLs stay as the member published them; only the peer URL moves.
        let node = MemberNode {
            peer_url,
            client_url: current.client_url,
            grpc_url: current.grpc_url,
        };
        self.admin(AdminRequest::UpdateNode { id, node }).await
    }

    async fn promote(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.admin(AdminRequest::Promote { id }).await
    }

    async fn remove_member(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.admin(AdminRequest::Remove { id }).await
    }

    async fn transfer_leader(&self, to: u64) -> Result<(), NodeError> {
        self.admin(AdminRequest::TransferLeader { to })
            .await
            .map(|_| ())
    }

    async fn is_ready(&self) -> bool {
        self.member.is_ready()
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.watch_hub
    }

    fn auth_records(&self) -> std::sync::Arc<revkv_storage::auth::AuthState> {
        self.member.store().auth()
    }

    fn alarms(&self) -> Result<Vec<Alarm>, NodeError> {
        Ok(self.member.store().alarms()?)
    }

    async fn defragment(&self) -> Result<Defragmented, NodeError> {
        crate::space_quota::defragment_store(self.member.store().clone()).await
    }
}

/// True for a read of a single key at any revision: bounded work, whatever the store's size.
fn reads_one_key(request: &RangeRequest) -> bool {
    request
        .range
        .as_ref()
        .is_some_and(|range| range.end == RangeEnd::Single)
}
