//! The node layer's one error enum. `http::error` turns it into a status code and a JSON body, in
//! one place; nothing else in the crate decides status codes.

use std::time::Duration;

/// Everything that can go wrong serving a client request.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A rejection or fault from the storage layer (invalid, too large, compacted, future revision,
    /// or a file fault).
    #[error(transparent)]
    Storage(#[from] revkv_storage::Error),
    /// A malformed HTTP request (bad parameter, bad JSON, bad percent-encoding or base64).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A body or value over the configured limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A key, lease, member or anything else asked for by name that does not exist.
    #[error("not found: {0}")]
    NotFound(Missing),
    /// A revision precondition failed; `current` is the key-value now (or none). A three-way
    /// merge that found overlapping changes names them in `merge` (boxed, so the error stays
    /// small); other conflicts leave it `None`.
    #[error("conflict: {message}")]
    Conflict {
        message: String,
        current: Option<revkv_storage::KeyValue>,
        merge: Option<Box<crate::three_way_merge::MergeConflict>>,
    },
    /// No leader, member stopping, or not ready; the client should retry after the given time.
    #[error("unavailable: {reason}")]
    Unavailable {
        reason: String,
        retry_after: Duration,
    },
    /// The request could not complete in time; a write's outcome is unknown.
    #[error("timeout: {0}")]
    Timeout(String),
    /// A promote named a learner that has not caught up with the leader (etcd's
    /// `ErrLearnerNotReady`); the same promote succeeds once it has.
    #[error("unavailable: {0}")]
    LearnerNotReady(String),
    /// Auth is enabled and the request carries no valid token (or bad credentials). The message
    /// never says which part of a credential was wrong.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The caller is authenticated but may not do this. The message names no key.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A bug or an unexpected fault inside the member.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a [`NodeError::NotFound`] says is missing. etcd's gRPC API answers a missing lease, member
/// or key each with its own status and text, which clients match on, so the kind travels as a
/// value rather than inside a sentence that the gRPC layer would have to parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Lease(i64),
    Member(u64),
    /// A key a write needed to exist (a put keeping the current value or lease), described for a
    /// reader (`describe_key`).
    Key(String),
    /// Anything else (a watch, an endpoint, a user or role, a key read or patched over HTTP), in
    /// words.
    Other(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Lease(id) => write!(formatter, "lease {id} not found"),
            Missing::Member(id) => write!(formatter, "member {id} does not exist"),
            Missing::Key(described) => write!(formatter, "key {described} not found"),
            Missing::Other(what) => formatter.write_str(what),
        }
    }
}

/// Lets `?` turn each storage operation's own error into `NodeError::Storage`, the storage layer's
/// union, whose variants `http::error` maps to status codes in one place.
macro_rules! storage_errors_into_node_error {
    ($($error:ident),+) => {
        $(
            impl From<revkv_storage::$error> for NodeError {
                fn from(error: revkv_storage::$error) -> Self {
                    NodeError::Storage(error.into())
                }
            }
        )+
    };
}

storage_errors_into_node_error!(
    StorageFailure,
    OpenError,
    AppendError,
    ReadError,
    SnapshotError,
    DefragmentError,
    Rejection
);
