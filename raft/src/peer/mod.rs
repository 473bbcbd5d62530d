//! The peer protocol: how members talk to each other on the peer listener.
//!
//! Every call is one HTTP POST whose body is a codec record (bincode, with the format-version byte)
//! and whose answer is a codec record of `Result<Reply, PeerError>`; openraft's appends go over a
//! long-lived upgraded connection instead, one frame per call (`append_stream.rs`), falling back
//! to the POST against a member without it. Besides openraft's own RPCs
//! (append, vote, full snapshot, transfer leader) there are the calls a follower needs from the
//! leader: forward a client write, get a read index, run a membership change, and the lease calls
//! only the leader can answer (grant, which picks the id; keep-alive and time-to-live, which read
//! the leader's deadlines). Any member also answers `/raft/key-space-hash`, its hash of the
//! history at a revision, which the consistency check compares (`key_space_hashes.rs`).

pub(crate) mod append_stream;
pub(crate) mod append_stream_server;
pub mod append_timeout;
pub(crate) mod call_error;
pub mod client;
pub mod failure_log;
pub mod faults;
pub mod server;
pub mod simulated;
pub mod snapshot_transfer;

use serde::{Deserialize, Serialize};

use crate::types::MemberNode;

/// The peer listener's paths.
pub mod paths {
    pub const APPEND: &str = "/raft/append";
    /// AppendEntries over one upgraded connection (`append_stream.rs`).
    pub const APPEND_STREAM: &str = "/raft/append-stream";
    pub const VOTE: &str = "/raft/vote";
    /// Would you vote for me? Answered without changing the asked member's term or vote.
    pub const PRE_VOTE: &str = "/raft/pre-vote";
    pub const SNAPSHOT: &str = "/raft/snapshot";
    pub const TRANSFER_LEADER: &str = "/raft/transfer-leader";
    pub const FORWARD_WRITE: &str = "/raft/forward-write";
    pub const READ_INDEX: &str = "/raft/read-index";
    pub const ADMIN: &str = "/raft/admin";
    pub const LEASE_GRANT: &str = "/raft/lease/grant";
    pub const LEASE_KEEP_ALIVE: &str = "/raft/lease/keep-alive";
    pub const LEASE_TIME_TO_LIVE: &str = "/raft/lease/time-to-live";
    pub const IDENTITY: &str = "/raft/identity";
    /// A member's hash of its history at a revision (the consistency check).
    pub const KEY_SPACE_HASH: &str = "/raft/key-space-hash";
    /// A member's report of itself (the cluster-wide status).
    pub const MEMBER_REPORT: &str = "/raft/member-report";
    /// The features of a member's build (`member_features.rs`); 404 on builds older than it.
    pub const FEATURES: &str = "/raft/features";
}

/// A member's answer to "your hash of the history at revision R" (etcd's HashKV between peers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeySpaceHashAnswer {
    /// The hash of every history entry at or below R that compaction keeps, and the compact
    /// revision it was taken under (hashes compare only under equal compact revisions).
    Hashed { hash: u64, compact_revision: u64 },
    /// R is at or below this member's compact revision: its history at R is gone.
    Compacted { compact_revision: u64 },
    /// This member had not applied R within its wait.
    Behind { applied_revision: u64 },
}

/// What a member says about itself over the peer port: how a member is added by its peer URL
/// alone (etcd's `MemberAdd`), since revkv members choose their own ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerIdentity {
    pub id: u64,
    /// The addresses it advertises.
    pub node: MemberNode,
    /// True once it belongs to a cluster (founded one, restarted with data, or was added).
    pub initialized: bool,
}

/// Why a peer call was refused by the member that received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum PeerError {
    /// The receiver is not the leader; it names the leader it knows of, if any.
    #[error("not the leader (known leader: {leader:?})")]
    NotLeader { leader: Option<(u64, MemberNode)> },
    /// The receiver cannot serve the call now (shutting down, no quorum).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The call itself was malformed or refused (for example an invalid membership change).
    #[error("refused: {0}")]
    Refused(String),
    /// A membership change named a member that is not in the cluster.
    #[error("no member with id {0}")]
    UnknownMember(u64),
    /// A write was accepted but its entry was discarded when leadership changed; it may or may
    /// not have been applied.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The receiver hit an unrecoverable error.
    #[error("fatal: {0}")]
    Fatal(String),
    /// A keep-alive or time-to-live named a lease the leader does not hold (never granted,
    /// revoked, or expired).
    #[error("lease {0} not found")]
    LeaseNotFound(i64),
    /// A promote named a learner whose log is not yet within the leader's bound, or which has not
    /// answered lately (etcd's `ErrLearnerNotReady`); the text says which.
    #[error("learner not ready: {0}")]
    LearnerNotReady(String),
}

/// A lease grant as the leader runs it: the id the client chose, if any, and the TTL it asked for
/// (raised to the minimum TTL by the leader).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantCall {
    pub id: Option<i64>,
    pub ttl_seconds: i64,
}

/// A time-to-live query, run on the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimeToLiveCall {
    pub id: i64,
    pub with_keys: bool,
}

/// The leader's answer to a time-to-live query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimeToLive {
    pub id: i64,
    pub granted_ttl_seconds: i64,
    /// Whole seconds left before the leader expires it, rounded up.
    pub remaining_ttl_seconds: i64,
    /// The attached keys, when asked for.
    pub keys: Vec<Vec<u8>>,
}

/// The leader's answer to a forwarded write: the result and the log index it was applied at, so
/// the forwarding member can wait until it has applied that far itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedWrite {
    pub log_index: u64,
    pub result: crate::types::WriteResult,
}

/// A membership or leadership change, run on the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    AddLearner {
        id: u64,
        node: MemberNode,
    },
    Promote {
        id: u64,
    },
    Remove {
        id: u64,
    },
    TransferLeader {
        to: u64,
    },
    /// Replaces a member's addresses (used to publish a founding member's client URL, which the
    /// identical bootstrap membership leaves empty).
    UpdateNode {
        id: u64,
        node: MemberNode,
    },
    // Appended after the older variants: a peer message's variant travels as its position.
    /// Adds a learner to be promoted by the leader once its log is at most `max_lag_entries`
    /// behind (`None`: the leader's `LearnerPromotionSettings::default_max_lag_entries`;
    /// `learner_promotion.rs`); answers once the learner is in the membership, without waiting
    /// for it to catch up.
    AddLearnerToPromote {
        id: u64,
        node: MemberNode,
        max_lag_entries: Option<u64>,
    },
}
