//! What can go wrong speaking to etcd's gRPC API, in its own module so that the connection
//! (`mod.rs`) and every caller (`follow_etcd`, the bench's gRPC drivers, the etcd harness) share
//! one type without importing each other.
//!
//! The texts are the ones the tools printed while they spoke through the `etcd-client` crate
//! ("grpc request error: status: ...", "lease keep alive error: lease not found"), so that
//! messages users and scripts know keep their words.

/// Why a call to etcd's gRPC API, or opening a connection to it, failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The endpoints or credentials given cannot be used (none at all, an `https://` URL).
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// An endpoint that is not a URL.
    #[error("invalid uri: {0}")]
    InvalidUri(String),
    /// The server's (or the channel's) answer to a call: its gRPC status.
    #[error("grpc request error: {0}")]
    Status(#[from] tonic::Status),
    /// A Watch stream that could not take another request.
    #[error("watch error: {0}")]
    Watch(String),
    /// A LeaseKeepAlive stream that could not take another request, or refused the lease.
    #[error("lease keep alive error: {0}")]
    LeaseKeepAlive(String),
    /// An auth token that cannot be sent as a gRPC metadata value.
    #[error("invalid metadata value: {0}")]
    InvalidMetadataValue(#[from] tonic::metadata::errors::InvalidMetadataValue),
    /// The channel stopped taking endpoints before it was connected.
    #[error("internal error: {0}")]
    Internal(String),
}
