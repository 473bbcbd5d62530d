//! The one place that decides HTTP status codes and error bodies (contract section 3).
//!
//! Every failure reaches the client as `{"error": {"code", "message"}, ...extra}`:
//!
//! | `NodeError` | status | code | extra |
//! |---|---|---|---|
//! | `Invalid`, storage `Invalid`, `Malformed` and `LeaseExists` | 400 | `invalid` | |
//! | storage `FutureRevision` | 400 | `future_revision` | |
//! | `NotFound`, storage `LeaseNotFound` | 404 | `not_found` | |
//! | `Conflict` | 409 | `conflict` | `current`: the kv now, or null; `conflicting_fields` after a three-way merge |
//! | storage `Compacted` | 410 | `compacted` | `compact_revision` |
//! | `TooLarge`, storage `TooLarge` | 413 | `too_large` | |
//! | storage `NoSpace` | 507 | `no_space` | |
//! | storage `CorruptCluster` | 500 | `corrupt` | |
//! | `Unavailable` | 503 | `unavailable` | `Retry-After` header, whole seconds, at least 1 |
//! | `LearnerNotReady` | 503 | `unavailable` | `Retry-After: 1` |
//! | storage `Busy` | 503 | `unavailable` | |
//! | `Timeout` | 504 | `timeout` | |
//! | `Internal`, storage faults | 500 | `internal` | |
//!
//! Storage faults (file, corruption, snapshot, invariant) are logged here with their full text,
//! because they mean the member itself is in trouble rather than the request.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use revkv_storage::Error as StorageError;
use serde_json::{json, Map, Value};

use super::keys::TextEncoding;
use super::wire::kv_json_after_write;
use crate::error::NodeError;

/// The code of member faults, which are logged here with their full text (a `corrupt` refusal
/// shares their status but is an answer, not a fault of this request).
const INTERNAL: &str = "internal";

/// A failed request on its way to the client: the error and the encoding the client asked for,
/// which decides how a conflict's `current` key-value is written.
#[derive(Debug)]
pub struct ApiError {
    error: NodeError,
    encoding: TextEncoding,
}

impl ApiError {
    /// An error whose body may carry a key-value, written in the client's chosen encoding.
    pub(crate) fn with_encoding(error: NodeError, encoding: TextEncoding) -> Self {
        ApiError { error, encoding }
    }

    /// The underlying error, for logs and tests.
    pub fn node_error(&self) -> &NodeError {
        &self.error
    }
}

impl From<NodeError> for ApiError {
    fn from(error: NodeError) -> Self {
        ApiError::with_encoding(error, TextEncoding::Utf8)
    }
}

impl From<StorageError> for ApiError {
    fn from(error: StorageError) -> Self {
        NodeError::Storage(error).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = status_and_code(&self.error);
        if code == INTERNAL {
            tracing::error!(error = %self.error, "internal error serving a client request");
        }
        let mut body = Map::new();
        body.insert(
            "error".into(),
            json!({ "code": code, "message": self.error.to_string() }),
        );
        add_extra_fields(&mut body, &self.error, self.encoding);
        let mut response = (status, Json(Value::Object(body))).into_response();
        let retry_after = match &self.error {
            NodeError::Unavailable { retry_after, .. } => Some(*retry_after),
            // A learner catches up in about a second on a loopback cluster.
            NodeError::LearnerNotReady(_) => Some(Duration::from_secs(1)),
            _ => None,
        };
        if let Some(retry_after) = retry_after {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_seconds(retry_after)),
            );
        }
        response
    }
}

/// The machine-readable code of an error, for answers that cannot carry a status of their own
/// (a line of a stream whose status was already sent). Faults are logged as for a whole answer.
pub(crate) fn error_code(error: &NodeError) -> &'static str {
    let (_, code) = status_and_code(error);
    if code == INTERNAL {
        tracing::error!(%error, "internal error serving a line of a client stream");
    }
    code
}

/// The status and the machine-readable code of an error.
fn status_and_code(error: &NodeError) -> (StatusCode, &'static str) {
    match error {
        NodeError::Storage(storage) => storage_status_and_code(storage),
        NodeError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid"),
        NodeError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        NodeError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        NodeError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        NodeError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        NodeError::LearnerNotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        NodeError::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "timeout"),
        NodeError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "unauthenticated"),
        NodeError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
        NodeError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL),
    }
}

/// Storage rejections are answers to the request; every other storage error is a member fault.
fn storage_status_and_code(error: &StorageError) -> (StatusCode, &'static str) {
    match error {
        StorageError::Invalid(_) | StorageError::Malformed(_) => {
            (StatusCode::BAD_REQUEST, "invalid")
        }
        StorageError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        StorageError::FutureRevision { .. } => (StatusCode::BAD_REQUEST, "future_revision"),
        StorageError::Compacted { .. } => (StatusCode::GONE, "compacted"),
        StorageError::LeaseNotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
        // etcd answers a duplicate lease id with gRPC FailedPrecondition, which its HTTP gateway
        // turns into 400; the contract's 409 `conflict` is reserved for revision preconditions.
        StorageError::LeaseExists { .. } | StorageError::AuthRecord(_) => {
            (StatusCode::BAD_REQUEST, "invalid")
        }
        StorageError::AuthRecordNotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        StorageError::NoSpace => (StatusCode::INSUFFICIENT_STORAGE, "no_space"),
        // etcd answers DataLoss, which its HTTP gateway turns into 500. Not 503: nothing changes
        // by retrying until an operator has acted, and clients must not move on to another
        // member as for an election.
        StorageError::CorruptCluster => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
        StorageError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        StorageError::Database { .. }
        | StorageError::FileIo { .. }
        | StorageError::ForeignFile { .. }
        | StorageError::Corrupt { .. }
        | StorageError::BadSnapshot(_)
        | StorageError::SnapshotIo(_)
        | StorageError::Invariant(_) => (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL),
    }
}

/// The fields beside `error` that let a client act without another round trip.
fn add_extra_fields(body: &mut Map<String, Value>, error: &NodeError, encoding: TextEncoding) {
    match error {
        NodeError::Conflict { current, merge, .. } => {
            let current = current.as_ref().map(|kv| kv_json_after_write(kv, encoding));
            body.insert("current".into(), json!(current));
            if let Some(merge) = merge {
                body.insert("conflicting_fields".into(), json!(merge.conflicting_fields));
            }
        }
        NodeError::Storage(StorageError::Compacted {
            compact_revision, ..
        }) => {
            body.insert("compact_revision".into(), json!(compact_revision));
        }
        _ => {}
    }
}

/// `Retry-After` takes whole seconds; round up so a client never retries before the member asked,
/// and never answer 0, which would invite a tight retry loop.
fn retry_after_seconds(retry_after: Duration) -> u64 {
    let whole = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    whole.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one_second() {
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn storage_faults_are_internal_and_rejections_keep_their_codes() {
        let fault = NodeError::Storage(StorageError::Invariant("twice".into()));
        assert_eq!(status_and_code(&fault).1, "internal");
        let compacted = NodeError::Storage(StorageError::Compacted {
            requested: 1,
            compact_revision: 3,
        });
        assert_eq!(status_and_code(&compacted), (StatusCode::GONE, "compacted"));
        let corrupt = NodeError::Storage(StorageError::CorruptCluster);
        assert_eq!(
            status_and_code(&corrupt),
            (StatusCode::INTERNAL_SERVER_ERROR, "corrupt")
        );
    }
}
