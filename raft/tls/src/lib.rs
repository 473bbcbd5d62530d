//! TLS for revkv's two listeners, with rustls (ring provider).
//!
//! - [`TlsFiles`]: where a listener's certificate, key and trusted CA are, and whether it requires
//!   client certificates: etcd's `--cert-file`, `--key-file`, `--trusted-ca-file`,
//!   `--client-cert-auth`, or their `--peer-` twins.
//! - [`ServerTls`]: a listener's rustls configuration; [`PeerTls`]: the peer listener's, plus the
//!   client configuration a member uses to call its peers (mutual TLS, both ways against the
//!   peer CA).
//! - [`TlsListener`] and [`serve`]: an axum router served over TLS (or plain TCP when no TLS is
//!   configured), with bounded handshakes.
//! - Certificates, keys and CAs are reloaded when their files change: every handshake looks at the
//!   files' modification time, size and inode (`watched`), so rotation needs no restart. A file
//!   that does not load (half written, key and certificate not matching) leaves the previous one
//!   in use, with a warning.
//! - `testing` (feature `test-certificates`): throw-away CAs and member certificates for tests.

mod config;
mod connections;
mod error;
mod listener;
mod pem;
mod reloading;
#[cfg(feature = "test-certificates")]
pub mod testing;
mod watched;

pub use config::{PeerTls, ServerTls, TlsFiles};
pub use connections::{ConnectionLimits, SHUTDOWN_DRAIN_TIMEOUT};
pub use error::TlsError;
pub use listener::{
    serve, serve_with_limits, TlsListener, HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES,
};
pub use rustls;

/// The cryptography every revkv TLS configuration uses. Named explicitly rather than taken from
/// the process default, so a dependency that links another provider cannot change it.
pub fn crypto_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}
