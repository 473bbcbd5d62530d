//! Why `revkv follow-etcd` stopped: its one error enum, in its own module so that the parts of
//! the follow (`leases.rs`, `replay.rs`) and the command (`mod.rs`) share it without importing
//! each other.

use crate::etcd_api::EtcdError;

/// Why the follow stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// A call to etcd's gRPC API (on etcd or on revkv) failed: what was being done, and why.
    #[error("{0}: {1}")]
    Etcd(&'static str, EtcdError),
    #[error("{0}")]
    Diverged(String),
    #[error("{0}")]
    Refused(String),
}

impl FollowError {
    /// A failed call's status as the error of `what`, for `map_err`.
    pub fn call(what: &'static str) -> impl FnOnce(tonic::Status) -> FollowError {
        move |status| FollowError::Etcd(what, EtcdError::Status(status))
    }
}
