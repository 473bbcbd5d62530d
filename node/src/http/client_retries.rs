//! `X-Retry-Attempt: n` (contract section 4): a client marks a request as its n-th retry after a
//! conflict, and the member counts it in `revkv_client_retries_total{op, prefix}` and
//! `revkv_client_retry_attempt`.
//!
//! A middleware counts every route except `POST /v1/txn`, whose prefix (that of its first
//! compare's key) is only known once the handler has parsed the body; the txn handler counts its
//! own retries with [`record_txn_retry`]. A malformed header is `400 invalid`, like every other
//! malformed part of a request.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;
use revkv_metrics::KvOp;

use super::conflicts::note_client_retry;
use super::error::ApiError;
use super::keys::{key_from_path, TextEncoding};
use super::query::QueryParams;
use super::state::ApiState;
use crate::backend::KvBackend;
use crate::error::NodeError;

/// The header a client sets on a retry.
pub const RETRY_ATTEMPT_HEADER: &str = "x-retry-attempt";

/// The route whose handler counts its own retries.
const TXN_ROUTE: &str = "/v1/txn";

/// Counts the request's retry attempt, if it carries one, then serves it.
pub async fn record_client_retries<B: KvBackend>(
    State(state): State<ApiState<B>>,
    matched_path: Option<MatchedPath>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let attempt = retry_attempt(request.headers())?;
    let route = matched_path.as_ref().map_or("", |path| path.as_str());
    if let Some(attempt) = attempt.filter(|_| route != TXN_ROUTE) {
        let op = op_of(request.method(), route);
        let key = key_of(route, &request);
        state
            .metrics
            .kv
            .record_client_retry(op, key.as_deref(), attempt);
        note_client_retry(&state, key.as_deref(), attempt);
    }
    Ok(next.run(request).await)
}

/// Counts a txn's retry attempt under the prefix of its first compare's key (`None` without
/// compares).
pub fn record_txn_retry<B: KvBackend>(
    state: &ApiState<B>,
    headers: &HeaderMap,
    first_compare_key: Option<&[u8]>,
) -> Result<(), NodeError> {
    if let Some(attempt) = retry_attempt(headers)? {
        state
            .metrics
            .kv
            .record_client_retry(KvOp::Txn, first_compare_key, attempt);
        note_client_retry(state, first_compare_key, attempt);
    }
    Ok(())
}

/// The attempt number of `X-Retry-Attempt`, if present: one non-negative integer.
pub fn retry_attempt(headers: &HeaderMap) -> Result<Option<u32>, NodeError> {
    let mut values = headers.get_all(RETRY_ATTEMPT_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(NodeError::Invalid(
            "give at most one X-Retry-Attempt header".into(),
        ));
    }
    let text = value.to_str().unwrap_or_default().trim();
    text.parse::<u32>().map(Some).map_err(|_| {
        NodeError::Invalid(format!(
            "X-Retry-Attempt must be a non-negative integer; got {text:?}"
        ))
    })
}

/// The `op` label of a request, from its method and matched route.
fn op_of(method: &Method, route: &str) -> KvOp {
    if !route.starts_with("/v1/kv") {
        return KvOp::Other;
    }
    match *method {
        Method::GET => KvOp::Get,
        Method::PUT => KvOp::Put,
        Method::DELETE => KvOp::Delete,
        Method::PATCH => KvOp::Patch,
        _ => KvOp::Other,
    }
}

/// The key of a single-key route, or `None` (ranges, other routes, keys that do not parse: the
/// handler refuses those itself).
fn key_of(route: &str, request: &Request) -> Option<Vec<u8>> {
    if route != "/v1/kv/{*key}" {
        return None;
    }
    let encoding = encoding_of(request.uri().query());
    key_from_path(request.uri().path(), encoding).ok()
}

/// The `encoding` query parameter as far as it matters for reading the key; anything malformed
/// falls back to UTF-8 here (the handler validates the query strictly and refuses it).
fn encoding_of(query: Option<&str>) -> TextEncoding {
    QueryParams::parse(query)
        .and_then(|mut params| params.take_encoding())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(RETRY_ATTEMPT_HEADER, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_retry_attempt_is_one_non_negative_integer() {
        assert_eq!(retry_attempt(&headers(&[])).unwrap(), None);
        assert_eq!(retry_attempt(&headers(&["3"])).unwrap(), Some(3));
        assert_eq!(retry_attempt(&headers(&[" 0 "])).unwrap(), Some(0));
        for bad in ["-1", "x", "1.5", ""] {
            assert!(retry_attempt(&headers(&[bad])).is_err(), "{bad:?}");
        }
        assert!(retry_attempt(&headers(&["1", "2"])).is_err());
    }

    #[test]
    fn operations_come_from_the_method_on_key_routes_only() {
        assert_eq!(op_of(&Method::PUT, "/v1/kv/{*key}"), KvOp::Put);
        assert_eq!(op_of(&Method::PATCH, "/v1/kv/{*key}"), KvOp::Patch);
        assert_eq!(op_of(&Method::GET, "/v1/kv"), KvOp::Get);
        assert_eq!(op_of(&Method::GET, "/v1/status"), KvOp::Other);
    }
}
