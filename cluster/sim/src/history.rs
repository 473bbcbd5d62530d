//! What the clients did and what they were told, as plain data the checkers read: each
//! operation with the simulated times it was invoked and answered, and each watch's messages.

use std::time::Duration;

/// A client request, on one key. Every value a client writes is unique in the run, so the
/// checker can tell which request wrote what it finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    Put {
        key: String,
        value: String,
    },
    Delete {
        key: String,
    },
    /// Writes `value` if the key's mod revision is `expected_mod_revision` (0: the key is
    /// absent), as Kubernetes' update with a resourceVersion does.
    CompareAndSwap {
        key: String,
        expected_mod_revision: u64,
        value: String,
    },
    /// A linearizable read.
    Get {
        key: String,
    },
    /// A serializable read: the member's own state, possibly stale, never going backwards.
    SerializableGet {
        key: String,
    },
}

impl Operation {
    pub fn key(&self) -> &str {
        match self {
            Operation::Put { key, .. }
            | Operation::Delete { key }
            | Operation::CompareAndSwap { key, .. }
            | Operation::Get { key }
            | Operation::SerializableGet { key } => key,
        }
    }

    /// The value this operation writes if it takes effect.
    pub fn written_value(&self) -> Option<&str> {
        match self {
            Operation::Put { value, .. } | Operation::CompareAndSwap { value, .. } => Some(value),
            Operation::Delete { .. }
            | Operation::Get { .. }
            | Operation::SerializableGet { .. } => None,
        }
    }
}

/// A key's value as an answer or the history shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub value: String,
    pub mod_revision: u64,
}

/// What the client was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A put, a delete that deleted the key, or a compare-and-swap that succeeded: the change
    /// took effect at `revision`.
    Changed { revision: u64 },
    /// A read, a delete of an absent key, or a compare-and-swap whose compare failed: the store
    /// as of `revision`, where the key held `value`.
    Observed {
        revision: u64,
        value: Option<Observed>,
    },
    /// An error or a timeout: the change may or may not have taken effect (for a read, nothing
    /// is known and the checker ignores it).
    Unknown,
}

/// One operation from invocation to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub client: u64,
    /// The member the request was sent to.
    pub member: u64,
    pub operation: Operation,
    pub invoked_at: Duration,
    /// `None` while no answer came (an `Unknown` outcome still has its time).
    pub answered_at: Option<Duration>,
    pub outcome: Outcome,
}

/// One version of a key as the store's history shows it after the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub revision: u64,
    /// `None` for a tombstone.
    pub value: Option<String>,
}

/// What one watch received, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchRecord {
    pub member: u64,
    pub prefix: String,
    pub start_revision: u64,
    pub messages: Vec<WatchReceived>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchReceived {
    /// One revision's event: the key and its new value (`None`: deleted).
    Event {
        revision: u64,
        key: String,
        value: Option<String>,
    },
    Bookmark {
        revision: u64,
    },
}

/// What a lease client did and saw, in order, for the lease check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent {
    /// A grant or a keep-alive sent at `sent_at` was acknowledged with `ttl`: the leader renewed
    /// the lease after the request was sent, so it lives at least until `sent_at + ttl`.
    Renewed {
        lease: i64,
        sent_at: Duration,
        ttl: Duration,
    },
    /// A put of `key` with the lease attached was acknowledged.
    Attached { lease: i64, key: String },
    /// A keep-alive answered at `answered_at` that the lease is not found: it has ended, and
    /// (as in etcd) its keys are already deleted.
    NotFound {
        lease: i64,
        sent_at: Duration,
        answered_at: Duration,
    },
    /// A linearizable read of attached `key`, sent after the put was acknowledged. Only the
    /// lease deletes those keys, so finding nothing means the lease has ended.
    KeyRead {
        lease: i64,
        key: String,
        invoked_at: Duration,
        answered_at: Duration,
        revision: u64,
        present: bool,
    },
    /// The client sent a revoke at `sent_at`: from then on the lease may end at any moment.
    RevokeSent { lease: i64, sent_at: Duration },
    /// That revoke was acknowledged: every attached key must be gone.
    Revoked { lease: i64 },
}

/// A clock fault: member `member`'s clock moved `by` ahead at `at` (the run's simulated time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockJump {
    pub member: u64,
    pub at: Duration,
    pub by: Duration,
}
