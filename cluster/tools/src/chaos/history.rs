//! What the workload did, as the checkers read it: every operation with the member it went to,
//! when it was invoked and when it completed (on the harness's clock), and how it ended.
//!
//! Every value the workload writes is a JSON object `{"tag": "o<operation id>"}`, so a value found
//! in the store names the one operation that wrote it. That is what lets the checkers tell a lost
//! write from a phantom one without a search over orderings.

use std::time::Duration;

/// One key-value as the checkers compare it (the key is held beside it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
}

impl Kv {
    /// Reads a `kv` object of the HTTP API.
    pub fn from_json(kv: &serde_json::Value) -> Kv {
        Kv {
            value: kv["value"].as_str().unwrap_or_default().to_string(),
            create_revision: kv["create_revision"].as_u64().unwrap_or(0),
            mod_revision: kv["mod_revision"].as_u64().unwrap_or(0),
            version: kv["version"].as_u64().unwrap_or(0),
        }
    }

    /// The operation that wrote this value, if it is a workload value.
    pub fn writer(&self) -> Option<usize> {
        operation_of_value(&self.value)
    }
}

/// The value operation `id` writes.
pub fn value_of_operation(id: usize) -> String {
    serde_json::json!({ "tag": format!("o{id}") }).to_string()
}

/// The operation a workload value names.
pub fn operation_of_value(value: &str) -> Option<usize> {
    let parsed: serde_json::Value = serde_json::from_str(value).ok()?;
    parsed["tag"].as_str()?.strip_prefix('o')?.parse().ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    Linearizable,
    Serializable,
}

/// What an operation asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `PUT`, with `If-Match` when `if_mod_revision` is set (0: `If-None-Match: *`).
    Put {
        key: String,
        if_mod_revision: Option<u64>,
    },
    /// `DELETE` of one key.
    Delete { key: String },
    /// `GET` of one key.
    Get {
        key: String,
        consistency: Consistency,
    },
    /// `GET /v1/kv?prefix=`, every key under the prefix.
    Range {
        prefix: String,
        consistency: Consistency,
    },
    /// `POST /v1/txn` putting every key, with no compare.
    Txn { keys: Vec<String> },
    /// `PATCH` (server-side guaranteed update, `create=true`) setting the tag.
    Patch { key: String },
    /// `PUT` with `"lease": lease`, attaching the key to the lease (no precondition).
    LeasedPut { key: String, lease: i64 },
    /// `POST /v1/leases` with the harness's own id, so that even a grant whose answer was lost
    /// names the lease it may have made.
    LeaseGrant { lease: i64, ttl_seconds: i64 },
    /// `POST /v1/leases/{lease}/keepalive`.
    LeaseKeepAlive { lease: i64 },
    /// `DELETE /v1/leases/{lease}`: deletes the attached keys at one revision.
    LeaseRevoke { lease: i64 },
}

impl Request {
    /// Whether the operation may change the store (a keep-alive changes only a deadline).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Request::Get { .. } | Request::Range { .. } | Request::LeaseKeepAlive { .. }
        )
    }

    /// Whether a lost answer leaves the operation's effect unknown: every write, and a
    /// keep-alive (it may have renewed the lease).
    pub fn may_change_state(&self) -> bool {
        self.is_write() || matches!(self, Request::LeaseKeepAlive { .. })
    }

    /// A grant, keep-alive or revoke: the lease checker judges these; the key-value checker
    /// leaves them out (their answers carry no key-value, and a revoke's deletes are attributed
    /// by the lease checker).
    pub fn is_lease_operation(&self) -> bool {
        matches!(
            self,
            Request::LeaseGrant { .. }
                | Request::LeaseKeepAlive { .. }
                | Request::LeaseRevoke { .. }
        )
    }

    /// The lease a grant, keep-alive, revoke or leased put names.
    pub fn lease(&self) -> Option<i64> {
        match self {
            Request::LeasedPut { lease, .. }
            | Request::LeaseGrant { lease, .. }
            | Request::LeaseKeepAlive { lease }
            | Request::LeaseRevoke { lease } => Some(*lease),
            _ => None,
        }
    }

    /// Whether the operation is ordered in real time with every other linearizable one.
    pub fn is_linearizable(&self) -> bool {
        match self {
            Request::Get { consistency, .. } | Request::Range { consistency, .. } => {
                *consistency == Consistency::Linearizable
            }
            _ => true,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Request::Put {
                if_mod_revision: Some(_),
                ..
            } => "cas",
            Request::Put { .. } => "put",
            Request::Delete { .. } => "delete",
            Request::Get {
                consistency: Consistency::Linearizable,
                ..
            } => "get",
            Request::Get { .. } => "get-serializable",
            Request::Range {
                consistency: Consistency::Linearizable,
                ..
            } => "range",
            Request::Range { .. } => "range-serializable",
            Request::Txn { .. } => "txn",
            Request::Patch { .. } => "patch",
            Request::LeasedPut { .. } => "lease-put",
            Request::LeaseGrant { .. } => "lease-grant",
            Request::LeaseKeepAlive { .. } => "lease-keepalive",
            Request::LeaseRevoke { .. } => "lease-revoke",
        }
    }
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 200, with the header's revision and what the answer said.
    Ok { revision: u64, answer: Answer },
    /// 409: a precondition failed; `current` is the key-value the member reported (None: absent).
    Conflict { current: Option<Kv> },
    /// 404 on a single-key read (the key was absent), or on a keep-alive or revoke (the lease
    /// was gone: expired, revoked or never granted).
    NotFound,
    /// An answer that says nothing happened (503, 400, 410, a refused connection).
    Failed { reason: String },
    /// A write whose answer was lost (504, a time-out or a connection lost after sending): it may
    /// or may not have happened.
    Unknown { reason: String },
}

/// What a successful answer carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A put, txn or patch.
    Written,
    /// A delete, with how many keys it removed.
    Deleted { deleted: u64 },
    /// A single-key read.
    Value(Kv),
    /// A range read, in key order.
    Range(Vec<(String, Kv)>),
    /// A patch: the key-value after it.
    Patched(Kv),
    /// A lease grant or keep-alive: the TTL granted, in seconds.
    Lease { ttl_seconds: i64 },
    /// A lease revoke (its header revision is the deletes', or the current one without keys).
    Revoked,
}

/// One operation of the history.
#[derive(Clone, Debug)]
pub struct Operation {
    /// Its index in the history, and the tag of every value it writes.
    pub id: usize,
    pub worker: usize,
    /// The member it was sent to.
    pub member: u64,
    pub request: Request,
    /// When it was sent and when its answer arrived, since the run started.
    pub invoked: Duration,
    pub completed: Duration,
    pub outcome: Outcome,
}

impl Operation {
    /// The revision a successful operation reports.
    pub fn revision(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Ok { revision, .. } => Some(revision),
            _ => None,
        }
    }

    /// Whether the operation may have changed the store: a write that succeeded or whose outcome
    /// is unknown.
    pub fn may_have_written(&self) -> bool {
        self.request.is_write()
            && matches!(self.outcome, Outcome::Ok { .. } | Outcome::Unknown { .. })
    }

    /// The outcome's name for the report.
    pub fn outcome_name(&self) -> &'static str {
        match self.outcome {
            Outcome::Ok { .. } => "ok",
            Outcome::Conflict { .. } => "conflict",
            Outcome::NotFound => "not-found",
            Outcome::Failed { .. } => "failed",
            Outcome::Unknown { .. } => "unknown",
        }
    }
}
