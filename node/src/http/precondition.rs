//! Conditional single-key writes: `If-Match: "<R>"` (write only if the key's mod revision is R),
//! `If-Match: *` (only if the key exists) and `If-None-Match: *` (only if it is absent).
//!
//! A precondition becomes a storage txn, so the check and the write happen at one revision on every
//! member: compare the key; on success run the write; on failure read the key, so the `409 conflict`
//! answer can carry `current` (the key-value now, or null) without a second, racy read.

use axum::http::header::{IF_MATCH, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName};
use revkv_storage::{
    Compare, CompareOp, CompareTarget, KeyRange, RangeRequest, Request, Response, TxnOp,
    TxnOpResponse, TxnRequest,
};

use super::error::ApiError;
use super::keys::{describe_key, TextEncoding};
use super::wire::unexpected_response;
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;

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
    /// The precondition named by the request's headers, if any.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, NodeError> {
        let if_match = single_header(headers, &IF_MATCH)?;
        let if_none_match = single_header(headers, &IF_NONE_MATCH)?;
        match (if_match, if_none_match) {
            (None, None) => Ok(None),
            (Some(value), None) => parse_if_match(value).map(Some),
            (None, Some(value)) => parse_if_none_match(value).map(Some),
            (Some(_), Some(_)) => Err(NodeError::Invalid(
                "give either If-Match or If-None-Match, not both".into(),
            )),
        }
    }

    /// The storage compare that holds exactly when the precondition does.
    fn compare(self, key: &[u8]) -> Compare {
        let (target, op) = match self {
            Precondition::ModRevisionIs(revision) => {
                (CompareTarget::ModRevision(revision), CompareOp::Equal)
            }
            Precondition::Exists => (CompareTarget::CreateRevision(0), CompareOp::Greater),
            Precondition::Absent => (CompareTarget::CreateRevision(0), CompareOp::Equal),
        };
        Compare {
            key: key.to_vec(),
            target,
            op,
        }
    }

    fn conflict_message(self, key: &[u8]) -> String {
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

/// The one value of a header that may appear at most once.
fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a str>, NodeError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(NodeError::Invalid(format!(
            "give at most one {name} header"
        )));
    }
    first
        .to_str()
        .map(|value| Some(value.trim()))
        .map_err(|_| NodeError::Invalid(format!("the {name} header is not visible ASCII")))
}

/// `*`, or one strong entity tag holding a revision; the quotes may be left out.
fn parse_if_match(value: &str) -> Result<Precondition, NodeError> {
    if value == "*" {
        return Ok(Precondition::Exists);
    }
    let unquoted = value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(value);
    unquoted
        .parse::<u64>()
        .map(Precondition::ModRevisionIs)
        .map_err(|_| {
            NodeError::Invalid(format!(
                "If-Match must be one revision from an ETag, such as \"42\", or *; got {value:?}"
            ))
        })
}

/// Only `*` is meaningful for a write: "create, never overwrite".
fn parse_if_none_match(value: &str) -> Result<Precondition, NodeError> {
    if value == "*" {
        return Ok(Precondition::Absent);
    }
    Err(NodeError::Invalid(format!(
        "If-None-Match supports only * (write only if the key is absent); got {value:?}"
    )))
}

/// Writes one put or delete, under a precondition when one is given. A failed precondition is
/// `409 conflict` carrying the key-value now.
pub async fn write_one<B: KvBackend>(
    backend: &B,
    key: &[u8],
    precondition: Option<Precondition>,
    op: TxnOp,
    encoding: TextEncoding,
) -> Result<(ResponseHeader, TxnOpResponse), ApiError> {
    match precondition {
        None => write_unconditionally(backend, op).await,
        Some(precondition) => write_guarded(backend, key, precondition, op, encoding).await,
    }
}

async fn write_unconditionally<B: KvBackend>(
    backend: &B,
    op: TxnOp,
) -> Result<(ResponseHeader, TxnOpResponse), ApiError> {
    let request = match op {
        TxnOp::Put(put) => Request::Put(put),
        TxnOp::DeleteRange(delete) => Request::DeleteRange(delete),
        TxnOp::Get(_) => return Err(NodeError::Internal("a get is not a write".into()).into()),
    };
    let written = backend.write(request).await?;
    let response = match written.response {
        Response::Put(put) => TxnOpResponse::Put(put),
        Response::DeleteRange(delete) => TxnOpResponse::DeleteRange(delete),
        _ => return Err(unexpected_response("single-key write").into()),
    };
    Ok((written.header, response))
}

async fn write_guarded<B: KvBackend>(
    backend: &B,
    key: &[u8],
    precondition: Precondition,
    op: TxnOp,
    encoding: TextEncoding,
) -> Result<(ResponseHeader, TxnOpResponse), ApiError> {
    let txn = TxnRequest {
        compare: vec![precondition.compare(key)],
        success: vec![op],
        failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single(key)))],
    };
    let written = backend.write(Request::Txn(txn)).await?;
    let Response::Txn(answer) = written.response else {
        return Err(unexpected_response("txn").into());
    };
    let first = answer.responses.into_iter().next();
    match (answer.succeeded, first) {
        (true, Some(response)) => Ok((written.header, response)),
        (false, Some(TxnOpResponse::Get(now))) => {
            let conflict = NodeError::Conflict {
                message: precondition.conflict_message(key),
                current: now.kvs.into_iter().next(),
            };
            Err(ApiError::with_encoding(conflict, encoding))
        }
        _ => Err(unexpected_response("guarded write").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_accepts_quoted_and_bare_revisions_and_a_star() {
        assert_eq!(
            parse_if_match("\"42\"").unwrap(),
            Precondition::ModRevisionIs(42)
        );
        assert_eq!(parse_if_match("7").unwrap(), Precondition::ModRevisionIs(7));
        assert_eq!(parse_if_match("*").unwrap(), Precondition::Exists);
    }

    #[test]
    fn weak_lists_and_garbage_are_invalid() {
        for value in ["W/\"1\"", "\"1\", \"2\"", "abc", "\"\"", "-1"] {
            assert!(parse_if_match(value).is_err(), "{value}");
        }
        assert!(parse_if_none_match("\"3\"").is_err());
    }
}
