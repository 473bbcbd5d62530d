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

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::Router;
use futures::future::BoxFuture;

use super::client::CallError;

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
