//! `PATCH /v1/kv/{key}`: a JSON merge patch (RFC 7386) applied to a key whose value is JSON.
//!
//! Without `If-Match` the member runs the guaranteed-update loop itself (`guaranteed_update`):
//! read the key, apply the patch, compare-and-swap on the `mod_revision` it read, and on a lost
//! race try again after a jittered backoff, at most as often as the chosen preset allows
//! (`backoff=default_retry`, the default, or `backoff=default_backoff`). With `If-Match: "<R>"`
//! (or `If-Match: *`) it makes one attempt and answers `409 conflict` if the key is not at R (or
//! absent). A value that is not JSON, or a body that is not, is `400 invalid`; a missing key is
//! `404 not_found` unless `create=true`, which patches `null`. A patch that changes nothing writes
//! nothing and answers the key as it is.
//!
//! The answer is `200 {header, kv, attempts}` with the key's new `ETag`. Every request records
//! `revkv_update_attempts{op="patch", outcome}`, and a `409` answer counts one conflict.

use axum::body::Body;
use axum::extract::RawQuery;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::patch;
use axum::{Json, Router};
use revkv_metrics::{ConflictResolution, KvOp, UpdateOutcome};
use revkv_storage::{KeyRange, KeyValue, RangeRequest};
use serde::Serialize;
use serde_json::Value;

use super::auth_gate::CheckedState;
use super::body::read_body;
use super::conflicts::note_conflicts;
use super::error::ApiError;
use super::guaranteed_update::{
    run_guaranteed_update, AttemptOutcome, Finished, GaveUp, RetryPolicy, TokioPause, UpdateAttempt,
};
use super::keys::{describe_key, TextEncoding};
use super::opening::{open_key_write, KeyWriteOpening};
use super::precondition::Precondition;
use super::state::ApiState;
use super::wire::{etag_header, kv_json_after_write, KvJson};
use crate::backend::{KvBackend, ReadConsistency, ResponseHeader};
use crate::error::{Missing, NodeError};
use crate::writes::{compare_and_swap, SwapOutcome};

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/kv/", patch(patch_key::<B>))
        .route("/v1/kv/{*key}", patch(patch_key::<B>))
}

#[derive(Serialize, utoipa::ToSchema)]
struct PatchAnswer {
    header: ResponseHeader,
    kv: KvJson,
    attempts: u32,
}

/// What a `PATCH` asks for, parsed and validated before any attempt.
struct PatchRequest {
    key: Vec<u8>,
    patch: Value,
    encoding: TextEncoding,
    create: bool,
    policy: RetryPolicy,
    precondition: Option<Precondition>,
}

/// `PATCH /v1/kv/{key}`: a JSON merge patch, retried by the member on conflict unless `If-Match`.
#[utoipa::path(
    patch,
    path = "/v1/kv/{key}",
    tag = "kv",
    summary = "Apply a JSON merge patch (RFC 7386) to a key's JSON value, retrying on conflict",
    params(
        super::openapi_shapes::KeyPath,
        super::openapi_shapes::EncodingQuery,
        ("create" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Patch null when the key is absent"),
        ("backoff" = Option<String>, Query, description = "The retry preset: default_retry or default_backoff", pattern = "^(default_retry|default_backoff)$"),
        ("If-Match" = Option<String>, Header, description = "`\"<R>\"` or `*`: one attempt, only if the key is at R (or present)", pattern = r#"^("[0-9]+"|\*)$"#),
    ),
    request_body(content = serde_json::Value, content_type = "application/merge-patch+json", description = "The merge patch: any JSON value (an object merges field by field; anything else replaces the value)"),
    responses(
        (status = 200, description = "Patched (ETag: the new mod revision)", body = PatchAnswer,
            headers(("ETag" = String, description = "The key's new mod revision, quoted"))),
        (status = 409, description = "If-Match failed, or every attempt lost its race", body = super::openapi_shapes::ErrorBody),
        (status = "4XX", description = "Refused: invalid, not_found, too_large", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable, timeout, no_space or corrupt", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn patch_key<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    let request = parse_patch_request(&state, &uri, &headers, raw_query.as_deref(), body).await?;
    let update = MergePatchUpdate {
        backend: &*state.backend,
        request: &request,
    };
    let outcome = run_guaranteed_update(&request.policy, &update, &TokioPause, fastrand::f64).await;
    let (result, update_outcome, attempts) = answer_of(outcome, &request);
    state
        .metrics
        .kv
        .record_update_attempts(KvOp::Patch, update_outcome, attempts);
    record_patch_conflicts(&state, &request.key, update_outcome, attempts);
    result
}

/// Every attempt but the last one lost its compare-and-swap and was retried; a `409` answer is
/// one rejected conflict on top.
fn record_patch_conflicts<B: KvBackend>(
    state: &ApiState<B>,
    key: &[u8],
    outcome: UpdateOutcome,
    attempts: u32,
) {
    if outcome != UpdateOutcome::Error {
        let retried = u64::from(attempts.saturating_sub(1));
        note_conflicts(
            state,
            KvOp::Patch,
            ConflictResolution::Retried,
            key,
            retried,
        );
    }
    if matches!(
        outcome,
        UpdateOutcome::Exhausted | UpdateOutcome::PreconditionFailed
    ) {
        note_conflicts(state, KvOp::Patch, ConflictResolution::Rejected, key, 1);
    }
}

async fn parse_patch_request<B: KvBackend>(
    state: &ApiState<B>,
    uri: &Uri,
    headers: &HeaderMap,
    raw_query: Option<&str>,
    body: Body,
) -> Result<PatchRequest, ApiError> {
    let (opening, (create, backoff)) = open_key_write(uri, headers, raw_query, |query| {
        Ok((query.take_flag("create")?, query.take_text("backoff")?))
    })?;
    let KeyWriteOpening {
        key,
        encoding,
        precondition,
    } = opening;
    let precondition = refuse_if_none_match(precondition)?;
    let policy = match precondition {
        Some(_) => RetryPolicy::SINGLE_ATTEMPT,
        None => retry_policy_named(backoff.as_deref())?,
    };
    check_merge_patch_content_type(headers)?;
    let bytes = read_body(body, state.limits.max_body_bytes).await?;
    let patch = serde_json::from_slice(&bytes).map_err(|error| {
        NodeError::Invalid(format!("the merge patch is not valid JSON: {error}"))
    })?;
    Ok(PatchRequest {
        key,
        patch,
        encoding,
        create,
        policy,
        precondition,
    })
}

/// `If-Match` pins the attempt; `If-None-Match: *` means "only if absent", which cannot patch.
fn refuse_if_none_match(
    precondition: Option<Precondition>,
) -> Result<Option<Precondition>, NodeError> {
    match precondition {
        Some(Precondition::Absent) => Err(NodeError::Invalid(
            "If-None-Match is not supported on PATCH; use PUT with If-None-Match: * to create"
                .into(),
        )),
        other => Ok(other),
    }
}

/// The `backoff` query parameter: client-go's presets by name.
fn retry_policy_named(name: Option<&str>) -> Result<RetryPolicy, NodeError> {
    match name {
        None | Some("default_retry") => Ok(RetryPolicy::DEFAULT_RETRY),
        Some("default_backoff") => Ok(RetryPolicy::DEFAULT_BACKOFF),
        Some(other) => Err(NodeError::Invalid(format!(
            "backoff must be default_retry or default_backoff, not {other:?}"
        ))),
    }
}

/// A merge patch is `application/merge-patch+json`; plain `application/json` (or no type) is
/// accepted too, since the body is the same JSON.
fn check_merge_patch_content_type(headers: &HeaderMap) -> Result<(), NodeError> {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return Ok(());
    };
    let media_type = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media_type.as_str() {
        "application/merge-patch+json" | "application/json" => Ok(()),
        other => Err(NodeError::Invalid(format!(
            "PATCH takes a JSON merge patch (Content-Type: application/merge-patch+json), not {other:?}"
        ))),
    }
}

/// The HTTP answer, the outcome label and the attempt count of a finished loop.
fn answer_of(
    outcome: Result<Finished<Patched>, GaveUp<Option<KeyValue>, NodeError>>,
    request: &PatchRequest,
) -> (Result<Response, ApiError>, UpdateOutcome, u32) {
    match outcome {
        Ok(finished) => {
            let answer = PatchAnswer {
                header: finished.updated.header,
                kv: kv_json_after_write(&finished.updated.kv, request.encoding),
                attempts: finished.attempts,
            };
            let etag = etag_header(finished.updated.kv.mod_revision);
            let response = ([etag], Json(answer)).into_response();
            (Ok(response), UpdateOutcome::Success, finished.attempts)
        }
        Err(GaveUp::Exhausted { conflict, attempts }) => {
            let (message, outcome) = match request.precondition {
                Some(precondition) => (
                    precondition_message(precondition, &request.key),
                    UpdateOutcome::PreconditionFailed,
                ),
                None => (
                    format!(
                        "key {} changed concurrently on each of {attempts} attempts",
                        describe_key(&request.key)
                    ),
                    UpdateOutcome::Exhausted,
                ),
            };
            let conflict = NodeError::Conflict {
                message,
                current: conflict,
                merge: None,
            };
            let error = ApiError::with_encoding(conflict, request.encoding);
            (Err(error), outcome, attempts)
        }
        Err(GaveUp::Failed { error, attempts }) => {
            (Err(error.into()), UpdateOutcome::Error, attempts)
        }
    }
}

fn precondition_message(precondition: Precondition, key: &[u8]) -> String {
    let key = describe_key(key);
    match precondition {
        Precondition::ModRevisionIs(revision) => {
            format!("If-Match failed: the mod_revision of key {key} is not {revision}")
        }
        _ => format!("If-Match failed: key {key} does not exist"),
    }
}

/// A patched key-value and the header of the answer that wrote (or found) it.
struct Patched {
    header: ResponseHeader,
    kv: KeyValue,
}

/// One attempt of a merge patch: read (unless the last conflict told us the value), patch, and
/// compare-and-swap. A conflict carries the key-value the failed swap saw (or `None` if absent).
struct MergePatchUpdate<'a, B> {
    backend: &'a B,
    request: &'a PatchRequest,
}

impl<B: KvBackend> UpdateAttempt for MergePatchUpdate<'_, B> {
    type Updated = Patched;
    type Conflict = Option<KeyValue>;
    type Error = NodeError;

    async fn attempt(
        &self,
        previous_conflict: Option<Option<KeyValue>>,
    ) -> Result<AttemptOutcome<Patched, Option<KeyValue>>, NodeError> {
        let current = match previous_conflict {
            Some(current) => current,
            None => self.read_current().await?,
        };
        if !self.precondition_holds(current.as_ref()) {
            return Ok(AttemptOutcome::Conflict(current));
        }
        let (original, patched) = self.patched_value(current.as_ref())?;
        if let (Some(kv), true) = (&current, original == patched) {
            return Ok(AttemptOutcome::Updated(self.unchanged(kv.clone())?));
        }
        let value = serde_json::to_vec(&patched)
            .map_err(|error| NodeError::Internal(format!("cannot encode JSON: {error}")))?;
        self.compare_and_swap(current, value).await
    }
}

impl<B: KvBackend> MergePatchUpdate<'_, B> {
    /// The key now, read linearizably so the attempt starts from the latest revision.
    async fn read_current(&self) -> Result<Option<KeyValue>, NodeError> {
        let request = RangeRequest::of(KeyRange::single(self.request.key.clone()));
        let answer = self
            .backend
            .read(request, ReadConsistency::Linearizable)
            .await?;
        Ok(answer.response.kvs.into_iter().next())
    }

    fn precondition_holds(&self, current: Option<&KeyValue>) -> bool {
        match (self.request.precondition, current) {
            (None, _) => true,
            (Some(Precondition::ModRevisionIs(revision)), Some(kv)) => kv.mod_revision == revision,
            (Some(Precondition::Exists), Some(_)) => true,
            (Some(_), _) => false,
        }
    }

    /// The current value as JSON and the patched value; a missing key is `null` with `create`.
    fn patched_value(&self, current: Option<&KeyValue>) -> Result<(Value, Value), NodeError> {
        let original = match current {
            Some(kv) => serde_json::from_slice(&kv.value).map_err(|error| {
                NodeError::Invalid(format!(
                    "the value of key {} is not JSON, so it cannot be merge-patched: {error}",
                    describe_key(&kv.key)
                ))
            })?,
            None if self.request.create => Value::Null,
            None => {
                return Err(NodeError::NotFound(Missing::Other(format!(
                    "key {} (give create=true to create it from the patch)",
                    describe_key(&self.request.key)
                ))))
            }
        };
        let mut patched = original.clone();
        json_patch::merge(&mut patched, &self.request.patch);
        Ok((original, patched))
    }

    /// A patch that changes nothing: the key as it is, under a header for this member now.
    fn unchanged(&self, kv: KeyValue) -> Result<Patched, NodeError> {
        let mut header = self.backend.header()?;
        header.revision = header.revision.max(kv.mod_revision);
        Ok(Patched { header, kv })
    }

    /// Writes `value` only if the key is still as read: same `mod_revision`, or still absent.
    async fn compare_and_swap(
        &self,
        current: Option<KeyValue>,
        value: Vec<u8>,
    ) -> Result<AttemptOutcome<Patched, Option<KeyValue>>, NodeError> {
        let swapped =
            compare_and_swap(self.backend, &self.request.key, current.as_ref(), value).await?;
        Ok(match swapped {
            SwapOutcome::Swapped { header, kv } => AttemptOutcome::Updated(Patched { header, kv }),
            SwapOutcome::Lost(now) => AttemptOutcome::Conflict(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_parameter_names_client_go_presets() {
        assert_eq!(
            retry_policy_named(None).unwrap(),
            RetryPolicy::DEFAULT_RETRY
        );
        assert_eq!(
            retry_policy_named(Some("default_backoff")).unwrap(),
            RetryPolicy::DEFAULT_BACKOFF
        );
        assert!(retry_policy_named(Some("forever")).is_err());
    }

    #[test]
    fn merge_patch_and_json_content_types_are_accepted() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, value.parse().unwrap());
            check_merge_patch_content_type(&headers)
        };
        assert!(with("application/merge-patch+json").is_ok());
        assert!(with("application/json; charset=utf-8").is_ok());
        assert!(with("application/json-patch+json").is_err());
        assert!(check_merge_patch_content_type(&HeaderMap::new()).is_ok());
    }
}
