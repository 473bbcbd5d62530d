//! A TLS listener for axum: TCP connections are accepted and their handshakes run concurrently,
//! each bounded in time, and only finished handshakes reach the HTTP server. A client that
//! speaks plain HTTP, offers no certificate where one is required, or presents one from another
//! CA is dropped at the handshake and never reaches a handler.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::ServerTls;
use crate::connections::{serve_connections, ConnectionLimits};

/// The longest a client may take to finish its handshake; a client that stalls (or sends
/// nothing) is cut off then, so it holds no handshake slot for longer.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once, at most; further connections wait in the kernel's backlog.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Finished handshakes waiting for the HTTP server to take them.
const READY_QUEUE: usize = 64;

/// How long to wait after a failed `accept` (out of file descriptors, say) before the next.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A listener whose connections have finished a TLS handshake. Dropping it stops accepting and
/// closes the port.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_address: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `listener` with `tls`.
    pub fn new(listener: TcpListener, tls: &ServerTls) -> io::Result<TlsListener> {
        let local_address = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(tls.rustls_config());
        tokio::spawn(accept_loop(listener, acceptor, sender));
        Ok(TlsListener {
            ready,
            local_address,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends once this receiver is gone, so it cannot end first.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_address)
    }
}

/// Accepts connections and hands each to its own handshake task, until the listener is dropped.
async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let slots = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        let slot = tokio::select! {
            _ = ready.closed() => return,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let accepted = tokio::select! {
            _ = ready.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a TLS connection failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::info!(%peer, %error, "TLS handshake refused"),
                Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Serves `router` on `listener` until `shutdown` completes, with the default
/// [`ConnectionLimits`]: over TLS when `tls` is given, plain HTTP otherwise.
pub async fn serve(
    listener: TcpListener,
    tls: Option<&ServerTls>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with_limits(listener, tls, ConnectionLimits::default(), router, shutdown).await
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes: over TLS when `tls`
/// is given, plain HTTP otherwise. Plain connections get `TCP_NODELAY` as TLS ones do, so a small
/// answer is not held back waiting for the client's acknowledgement.
pub async fn serve_with_limits(
    listener: TcpListener,
    tls: Option<&ServerTls>,
    limits: ConnectionLimits,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    match tls {
        Some(tls) => {
            let listener = TlsListener::new(listener, tls)?;
            serve_connections(listener, limits, router, shutdown).await;
        }
        None => {
            let listener = listener.tap_io(|stream| {
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "could not set TCP_NODELAY on a client connection");
                }
            });
            serve_connections(listener, limits, router, shutdown).await;
        }
    }
    Ok(())
}
