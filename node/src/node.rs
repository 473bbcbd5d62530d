//! The replicated member behind the HTTP API: `Node` starts a raft member and the client listener,
//! and `MemberBackend` answers the API's operations through raft.
//!
//! `config.rs` holds `NodeConfig`; `MemberBackend` lives in its own module (`crate::member_backend`)
//! beside this one, because the corruption check this file spawns needs it too, and a child of
//! this module would make the two modules import each other.
//!
//! Embedding: `Node::start(config)` returns a handle whose `backend()` is the `MemberBackend`,
//! whose `KvBackend` methods are the same operations the HTTP API offers, plus a few conveniences
//! (`put`, `get`, `delete`); `shutdown()` stops the member cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::space_quota;
use revkv_metrics::Metrics;
use revkv_raft::peer::simulated::PeerListener;
use revkv_raft::{LeaseEvents, PeerAppendTimings, RaftMember, StorageTimings};
use tokio::sync::{oneshot, watch};

use crate::compaction;
use crate::compaction_cleaner;
use crate::corruption_check;
use crate::error::NodeError;
use crate::http::client_router_with_metrics;
use crate::member_backend::{node_error, MemberBackend};
use crate::metrics_feed::{
    refresh_watch_buffer_gauge_before_scrape, start_metrics_feeds, AppendApplyTimings,
    LeaseEventCounts, PeerAppendTimeouts,
};
use crate::watch::WatchHub;

mod config;

pub use config::NodeConfig;

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
        let client_address = client_listener
            .local_addr()
            .map_err(|error| NodeError::Internal(error.to_string()))?;
        Self::start_serving(
            config,
            Some(client_listener),
            client_address,
            peer_listener.into(),
        )
        .await
    }

    /// Starts the member on a simulated peer network (`config.member.peer_network`, whose
    /// listener is `peer_address`) with no client listener: its clients call `backend()` in the
    /// same process. For the deterministic simulator (issue 37), where nothing may touch a socket.
    /// `client_address` answers the configured `listen_client`, which nothing listens on.
    pub async fn start_simulated(
        config: NodeConfig,
        peer_address: SocketAddr,
    ) -> Result<Node, NodeError> {
        let client_address = config.listen_client;
        let peer_listener = PeerListener::Simulated(peer_address);
        Self::start_serving(config, None, client_address, peer_listener).await
    }

    /// The member, its watch hub and background tasks, and the client server when there is a
    /// client listener.
    async fn start_serving(
        config: NodeConfig,
        client_listener: Option<tokio::net::TcpListener>,
        client_address: SocketAddr,
        peer_listener: PeerListener,
    ) -> Result<Node, NodeError> {
        let metrics = Arc::new(
            Metrics::new(config.metric_prefix_labels)
                .map_err(|error| NodeError::Internal(format!("metrics: {error}")))?,
        );
        let member = start_member_with_metrics(&config, &metrics, peer_listener).await?;
        wait_for_recovery_if_initialized(&member, config.recovery_timeout).await?;
        start_metrics_feeds(&member, &metrics);
        let watch_hub = WatchHub::start(
            member.store().clone(),
            member.applied(),
            config.watch.clone(),
            Some(metrics.watch.clone()),
        )?;
        refresh_watch_buffer_gauge_before_scrape(&metrics, &watch_hub);
        let backend = Arc::new(MemberBackend {
            member,
            request_timeout: config.request_timeout,
            watch_hub,
            metrics: metrics.clone(),
            quota_backend_bytes: config.space_quota.quota_bytes,
        });
        let stop_background = spawn_background_tasks(&backend, &config);
        let stop = client_listener.map(|client_listener| {
            let router = client_router_with_metrics(backend.clone(), config.http.clone(), metrics);
            spawn_client_server(client_listener, &config, router)
        });
        tracing::info!(member_id = backend.member.id(), %client_address, "member serving");
        Ok(Node {
            backend,
            client_address,
            stop_client_server: std::sync::Mutex::new(stop),
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

/// Starts the raft member with its storage and lease timings reported to `metrics`.
async fn start_member_with_metrics(
    config: &NodeConfig,
    metrics: &Metrics,
    peer_listener: PeerListener,
) -> Result<RaftMember, NodeError> {
    let mut member_config = config.member.clone();
    member_config.timings = StorageTimings::new(Arc::new(AppendApplyTimings(metrics.raft.clone())));
    member_config.lease_events =
        LeaseEvents::new(Arc::new(LeaseEventCounts(metrics.lease.clone())));
    member_config.peer_append_timings =
        PeerAppendTimings::new(Arc::new(PeerAppendTimeouts(metrics.raft.clone())));
    member_config.learner_promotion_events = revkv_raft::LearnerPromotionEvents::new(Arc::new(
        crate::metrics_feed::LearnerPromotionCounts(metrics.raft.clone()),
    ));
    RaftMember::start(member_config, peer_listener)
        .await
        .map_err(node_error)
}

/// Serve nothing until the state machine has re-applied what was committed before a restart, so
/// that reads never go backwards across a restart. A member that was never part of a cluster (an
/// empty `--join` member waiting to be added) has nothing to recover and no leader to recover
/// from: it serves at once, so its probes answer while it waits.
async fn wait_for_recovery_if_initialized(
    member: &RaftMember,
    recovery_timeout: Duration,
) -> Result<(), NodeError> {
    let initialized = member
        .is_initialized()
        .await
        .map_err(|error| NodeError::Internal(format!("raft stopped at start: {error}")))?;
    if !initialized {
        tracing::info!("member is not part of a cluster yet; waiting to be added");
    } else if let Err(error) = member.wait_for_recovery(recovery_timeout).await {
        tracing::warn!(%error, "state machine not recovered in time; serving anyway, not ready");
    }
    Ok(())
}

/// Starts automatic compaction, the space quota's watch, the compaction cleaner and the
/// consistency checks; they all stop when the returned sender says so.
fn spawn_background_tasks(
    backend: &Arc<MemberBackend>,
    config: &NodeConfig,
) -> watch::Sender<bool> {
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
    corruption_check::spawn(
        backend.clone(),
        config.corruption_check,
        stop_background.subscribe(),
    );
    stop_background
}

/// Serves the client API on `client_listener` (with the configured TLS and connection limits)
/// until the returned sender fires or is dropped.
fn spawn_client_server(
    client_listener: tokio::net::TcpListener,
    config: &NodeConfig,
    router: axum::Router,
) -> oneshot::Sender<()> {
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
    stop
}
