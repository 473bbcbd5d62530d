//! The openraft type configuration and the types that travel through the log.
//!
//! `ClientRequest` wraps the storage crate's `Request` (openraft wants a `Display` impl for log
//! lines), and `WriteResult` is what applying it answers: the revision after the entry, and the
//! response or a deterministic rejection. Log ids convert to and from the storage crate's own
//! `LogId`, which keeps that crate free of openraft.

use std::fmt;

use revkv_storage::{LearnerPromotionChange, Request, Response};
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
            Request::LearnerPromotion(LearnerPromotionChange::Intend(promotion)) => write!(
                formatter,
                "promote learner {} at {} within {} entries",
                promotion.member_id, promotion.peer_url, promotion.max_lag_entries
            ),
            Request::LearnerPromotion(LearnerPromotionChange::Forget { member_id }) => {
                write!(formatter, "forget the promotion of learner {member_id}")
            }
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
    // Appended after the auth variants, for the same reason.
    CorruptCluster,
    // Appended last, for the same reason. An older member that receives it cannot decode the
    // answer; before this variant the same refusals travelled as `Invalid` with their words.
    Malformed(revkv_storage::Malformed),
}

impl Rejection {
    /// The storage layer's rejection, in the form that travels between members. Every storage
    /// rejection has one: applying an entry answers a rejection or a fault, and only a fault stops
    /// the member.
    pub fn from_storage(rejection: &revkv_storage::Rejection) -> Self {
        use revkv_storage::Rejection as Stored;
        match rejection {
            Stored::Invalid(message) => Rejection::Invalid(message.clone()),
            Stored::Malformed(malformed) => Rejection::Malformed(malformed.clone()),
            Stored::TooLarge(message) => Rejection::TooLarge(message.clone()),
            Stored::FutureRevision { requested, current } => Rejection::FutureRevision {
                requested: *requested,
                current: *current,
            },
            Stored::Compacted {
                requested,
                compact_revision,
            } => Rejection::Compacted {
                requested: *requested,
                compact_revision: *compact_revision,
            },
            Stored::LeaseNotFound { id } => Rejection::LeaseNotFound { id: *id },
            Stored::LeaseExists { id } => Rejection::LeaseExists { id: *id },
            Stored::NoSpace => Rejection::NoSpace,
            Stored::AuthRecord(message) => Rejection::AuthRecord(message.clone()),
            Stored::AuthRecordNotFound(message) => Rejection::AuthRecordNotFound(message.clone()),
            Stored::CorruptCluster => Rejection::CorruptCluster,
        }
    }

    /// Back into the storage error, for callers that speak the storage layer's language.
    pub fn into_storage(self) -> revkv_storage::Error {
        use revkv_storage::Error;
        match self {
            Rejection::Invalid(message) => Error::Invalid(message),
            Rejection::Malformed(malformed) => Error::Malformed(malformed),
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
            Rejection::CorruptCluster => Error::CorruptCluster,
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

/// How to reach a member: its peer URL (raft traffic), client URL (the HTTP API) and, when it
/// serves etcd's gRPC API, that listener's URL (what etcd clients find in `MemberList`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "MemberNodeRecord", into = "MemberNodeRecord")]
pub struct MemberNode {
    pub peer_url: String,
    pub client_url: String,
    pub grpc_url: Option<String>,
}

/// How a `MemberNode` is encoded in the log, the state file and peer messages. The record keeps
/// the shape members wrote before the gRPC URL existed (two strings), and the second string holds
/// the client URLs separated by a space: the HTTP URL, then the gRPC URL if there is one (etcd
/// keeps a list of client URLs too). Old records therefore decode as members without gRPC, and an
/// older member that reads a new record sees one odd client URL, not an undecodable entry; so the
/// change needs neither a new format version nor a stopped cluster. A URL never holds a space
/// (`revkv serve` and the membership APIs refuse one).
#[derive(Clone, Serialize, Deserialize)]
struct MemberNodeRecord {
    peer_url: String,
    client_urls: String,
}

impl From<MemberNode> for MemberNodeRecord {
    fn from(node: MemberNode) -> MemberNodeRecord {
        let client_urls = match node.grpc_url {
            Some(grpc_url) => format!("{} {grpc_url}", node.client_url),
            None => node.client_url,
        };
        MemberNodeRecord {
            peer_url: node.peer_url,
            client_urls,
        }
    }
}

impl From<MemberNodeRecord> for MemberNode {
    fn from(record: MemberNodeRecord) -> MemberNode {
        let (client_url, grpc_url) = match record.client_urls.split_once(' ') {
            Some((client_url, grpc_url)) => (client_url.to_string(), Some(grpc_url.to_string())),
            None => (record.client_urls, None),
        };
        MemberNode {
            peer_url: record.peer_url,
            client_url,
            grpc_url,
        }
    }
}

openraft::declare_raft_types!(
    /// revkv's openraft type configuration.
    pub TypeConfig:
        D = ClientRequest,
        R = WriteResult,
        NodeId = u64,
        Node = MemberNode,
        AsyncRuntime = crate::runtime::RevkvRuntime,
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

    /// Every storage rejection travels between members and comes back as the same storage error,
    /// with the same words (a client compares them).
    #[test]
    fn rejections_keep_their_words_across_members() {
        use revkv_storage::{Error, Rejection as Stored};
        let answers = [
            Stored::Invalid("x".into()),
            Stored::TooLarge("x".into()),
            Stored::FutureRevision {
                requested: 2,
                current: 1,
            },
            Stored::Compacted {
                requested: 1,
                compact_revision: 2,
            },
            Stored::LeaseNotFound { id: 1 },
            Stored::LeaseExists { id: 1 },
            Stored::NoSpace,
            Stored::AuthRecord("role r already exists".into()),
            Stored::AuthRecordNotFound("user u does not exist".into()),
            Stored::CorruptCluster,
            Stored::Malformed(revkv_storage::Malformed::EmptyKey),
            Stored::Malformed(revkv_storage::Malformed::TooManyTxnOps {
                branch: revkv_storage::TxnBranch::Failure,
                count: 3,
                limit: 2,
            }),
            Stored::Malformed(revkv_storage::Malformed::DuplicateTxnKey { key: "k".into() }),
        ];
        for answer in answers {
            let text = answer.to_string();
            let travelled = Rejection::from_storage(&answer).into_storage();
            assert_eq!(travelled.to_string(), text);
            assert_eq!(Error::from(answer).to_string(), text);
        }
    }

    /// The record members wrote before the gRPC URL existed.
    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct MemberNodeBeforeGrpc {
        peer_url: String,
        client_url: String,
    }

    #[test]
    fn member_nodes_without_grpc_keep_the_old_encoding() {
        use revkv_storage::codec;
        let old = MemberNodeBeforeGrpc {
            peer_url: "http://127.0.0.1:7101".into(),
            client_url: "http://127.0.0.1:7001".into(),
        };
        let node = MemberNode {
            peer_url: old.peer_url.clone(),
            client_url: old.client_url.clone(),
            grpc_url: None,
        };
        let old_bytes = codec::encode(&old).unwrap();
        assert_eq!(codec::encode(&node).unwrap(), old_bytes);
        assert_eq!(codec::decode::<MemberNode>(&old_bytes).unwrap(), node);
    }

    #[test]
    fn member_nodes_with_grpc_round_trip_and_read_as_one_url_to_old_members() {
        use revkv_storage::codec;
        let node = MemberNode {
            peer_url: "http://127.0.0.1:7101".into(),
            client_url: "http://127.0.0.1:7001".into(),
            grpc_url: Some("http://127.0.0.1:7201".into()),
        };
        let bytes = codec::encode(&node).unwrap();
        assert_eq!(codec::decode::<MemberNode>(&bytes).unwrap(), node);
        let as_old_member_reads_it: MemberNodeBeforeGrpc = codec::decode(&bytes).unwrap();
        assert_eq!(
            as_old_member_reads_it.client_url,
            "http://127.0.0.1:7001 http://127.0.0.1:7201"
        );
    }
}
