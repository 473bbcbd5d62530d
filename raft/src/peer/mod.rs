//! The peer protocol: how members talk to each other on the peer listener.
//!
//! Every call is one HTTP POST whose body is a codec record (bincode, with the format-version byte)
//! and whose answer is a codec record of `Result<Reply, PeerError>`. Besides openraft's own RPCs
//! (append, vote, full snapshot, transfer leader) there are the calls a follower needs from the
//! leader: forward a client write, get a read index, and run a membership change.

pub mod client;
pub mod server;

use serde::{Deserialize, Serialize};

use crate::types::MemberNode;

/// The peer listener's paths.
pub mod paths {
    pub const APPEND: &str = "/raft/append";
    pub const VOTE: &str = "/raft/vote";
    pub const SNAPSHOT: &str = "/raft/snapshot";
    pub const TRANSFER_LEADER: &str = "/raft/transfer-leader";
    pub const FORWARD_WRITE: &str = "/raft/forward-write";
    pub const READ_INDEX: &str = "/raft/read-index";
    pub const ADMIN: &str = "/raft/admin";
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
}
