//! The peer listener: an axum router that decodes codec-encoded peer calls, runs them against the
//! local raft instance (or, for the leader-only calls, against this member as leader), and encodes
//! the reply. With peer TLS configured it serves HTTPS only and requires a client certificate
//! signed by the peer CA, so a caller outside the cluster is refused at the handshake, before any
//! append or vote is decoded.

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use revkv_storage::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::member_inner::MemberInner;
use crate::peer::simulated::{PeerListener, PeerNetwork, SimulatedNetwork};
use crate::peer::{
    paths, AdminRequest, LeaseGrantCall, LeaseTimeToLiveCall, PeerError, PeerIdentity,
};
use crate::types::{ClientRequest, TypeConfig};
use crate::write_path_trace::{self, Stage};

type Shared = State<Arc<MemberInner>>;

/// Serves the peer protocol on `listener` until the returned sender fires (or is dropped). On a
/// simulated listener the router goes to the member's simulated network instead, which stops
/// routing calls to it when the sender fires.
pub(crate) fn spawn(member: Arc<MemberInner>, listener: PeerServing) -> oneshot::Sender<()> {
    let (stop, stopped) = oneshot::channel::<()>();
    let router = router(&member);
    let listener = match listener {
        PeerServing::Tcp(listener) => listener,
        PeerServing::Simulated(address, network) => {
            network.serve(address, router);
            tokio::spawn(async move {
                let _ = stopped.await;
                network.stop_serving(address);
            });
            return stop;
        }
    };
    let tls = member.config.peer_tls.clone();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        let serving = revkv_tls::serve(
            listener,
            tls.as_ref().map(|tls| tls.server()),
            router,
            shutdown,
        );
        if let Err(error) = serving.await {
            tracing::error!(%error, "peer listener failed");
        }
    });
    stop
}

/// Where the peer server serves: a listener checked against the member's config.
pub(crate) enum PeerServing {
    Tcp(tokio::net::TcpListener),
    Simulated(std::net::SocketAddr, Arc<dyn SimulatedNetwork>),
}

impl PeerServing {
    /// `listener` with the network `config` names: sockets with a TCP listener, a simulated
    /// network with a simulated address. A mix would serve on one network and call on the other.
    pub(crate) fn new(listener: PeerListener, network: &PeerNetwork) -> Result<Self, String> {
        match (listener, network.simulated_network()) {
            (PeerListener::Tcp(listener), None) => Ok(PeerServing::Tcp(listener)),
            (PeerListener::Simulated(address), Some(network)) => {
                Ok(PeerServing::Simulated(address, network.clone()))
            }
            (PeerListener::Tcp(_), Some(_)) => {
                Err("a member on a simulated peer network needs a simulated listener".into())
            }
            (PeerListener::Simulated(_), None) => {
                Err("a simulated peer listener needs a simulated peer network".into())
            }
        }
    }

    /// The address the peer server serves on.
    pub(crate) fn address(&self) -> std::io::Result<std::net::SocketAddr> {
        match self {
            PeerServing::Tcp(listener) => listener.local_addr(),
            PeerServing::Simulated(address, _) => Ok(*address),
        }
    }
}

/// The peer protocol's routes, over `member`.
fn router(member: &Arc<MemberInner>) -> Router {
    let max_body_bytes = member.config.peer_limits.max_body_bytes;
    Router::new()
        .route(paths::APPEND, post(append))
        .route(
            paths::APPEND_STREAM,
            post(super::append_stream_server::accept),
        )
        .route(paths::VOTE, post(vote))
        .route(paths::PRE_VOTE, post(pre_vote))
        .route(paths::SNAPSHOT, post(snapshot))
        .route(paths::TRANSFER_LEADER, post(transfer_leader))
        .route(paths::FORWARD_WRITE, post(forward_write))
        .route(paths::READ_INDEX, post(read_index))
        .route(paths::ADMIN, post(admin))
        .route(paths::LEASE_GRANT, post(lease_grant))
        .route(paths::LEASE_KEEP_ALIVE, post(lease_keep_alive))
        .route(paths::LEASE_TIME_TO_LIVE, post(lease_time_to_live))
        .route(paths::IDENTITY, post(identity))
        .route(paths::KEY_SPACE_HASH, post(key_space_hash))
        .route(paths::MEMBER_REPORT, post(member_report))
        .route(paths::FEATURES, post(features))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(member.clone())
}

/// Decodes the request, runs `handle`, and encodes `Result<Reply, PeerError>` as the body.
async fn serve<Req, Reply, Fut>(body: Bytes, handle: impl FnOnce(Req) -> Fut) -> Response
where
    Req: DeserializeOwned,
    Reply: Serialize,
    Fut: Future<Output = Result<Reply, PeerError>>,
{
    let reply = match codec::decode::<Req>(&body) {
        Ok(request) => handle(request).await,
        Err(error) => Err(PeerError::Refused(format!(
            "undecodable peer request: {error}"
        ))),
    };
    match codec::encode(&reply) {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

fn fatal(error: impl std::fmt::Display) -> PeerError {
    PeerError::Fatal(error.to_string())
}

async fn append(State(member): Shared, body: Bytes) -> Response {
    serve(
        body,
        |request: openraft::raft::AppendEntriesRequest<TypeConfig>| async move {
            let last_index = request.entries.last().map(|entry| entry.log_id.index);
            if let Some(index) = last_index {
                write_path_trace::mark(Stage::Received, index);
            }
            let answer = member.raft.append_entries(request).await;
            if let Ok(answer) = &answer {
                member.leader_contact.answered(answer);
            }
            let answer = answer.map_err(fatal);
            if let Some(index) = last_index {
                write_path_trace::mark(Stage::Answered, index);
            }
            answer
        },
    )
    .await
}

async fn vote(State(member): Shared, body: Bytes) -> Response {
    serve(
        body,
        |request: openraft::raft::VoteRequest<TypeConfig>| async move {
            member.raft.vote(request).await.map_err(fatal)
        },
    )
    .await
}

async fn pre_vote(State(member): Shared, body: Bytes) -> Response {
    serve(
        body,
        |request: openraft::raft::VoteRequest<TypeConfig>| async move {
            member.raft.pre_vote(request).await.map_err(fatal)
        },
    )
    .await
}

/// Streamed to a file, not read into memory (`snapshot_transfer`); the body limit of the other
/// routes does not apply, `PeerLimits::max_snapshot_bytes` does.
async fn snapshot(State(member): Shared, body: axum::body::Body) -> Response {
    crate::peer::snapshot_transfer::receive_snapshot(member, body).await
}

async fn transfer_leader(State(member): Shared, body: Bytes) -> Response {
    serve(
        body,
        |request: openraft::raft::TransferLeaderRequest<TypeConfig>| async move {
            member
                .raft
                .handle_transfer_leader(request)
                .await
                .map_err(fatal)
        },
    )
    .await
}

async fn forward_write(State(member): Shared, body: Bytes) -> Response {
    serve(body, |request: ClientRequest| async move {
        member.write_as_leader(request).await
    })
    .await
}

async fn features(body: Bytes) -> Response {
    serve(body, |(): ()| async move {
        Ok::<_, PeerError>(crate::member_features::features_of_this_build())
    })
    .await
}

async fn read_index(State(member): Shared, body: Bytes) -> Response {
    serve(
        body,
        |(): ()| async move { member.read_index_as_leader().await },
    )
    .await
}

async fn admin(State(member): Shared, body: Bytes) -> Response {
    serve(body, |request: AdminRequest| async move {
        member.admin_as_leader(request).await
    })
    .await
}

async fn lease_grant(State(member): Shared, body: Bytes) -> Response {
    serve(body, |call: LeaseGrantCall| async move {
        member.grant_lease_as_leader(call).await
    })
    .await
}

async fn lease_keep_alive(State(member): Shared, body: Bytes) -> Response {
    serve(body, |id: i64| async move {
        member.keep_lease_alive_as_leader(id).await
    })
    .await
}

async fn lease_time_to_live(State(member): Shared, body: Bytes) -> Response {
    serve(body, |call: LeaseTimeToLiveCall| async move {
        member.lease_time_to_live_as_leader(call).await
    })
    .await
}

async fn identity(State(member): Shared, body: Bytes) -> Response {
    serve(body, |(): ()| async move {
        let initialized = member.raft.is_initialized().await.map_err(fatal)?;
        Ok(PeerIdentity {
            id: member.id,
            node: member.config.advertise.clone(),
            initialized,
        })
    })
    .await
}

async fn member_report(State(member): Shared, body: Bytes) -> Response {
    serve(body, |(): ()| async move {
        member.member_report().map_err(fatal)
    })
    .await
}

async fn key_space_hash(State(member): Shared, body: Bytes) -> Response {
    serve(body, |revision: u64| async move {
        member.key_space_hash(revision).await
    })
    .await
}
