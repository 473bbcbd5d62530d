//! The write operations every front-end shares, whatever its wire: a single-key put or delete,
//! optionally under a condition on the key (HTTP's `If-Match` / `If-None-Match`; a gRPC front-end
//! would map etcd's single-compare txns here too). This is the server-side API seam: a front-end
//! parses its own request into these types, calls them over any [`KvBackend`], and renders the
//! answer or the [`NodeError`] its own way.
//!
//! A condition becomes a storage txn, so the check and the write happen at one revision on every
//! member: compare the key; on success run the write; on failure read the key, so the conflict
//! error can carry `current` (the key-value now, or none) without a second, racy read.

use revkv_storage::{
    Compare, CompareOp, CompareTarget, KeyRange, KeyValue, PutRequest, PutResponse, RangeRequest,
    Request, Response, TxnOp, TxnOpResponse, TxnRequest,
};

use crate::backend::{KvBackend, ReadConsistency, ResponseHeader};
use crate::error::{Missing, NodeError};

/// What must hold of a key for a conditional write to go ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// `If-Match: "<R>"`: the key's mod revision is R.
    ModRevisionIs(u64),
    /// `If-Match: *`: the key exists.
    Exists,
    /// `If-None-Match: *`: the key does not exist.
    Absent,
}

impl Precondition {
    /// The storage compare that holds exactly when the precondition does.
    pub fn compare(self, key: &[u8]) -> Compare {
        let (target, op) = match self {
            Precondition::ModRevisionIs(revision) => {
                (CompareTarget::ModRevision(revision), CompareOp::Equal)
            }
            Precondition::Exists => (CompareTarget::CreateRevision(0), CompareOp::Greater),
            Precondition::Absent => (CompareTarget::CreateRevision(0), CompareOp::Equal),
        };
        Compare {
            key: key.to_vec(),
            range_end: revkv_storage::RangeEnd::Single,
            target,
            op,
        }
    }

    pub fn conflict_message(self, key: &[u8]) -> String {
        let key = describe_key(key);
        match self {
            Precondition::ModRevisionIs(revision) => {
                format!("If-Match failed: the mod_revision of key {key} is not {revision}")
            }
            Precondition::Exists => format!("If-Match failed: key {key} does not exist"),
            Precondition::Absent => format!("If-None-Match failed: key {key} already exists"),
        }
    }
}

/// A key as printable text for error messages: non-printable bytes are escaped, never lost.
pub fn describe_key(key: &[u8]) -> String {
    format!("\"{}\"", key.escape_ascii())
}

/// Writes one put or delete, under a precondition when one is given. A failed precondition is
/// `NodeError::Conflict` carrying the key-value now.
pub async fn write_one<B: KvBackend>(
    backend: &B,
    key: &[u8],
    precondition: Option<Precondition>,
    op: TxnOp,
) -> Result<(ResponseHeader, TxnOpResponse), NodeError> {
    match precondition {
        None => write_unconditionally(backend, op).await,
        Some(precondition) => write_guarded(backend, key, precondition, op).await,
    }
}

async fn write_unconditionally<B: KvBackend>(
    backend: &B,
    op: TxnOp,
) -> Result<(ResponseHeader, TxnOpResponse), NodeError> {
    let request = match op {
        TxnOp::Put(put) => Request::Put(put),
        TxnOp::DeleteRange(delete) => Request::DeleteRange(delete),
        TxnOp::Get(_) | TxnOp::Txn(_) | TxnOp::PutKeeping { .. } => {
            return Err(NodeError::Internal("not a single-key write".into()))
        }
    };
    let written = backend.write(request).await?;
    let response = match written.response {
        Response::Put(put) => TxnOpResponse::Put(put),
        Response::DeleteRange(delete) => TxnOpResponse::DeleteRange(delete),
        _ => return Err(unexpected_response("single-key write")),
    };
    Ok((written.header, response))
}

async fn write_guarded<B: KvBackend>(
    backend: &B,
    key: &[u8],
    precondition: Precondition,
    op: TxnOp,
) -> Result<(ResponseHeader, TxnOpResponse), NodeError> {
    let txn = TxnRequest {
        compare: vec![precondition.compare(key)],
        success: vec![op],
        failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single(key)))],
    };
    let written = backend.write(Request::Txn(txn)).await?;
    let Response::Txn(answer) = written.response else {
        return Err(unexpected_response("txn"));
    };
    let first = answer.responses.into_iter().next();
    match (answer.succeeded, first) {
        (true, Some(response)) => Ok((written.header, response)),
        (false, Some(TxnOpResponse::Get(now))) => Err(NodeError::Conflict {
            message: precondition.conflict_message(key),
            current: now.kvs.into_iter().next(),
            merge: None,
        }),
        _ => Err(unexpected_response("guarded write")),
    }
}

/// How a compare-and-swap ended.
#[derive(Debug)]
pub enum SwapOutcome {
    /// The value was written; `kv` is the key as it is now.
    Swapped {
        header: ResponseHeader,
        kv: KeyValue,
    },
    /// The key was no longer as read; this is the key-value now (or none).
    Lost(Option<KeyValue>),
}

/// Puts `value` on `key` only if the key is still exactly as read (`read`: same mod revision, or
/// still absent), keeping its lease. The shared final write of every read-change-write loop
/// (PATCH's guaranteed update, the three-way merge).
pub async fn compare_and_swap<B: KvBackend>(
    backend: &B,
    key: &[u8],
    read: Option<&KeyValue>,
    value: Vec<u8>,
) -> Result<SwapOutcome, NodeError> {
    let lease = read.map_or(0, |kv| kv.lease);
    let txn = TxnRequest {
        compare: vec![unchanged_since_read(key, read)],
        success: vec![TxnOp::Put(PutRequest {
            key: key.to_vec(),
            value: value.clone(),
            lease,
            prev_kv: false,
        })],
        failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single(key)))],
    };
    let written = backend.write(Request::Txn(txn)).await?;
    let Response::Txn(answer) = written.response else {
        return Err(unexpected_response("txn"));
    };
    if !answer.succeeded {
        return match answer.responses.into_iter().next() {
            Some(TxnOpResponse::Get(range)) => Ok(SwapOutcome::Lost(range.kvs.into_iter().next())),
            _ => Err(unexpected_response("compare-and-swap")),
        };
    }
    let revision = written.header.revision;
    let kv = KeyValue {
        key: key.to_vec(),
        value,
        create_revision: read.map_or(revision, |kv| kv.create_revision),
        mod_revision: revision,
        version: read.map_or(1, |kv| kv.version + 1),
        lease,
    };
    Ok(SwapOutcome::Swapped {
        header: written.header,
        kv,
    })
}

/// The compare that holds while the key is exactly as read.
fn unchanged_since_read(key: &[u8], read: Option<&KeyValue>) -> Compare {
    let target = match read {
        Some(kv) => CompareTarget::ModRevision(kv.mod_revision),
        None => CompareTarget::CreateRevision(0),
    };
    Compare {
        key: key.to_vec(),
        range_end: revkv_storage::RangeEnd::Single,
        target,
        op: CompareOp::Equal,
    }
}

/// The fault of a backend that answered a request with a response of another kind.
pub fn unexpected_response(request_kind: &str) -> NodeError {
    NodeError::Internal(format!(
        "the backend answered a {request_kind} request with a response of another kind"
    ))
}

/// What a put takes from the key as it is now instead of from the request (etcd's `ignore_value`
/// and `ignore_lease`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepCurrent {
    pub value: bool,
    pub lease: bool,
}

/// How often `put_keeping_current` retries when another write changes the key between its read
/// and its write, before answering `Conflict`.
pub const MAX_KEEP_CURRENT_ATTEMPTS: usize = 16;

/// Puts `put` with the key's current value and/or lease in place of the request's: a
/// compare-then-put txn at the key's mod revision, so the put never mixes two versions of the
/// key. When the key changed in between, the failure branch's read is the new current state and
/// the put is tried again (bounded). A key that does not exist is `NotFound` ("key ... not found").
pub async fn put_keeping_current<B: KvBackend>(
    backend: &B,
    put: PutRequest,
    keep: KeepCurrent,
) -> Result<(ResponseHeader, PutResponse), NodeError> {
    let read = RangeRequest::of(KeyRange::single(put.key.clone()));
    let answer = backend.read(read, ReadConsistency::Linearizable).await?;
    let mut current = answer.response.kvs.into_iter().next();
    for _ in 0..MAX_KEEP_CURRENT_ATTEMPTS {
        let Some(now) = current.take() else {
            return Err(NodeError::NotFound(Missing::Key(describe_key(&put.key))));
        };
        let mut attempt = put.clone();
        if keep.value {
            attempt.value = now.value.clone();
        }
        if keep.lease {
            attempt.lease = now.lease;
        }
        match write_guarded(
            backend,
            &put.key,
            Precondition::ModRevisionIs(now.mod_revision),
            TxnOp::Put(attempt),
        )
        .await
        {
            Ok((header, TxnOpResponse::Put(response))) => return Ok((header, response)),
            Ok(_) => return Err(unexpected_response("put")),
            Err(NodeError::Conflict {
                current: latest, ..
            }) => current = latest,
            Err(error) => return Err(error),
        }
    }
    Err(NodeError::Conflict {
        message: format!(
            "key {} changed on each of {MAX_KEEP_CURRENT_ATTEMPTS} attempts to keep its current value or lease",
            describe_key(&put.key)
        ),
        current: None,
        merge: None,
    })
}
