//! The raft layer's one error enum, converted by the node layer into HTTP answers.

/// Why a member operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// No leader is known, or the leader cannot be reached; retrying later may succeed.
    #[error("no leader available: {0}")]
    NoLeader(String),
    /// The operation did not finish in time; for a write, its outcome is unknown.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The member is shutting down or has stopped.
    #[error("member is stopping: {0}")]
    Stopping(String),
    /// A membership or leadership change was refused (for example, an unknown member, or another
    /// change still in progress).
    #[error("refused: {0}")]
    Refused(String),
    /// A member id that is not part of the cluster.
    #[error("no member with id {0}")]
    UnknownMember(u64),
    /// A keep-alive or time-to-live named a lease that does not exist (or has expired).
    #[error("lease {0} not found")]
    LeaseNotFound(i64),
    /// A promote named a learner that has not caught up with the leader (etcd's
    /// `ErrLearnerNotReady`); retrying once it has caught up succeeds.
    #[error("learner not ready: {0}")]
    LearnerNotReady(String),
    /// A fault of the storage layer on this member.
    #[error(transparent)]
    Storage(#[from] revkv_storage::Error),
    /// Starting the member failed (files, listener, raft configuration).
    #[error("cannot start member: {0}")]
    Startup(String),
}

/// Lets `?` turn each storage operation's own error into `$target::Storage`, the storage layer's
/// union (as redb's errors convert into `redb::Error`).
macro_rules! storage_errors_into {
    ($target:ident) => {
        $crate::error::storage_errors_into!(
            $target: StorageFailure, OpenError, AppendError, ReadError, SnapshotError,
            DefragmentError, Rejection
        );
    };
    ($target:ident: $($error:ident),+) => {
        $(
            impl From<revkv_storage::$error> for $target {
                fn from(error: revkv_storage::$error) -> Self {
                    $target::Storage(error.into())
                }
            }
        )+
    };
}
pub(crate) use storage_errors_into;

storage_errors_into!(MemberError);
