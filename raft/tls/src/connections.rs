//! The HTTP connection loop behind every listener of a member (client, peer, gRPC over TLS), with
//! limits against abuse: how many connections are open at once, how many one client address may
//! hold, how long a client may take to send a request's headers (a slowloris client that
//! trickles them is cut off), and how large those headers may be (431 beyond it).
//!
//! axum's own `serve` sets none of these (hyper's header read timeout needs a timer, which it does
//! not configure), so this loop replaces it: it accepts from any axum [`Listener`], serves each
//! connection with hyper's automatic HTTP/1 or HTTP/2 builder, and shuts down gracefully, waiting
//! for open connections at most [`SHUTDOWN_DRAIN_TIMEOUT`].

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::serve::Listener;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

/// How long a stopping listener waits for its open connections (watch streams, say) to finish.
pub const SHUTDOWN_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds on one listener's connections. Each is a flag of `revkv serve` for the client listener
/// (docs/design/tls.md, `connections.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; further clients wait in the kernel's accept backlog.
    pub max_connections: usize,
    /// Connections one client address may hold at once; another is closed at once.
    pub max_connections_per_client: usize,
    /// The longest a connection may wait for the whole head of its next request: a client that
    /// trickles its headers (slowloris) is disconnected, and so is a keep-alive connection left
    /// idle this long (hyper times the head from the moment it starts waiting for one).
    pub header_read_timeout: Duration,
    /// The largest request head (request line and headers) accepted; larger ones get 431.
    pub max_header_bytes: usize,
    /// HTTP/2 streams one connection may have open at once (gRPC calls, each watch or keep-alive
    /// stream one), announced in the server's SETTINGS; a client opens no more until one ends.
    /// etcd's `--max-concurrent-streams`, whose default is 2^32-1: a client that multiplexes
    /// thousands of watch streams over one connection is served. Each stream's cost is bounded
    /// by the member's own limits (`--max-watches`, keep-alive streams, the request timeout).
    pub max_concurrent_streams: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 4096,
            max_connections_per_client: 1024,
            // hyper's own default; long enough that idle keep-alive connections are rarely cut
            // while a client is about to reuse them.
            header_read_timeout: Duration::from_secs(30),
            max_header_bytes: 64 * 1024,
            max_concurrent_streams: u32::MAX,
        }
    }
}

impl ConnectionLimits {
    /// Checks that every bound lets at least one request through.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections_per_client == 0 {
            return Err("connection limits must be at least 1".into());
        }
        if self.max_concurrent_streams == 0 {
            return Err("the concurrent stream limit must be at least 1".into());
        }
        if self.header_read_timeout.is_zero() {
            return Err("the header read timeout must be longer than zero".into());
        }
        // hyper cannot parse a request head in less than its smallest read buffer.
        if self.max_header_bytes < 8192 {
            return Err("the header size limit must be at least 8192 bytes".into());
        }
        Ok(())
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then lets open
/// connections finish (bounded by [`SHUTDOWN_DRAIN_TIMEOUT`]).
pub async fn serve_connections<L>(
    mut listener: L,
    limits: ConnectionLimits,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    L: Listener<Addr = SocketAddr>,
{
    assert!(limits.validate().is_ok(), "invalid limits: {limits:?}");
    let builder = connection_builder(&limits);
    let open_connections = Arc::new(Semaphore::new(limits.max_connections));
    let clients = Arc::new(ClientConnections::new(limits.max_connections_per_client));
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = open_connections.clone().acquire_owned() => {
                permit.expect("the semaphore is never closed")
            }
        };
        let (io, remote) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let Some(client_slot) = ClientConnections::take(&clients, remote.ip()) else {
            tracing::debug!(%remote, "closed a connection: this client holds too many");
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::trace!(%remote, %error, "connection ended with an error");
            }
            drop((permit, client_slot));
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("connections still open after the shutdown drain timeout were dropped");
    }
}

/// hyper's builder for HTTP/1 and HTTP/2 (gRPC) with the limits that apply to a connection.
fn connection_builder(limits: &ConnectionLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // The read buffer bounds the request head (hyper answers 431 when a head does not fit);
        // bodies stream through it in pieces, so it does not bound them.
        .max_buf_size(limits.max_header_bytes);
    let header_list_bytes = u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(header_list_bytes)
        .max_concurrent_streams(limits.max_concurrent_streams)
        // No Date header on HTTP/2 answers. HTTP/2 reaches this server only with prior knowledge
        // (no ALPN, no upgrade), which is how gRPC clients connect; they never read the header,
        // and etcd's grpc-go server sends none. Formatting and encoding it cost every answer a
        // little CPU on both ends. HTTP/1.1 answers (the HTTP API, the console) keep theirs.
        .auto_date_header(false)
        .enable_connect_protocol();
    builder
}

/// How many connections each client address holds, bounded in entries by the connection limit
/// (an address without connections is removed).
struct ClientConnections {
    per_client_limit: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its client; uncounts it when dropped.
struct ClientSlot {
    clients: Arc<ClientConnections>,
    address: IpAddr,
}

impl ClientConnections {
    fn new(per_client_limit: usize) -> Self {
        ClientConnections {
            per_client_limit,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a new connection from `address`, or `None` when it already holds the most allowed.
    fn take(clients: &Arc<ClientConnections>, address: IpAddr) -> Option<ClientSlot> {
        let mut counts = clients.counts.lock().expect("never poisoned");
        let count = counts.entry(address).or_insert(0);
        if *count >= clients.per_client_limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: Arc::clone(clients),
            address,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = self.clients.counts.lock().expect("never poisoned");
        let count = counts
            .get_mut(&self.address)
            .expect("a slot's address is counted until the slot is dropped");
        assert!(*count > 0, "a client's count is at least its live slots");
        *count -= 1;
        if *count == 0 {
            counts.remove(&self.address);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_its_limit_and_frees_slots_when_they_drop() {
        let clients = Arc::new(ClientConnections::new(2));
        let address: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let first = ClientConnections::take(&clients, address).unwrap();
        let _second = ClientConnections::take(&clients, address).unwrap();
        assert!(ClientConnections::take(&clients, address).is_none());
        assert!(ClientConnections::take(&clients, other).is_some());
        drop(first);
        assert!(ClientConnections::take(&clients, address).is_some());
    }

    #[test]
    fn an_address_without_connections_is_forgotten() {
        let clients = Arc::new(ClientConnections::new(1));
        let address: IpAddr = "10.0.0.1".parse().unwrap();
        drop(ClientConnections::take(&clients, address).unwrap());
        assert!(clients.counts.lock().unwrap().is_empty());
    }

    #[test]
    fn limits_that_would_refuse_every_request_are_invalid() {
        let defaults = ConnectionLimits::default();
        assert!(defaults.validate().is_ok());
        for invalid in [
            ConnectionLimits {
                max_connections: 0,
                ..defaults.clone()
            },
            ConnectionLimits {
                max_connections_per_client: 0,
                ..defaults.clone()
            },
            ConnectionLimits {
                header_read_timeout: Duration::ZERO,
                ..defaults.clone()
            },
            ConnectionLimits {
                max_header_bytes: 100,
                ..defaults.clone()
            },
            ConnectionLimits {
                max_concurrent_streams: 0,
                ..defaults.clone()
            },
        ] {
            assert!(invalid.validate().is_err(), "{invalid:?} was accepted");
        }
    }
}
