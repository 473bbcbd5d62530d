//! The seam a simulated network plugs into, so that members can run in one process without
//! sockets (the deterministic simulator of issue 37).
//!
//! A member speaks to its peers in POSTs of codec-encoded bodies (`client.rs`) and serves them
//! with an axum router (`server.rs`). With [`PeerNetwork::simulated`] in its config, a member
//! hands each call's URL and body to the simulated network instead of reqwest, and hands its
//! router to the network instead of serving it on a socket. Everything else is unchanged: the
//! same requests, the same handlers, the same answers. The network decides when (and whether) a
//! call arrives and its answer comes back; a call the network never answers ends at the caller's
//! timeout, as a lost packet does. Append streams (an HTTP upgrade) are not simulated: a
//! simulated member sends each append as its own POST, which members accept from older peers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use futures::future::BoxFuture;
use tower::ServiceExt;

use super::call_error::CallError;

/// A peer call's answer as the network brings it back: the HTTP status and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimulatedAnswer {
    pub status: u16,
    pub body: Bytes,
}

/// What a simulated network does for one member: carry that member's calls to the others, and
/// take that member's router to serve the calls that come to it. Each member gets its own
/// handle, so the network knows who calls.
pub trait SimulatedNetwork: Send + Sync + 'static {
    /// Carries a POST of `body` to `url` (a peer URL and a path) and resolves to its answer, or
    /// to `CallError::Unreachable` when nobody serves the address. It may also never resolve
    /// (the call or its answer was lost): the caller gives up after `timeout`.
    fn post(
        &self,
        url: String,
        body: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<SimulatedAnswer, CallError>>;

    /// From now on, calls to `address` reach `router` (this member's peer server).
    fn serve(&self, address: SocketAddr, router: Router);

    /// Calls to `address` are refused from now on: the member stopped.
    fn stop_serving(&self, address: SocketAddr);
}

/// How a member reaches its peers: over sockets (the default), or through a simulated network.
#[derive(Clone, Default)]
pub struct PeerNetwork {
    simulated: Option<Arc<dyn SimulatedNetwork>>,
}

impl PeerNetwork {
    /// Through `network` instead of sockets.
    pub fn simulated(network: Arc<dyn SimulatedNetwork>) -> Self {
        PeerNetwork {
            simulated: Some(network),
        }
    }

    /// The simulated network, if this member uses one.
    pub(crate) fn simulated_network(&self) -> Option<&Arc<dyn SimulatedNetwork>> {
        self.simulated.as_ref()
    }
}

impl fmt::Debug for PeerNetwork {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self.simulated {
            Some(_) => "simulated",
            None => "sockets",
        })
    }
}

/// Where a member's peer server listens: a bound socket, or an address of the simulated network
/// (which the member's config must name, [`PeerNetwork::simulated`]).
#[derive(Debug)]
pub enum PeerListener {
    Tcp(tokio::net::TcpListener),
    Simulated(SocketAddr),
}

impl From<tokio::net::TcpListener> for PeerListener {
    fn from(listener: tokio::net::TcpListener) -> Self {
        PeerListener::Tcp(listener)
    }
}

/// The largest answer body [`LoopbackNetwork`] carries back.
const MAX_LOOPBACK_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// The simplest simulated network: every call is delivered at once to the router serving its
/// address, in the caller's task, unless its link is cut, in which case it is lost (the caller's
/// timeout ends it). For in-process clusters without sockets; the simulator's own network adds
/// delays, reordering and duplication on top of the same seam.
#[derive(Default)]
pub struct LoopbackNetwork {
    routers: Mutex<BTreeMap<SocketAddr, Router>>,
    /// Which member serves which address, for the cuts.
    members: Mutex<BTreeMap<SocketAddr, u64>>,
    /// (from, to) member pairs whose calls are lost.
    cut: Mutex<BTreeSet<(u64, u64)>>,
    delivered: AtomicU64,
    lost: AtomicU64,
}

impl LoopbackNetwork {
    /// Member `member`'s handle on the network, for `PeerNetwork::simulated`; its peer server
    /// will be at `address`.
    pub fn link(self: &Arc<Self>, member: u64, address: SocketAddr) -> Arc<dyn SimulatedNetwork> {
        lock(&self.members).insert(address, member);
        Arc::new(LoopbackLink {
            network: self.clone(),
            member,
        })
    }

    /// Cuts every link between `isolated` and the other members, both ways.
    pub fn isolate(&self, isolated: u64) {
        let members: Vec<u64> = lock(&self.members).values().copied().collect();
        let mut cut = lock(&self.cut);
        for other in members.into_iter().filter(|other| *other != isolated) {
            cut.insert((isolated, other));
            cut.insert((other, isolated));
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        lock(&self.cut).clear();
    }

    /// Calls delivered and answered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Calls lost on a cut link so far.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Delivers one call from `from` to `url`.
    async fn deliver(
        &self,
        from: u64,
        url: String,
        body: Bytes,
    ) -> Result<SimulatedAnswer, CallError> {
        let (address, path) = address_and_path(&url)?;
        let to = lock(&self.members).get(&address).copied();
        if to.is_some_and(|to| lock(&self.cut).contains(&(from, to))) {
            self.lost.fetch_add(1, Ordering::Relaxed);
            // Lost on the way: nothing answers, and the caller's timeout ends the call.
            return std::future::pending().await;
        }
        let Some(router) = lock(&self.routers).get(&address).cloned() else {
            return Err(CallError::Unreachable(format!("{url}: nobody serves it")));
        };
        let answer = call_router(router, &path, body, MAX_LOOPBACK_ANSWER_BYTES).await?;
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Ok(answer)
    }
}

/// The peer address a simulated call's URL names (the network's key for the member serving it)
/// and the path it calls.
pub fn address_and_path(url: &str) -> Result<(SocketAddr, String), CallError> {
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|error| CallError::Unreachable(format!("{url}: not a URL: {error}")))?;
    let address: SocketAddr = uri
        .authority()
        .map(|authority| authority.as_str())
        .unwrap_or_default()
        .parse()
        .map_err(|error| CallError::Unreachable(format!("{url}: {error}")))?;
    Ok((address, uri.path().to_owned()))
}

/// Hands one call (a POST of `body` to `path`) to a member's peer router, in the calling task,
/// and reads its whole answer, refusing one over `max_answer_bytes`.
pub async fn call_router(
    router: Router,
    path: &str,
    body: Bytes,
    max_answer_bytes: usize,
) -> Result<SimulatedAnswer, CallError> {
    let request = axum::http::Request::post(path)
        .body(Body::from(body))
        .map_err(|error| CallError::BadAnswer(error.to_string()))?;
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), max_answer_bytes)
        .await
        .map_err(|error| CallError::BadAnswer(error.to_string()))?;
    Ok(SimulatedAnswer { status, body })
}

/// One member's handle on a [`LoopbackNetwork`].
struct LoopbackLink {
    network: Arc<LoopbackNetwork>,
    member: u64,
}

impl SimulatedNetwork for LoopbackLink {
    fn post(
        &self,
        url: String,
        body: Bytes,
        _timeout: Duration,
    ) -> BoxFuture<'static, Result<SimulatedAnswer, CallError>> {
        let network = self.network.clone();
        let from = self.member;
        Box::pin(async move { network.deliver(from, url, body).await })
    }

    fn serve(&self, address: SocketAddr, router: Router) {
        lock(&self.network.routers).insert(address, router);
    }

    fn stop_serving(&self, address: SocketAddr) {
        lock(&self.network.routers).remove(&address);
    }
}

/// The network's maps stay consistent whatever a panicking holder did: each change is one insert
/// or removal.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
