//! Why `revkv follow-etcd` stopped: its one error enum, in its own module so that the parts of
//! the follow (`leases.rs`, `replay.rs`) and the command (`mod.rs`) share it without importing
//! each other.

/// Why the follow stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("{0}: {1}")]
    Etcd(&'static str, etcd_client::Error),
    #[error("{0}")]
    Diverged(String),
    #[error("{0}")]
    Refused(String),
}
