//! The openraft type configuration and the types that travel through the log.
//!
//! `ClientRequest` wraps the storage crate's `Request` (openraft wants a `Display` impl for log
//! lines), and `WriteResult` is what applying it answers: the revision after the entry, and the
//! response or a deterministic rejection. Log ids convert to and from the storage crate's own
//! `LogId`, which keeps that crate free of openraft.

use std::fmt;

use revkv_storage::{Request, Response};
use serde::{Deserialize, Serialize};

/// A change proposed to the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRequest(pub Request);

impl fmt::Display for ClientRequest {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        match &self.0 {
            Request::Put(put) => write!(formatter, "put {}", key(&put.key)),
            Request::DeleteRange(delete) => {
                write!(formatter, "delete {}", key(&delete.range.start))
            }
            Request::Txn(txn) => write!(
                formatter,
                "txn ({} compares, {}/{} ops)",
                txn.compare.len(),
                txn.success.len(),
                txn.failure.len()
            ),
            Request::Compact { revision } => write!(formatter, "compact {revision}"),
            Request::LeaseGrant { id, ttl_seconds } => {
                write!(formatter, "lease grant {id} ({ttl_seconds} s)")
            }
            Request::LeaseRevoke { id } => write!(formatter, "lease revoke {id}"),
            Request::LeaseCheckpoint { leases, .. } => {
                write!(formatter, "lease checkpoint of {} leases", leases.len())
            }
            Request::LeaseCheckpointClear { id } => {
                write!(formatter, "lease checkpoint clear {id}")
            }
            Request::Alarm { action, alarm } => write!(
                formatter,
                "alarm {action:?} {} of member {}",
                alarm.kind.name(),
                alarm.member_id
            ),
            // Names only the kind of change: a password hash or token key never reaches a log.
            Request::Auth(change) => write!(formatter, "auth {}", change.kind_name()),
        }
    }
}

/// A deterministic rejection of a request by the store (every member rejects it the same way).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    Invalid(String),
    TooLarge(String),
    FutureRevision {
        requested: u64,
        current: u64,
    },
    Compacted {
        requested: u64,
        compact_revision: u64,
    },
    LeaseNotFound {
        id: i64,
    },
    LeaseExists {
        id: i64,
    },
    NoSpace,
    // Appended after the older variants: forwarded answers of older members still decode.
    AuthRecord(String),
    AuthRecordNotFound(String),
}

impl Rejection {
    /// The rejection a storage error stands for; `None` for faults, which are not answers.
    pub fn from_storage(error: &revkv_storage::Error) -> Option<Self> {
        use revkv_storage::Error;
        Some(match error {
            Error::Invalid(message) => Rejection::Invalid(message.clone()),
            Error::TooLarge(message) => Rejection::TooLarge(message.clone()),
            Error::FutureRevision { requested, current } => Rejection::FutureRevision {
                requested: *requested,
                current: *current,
            },
            Error::Compacted {
                requested,
                compact_revision,
            } => Rejection::Compacted {
                requested: *requested,
                compact_revision: *compact_revision,
            },
            Error::LeaseNotFound { id } => Rejection::LeaseNotFound { id: *id },
            Error::LeaseExists { id } => Rejection::LeaseExists { id: *id },
            Error::NoSpace => Rejection::NoSpace,
            Error::AuthRecord(message) => Rejection::AuthRecord(message.clone()),
            Error::AuthRecordNotFound(message) => Rejection::AuthRecordNotFound(message.clone()),
            // Faults, listed rather than matched by a wildcard: a new storage error must be
            // classified here, or an apply that should have answered a client stops the member
            // (as an auth error did, until schemathesis found it).
            Error::Database { .. }
            | Error::FileIo { .. }
            | Error::ForeignFile { .. }
            | Error::Corrupt { .. }
            | Error::BadSnapshot(_)
            | Error::Busy(_)
            | Error::SnapshotIo(_)
            | Error::Invariant(_) => return None,
        })
    }

    /// Back into the storage error, for callers that speak the storage layer's language.
    pub fn into_storage(self) -> revkv_storage::Error {
        use revkv_storage::Error;
        match self {
            Rejection::Invalid(message) => Error::Invalid(message),
            Rejection::TooLarge(message) => Error::TooLarge(message),
            Rejection::FutureRevision { requested, current } => {
                Error::FutureRevision { requested, current }
            }
            Rejection::Compacted {
                requested,
                compact_revision,
            } => Error::Compacted {
                requested,
                compact_revision,
            },
            Rejection::LeaseNotFound { id } => Error::LeaseNotFound { id },
            Rejection::LeaseExists { id } => Error::LeaseExists { id },
            Rejection::NoSpace => Error::NoSpace,
            Rejection::AuthRecord(message) => Error::AuthRecord(message),
            Rejection::AuthRecordNotFound(message) => Error::AuthRecordNotFound(message),
        }
    }
}

/// What applying one client request answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteResult {
    /// The store revision after the entry was applied.
    pub revision: u64,
    pub outcome: Result<Response, Rejection>,
}

/// How to reach a member: its peer URL (raft traffic) and client URL (the HTTP API).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberNode {
    pub peer_url: String,
    pub client_url: String,
}

openraft::declare_raft_types!(
    /// revkv's openraft type configuration.
    pub TypeConfig:
        D = ClientRequest,
        R = WriteResult,
        NodeId = u64,
        Node = MemberNode,
);

/// Short names for openraft's generic types under this configuration.
pub mod alias {
    use super::TypeConfig;

    pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
    pub type LeaderId = <TypeConfig as openraft::RaftTypeConfig>::LeaderId;
    pub type Vote = <TypeConfig as openraft::RaftTypeConfig>::Vote;
    pub type Entry = <TypeConfig as openraft::RaftTypeConfig>::Entry;
    pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
    pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
    pub type SnapshotData = crate::snapshot_file::SnapshotFile;
    pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
    pub type SnapshotResponse = openraft::raft::SnapshotResponse<TypeConfig>;
    pub type EntryResponder = openraft::storage::EntryResponder<TypeConfig>;
    pub type LogState = openraft::storage::LogState<TypeConfig>;
    pub type IOFlushed = openraft::storage::IOFlushed<TypeConfig>;
}

/// openraft's log id as the storage crate's.
pub fn to_storage_log_id(log_id: &alias::LogId) -> revkv_storage::LogId {
    revkv_storage::LogId {
        term: log_id.leader_id.term,
        node_id: log_id.leader_id.node_id,
        index: log_id.index,
    }
}

/// The storage crate's log id as openraft's.
pub fn from_storage_log_id(log_id: revkv_storage::LogId) -> alias::LogId {
    alias::LogId::new(
        alias::LeaderId {
            term: log_id.term,
            node_id: log_id.node_id,
        },
        log_id.index,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every storage error that answers a request must come back as a rejection, or applying it
    /// would stop the member; only faults may be `None`.
    #[test]
    fn answers_are_rejections_and_faults_are_not() {
        use revkv_storage::Error;
        let answers = [
            Error::Invalid("x".into()),
            Error::TooLarge("x".into()),
            Error::FutureRevision {
                requested: 2,
                current: 1,
            },
            Error::Compacted {
                requested: 1,
                compact_revision: 2,
            },
            Error::LeaseNotFound { id: 1 },
            Error::LeaseExists { id: 1 },
            Error::NoSpace,
            Error::AuthRecord("role r already exists".into()),
            Error::AuthRecordNotFound("user u does not exist".into()),
        ];
        for answer in answers {
            let text = answer.to_string();
            let rejection = Rejection::from_storage(&answer)
                .unwrap_or_else(|| panic!("{text} stops the member"));
            assert_eq!(rejection.into_storage().to_string(), text);
        }
        assert!(Rejection::from_storage(&Error::Invariant("bug".into())).is_none());
    }
}
