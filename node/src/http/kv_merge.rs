//! `PUT /v1/kv/{key}?merge=three-way` with `If-Match: "<R>"`: a conditional put that, when the
//! key has moved past R, merges instead of refusing (contract section 7).
//!
//! Each attempt reads the key now. Still at R: the desired value is written as is (`merged:
//! false`). Moved on: the value at R is read from history as the base (once per request), and
//! `crate::three_way_merge` carries the client's changes (base → desired) onto the current value;
//! overlapping changes answer `409 conflict` with `conflicting_fields`. The result is written with
//! a compare-and-swap on the current mod revision; a lost swap starts another attempt, bounded by
//! client-go's `DefaultRetry` as PATCH is (`guaranteed_update`).
//!
//! Other answers: `400 invalid` without `If-Match: "<R>"`, for a value (or a base) that is not
//! JSON, or with `prev_kv`; `410 compacted` when R was compacted. A key deleted since R, or whose
//! value is no longer JSON, conflicts as a whole (`conflicting_fields: [""]`).
//!
//! Metrics: `revkv_conflicts_total{op="put"}` counts `merged` for a merge written, `retried` for
//! each lost swap retried, `rejected` for a `409`; `revkv_update_attempts{op="put"}` the attempts.

use std::sync::Mutex;

use axum::response::{IntoResponse, Response};
use axum::Json;
use revkv_metrics::{ConflictResolution, KvOp, UpdateOutcome};
use revkv_storage::{KeyRange, KeyValue, RangeRequest};
use serde::Serialize;
use serde_json::Value;

use super::conflicts::note_conflicts;
use super::error::ApiError;
use super::guaranteed_update::{
    run_guaranteed_update, AttemptOutcome, Finished, GaveUp, RetryPolicy, TokioPause, UpdateAttempt,
};
use super::keys::{describe_key, TextEncoding};
use super::precondition::Precondition;
use super::state::ApiState;
use super::wire::PutBody;
use super::wire::{etag_header, kv_json_after_write, KvJson};
use crate::backend::{KvBackend, ReadConsistency, ResponseHeader};
use crate::error::NodeError;
use crate::three_way_merge::{changes_between, three_way_merge, FieldChange, MergeConflict};
use crate::writes::{compare_and_swap, SwapOutcome};

/// The value of the `merge` query parameter that asks for this write.
pub const THREE_WAY: &str = "three-way";

#[derive(Serialize, utoipa::ToSchema)]
pub struct MergeAnswer {
    header: ResponseHeader,
    kv: KvJson,
    merged: bool,
    merged_fields: Vec<String>,
}

/// A merge put, parsed and validated before any attempt.
pub struct MergePutRequest {
    pub key: Vec<u8>,
    pub encoding: TextEncoding,
    pub base_revision: u64,
    pub desired: Value,
}

impl MergePutRequest {
    /// Checks the precondition and that the value is JSON.
    pub fn parse(
        key: Vec<u8>,
        encoding: TextEncoding,
        precondition: Option<Precondition>,
        body: PutBody,
    ) -> Result<Self, NodeError> {
        let Some(Precondition::ModRevisionIs(base_revision)) = precondition else {
            return Err(NodeError::Invalid(
                "merge=three-way needs If-Match: \"<R>\", the mod revision the value was read at"
                    .into(),
            ));
        };
        if body.lease != 0 {
            return Err(NodeError::Invalid(
                "merge=three-way keeps the key's lease; the body cannot name one".into(),
            ));
        }
        let value = encoding.decode("value", body.value.as_bytes())?;
        let desired = serde_json::from_slice(&value).map_err(|error| {
            NodeError::Invalid(format!(
                "merge=three-way needs a JSON value, and this one is not: {error}"
            ))
        })?;
        Ok(MergePutRequest {
            key,
            encoding,
            base_revision,
            desired,
        })
    }
}

/// Serves one merge put and counts what happened.
pub async fn merge_put<B: KvBackend>(
    state: &ApiState<B>,
    request: MergePutRequest,
) -> Result<Response, ApiError> {
    let update = MergeUpdate {
        backend: &*state.backend,
        request: &request,
        base: Mutex::new(None),
    };
    let outcome = run_guaranteed_update(
        &RetryPolicy::DEFAULT_RETRY,
        &update,
        &TokioPause,
        fastrand::f64,
    )
    .await;
    let attempts = match &outcome {
        Ok(finished) => finished.attempts,
        Err(GaveUp::Exhausted { attempts, .. } | GaveUp::Failed { attempts, .. }) => *attempts,
    };
    record_merge_metrics(state, &request.key, &outcome, attempts);
    answer_of(outcome, &request)
}

fn record_merge_metrics<B: KvBackend>(
    state: &ApiState<B>,
    key: &[u8],
    outcome: &Result<Finished<MergeWritten>, GaveUp<Option<KeyValue>, MergeFailure>>,
    attempts: u32,
) {
    let retried = u64::from(attempts.saturating_sub(1));
    note_conflicts(state, KvOp::Put, ConflictResolution::Retried, key, retried);
    let (update_outcome, resolution) = match outcome {
        Ok(finished) if finished.updated.merged => {
            (UpdateOutcome::Success, Some(ConflictResolution::Merged))
        }
        Ok(_) => (UpdateOutcome::Success, None),
        Err(GaveUp::Exhausted { .. }) => {
            (UpdateOutcome::Exhausted, Some(ConflictResolution::Rejected))
        }
        Err(GaveUp::Failed {
            error: MergeFailure::Overlap { .. },
            ..
        }) => (
            UpdateOutcome::PreconditionFailed,
            Some(ConflictResolution::Rejected),
        ),
        Err(GaveUp::Failed { .. }) => (UpdateOutcome::Error, None),
    };
    state
        .metrics
        .kv
        .record_update_attempts(KvOp::Put, update_outcome, attempts);
    if let Some(resolution) = resolution {
        note_conflicts(state, KvOp::Put, resolution, key, 1);
    }
}

fn answer_of(
    outcome: Result<Finished<MergeWritten>, GaveUp<Option<KeyValue>, MergeFailure>>,
    request: &MergePutRequest,
) -> Result<Response, ApiError> {
    let conflict = |message: String, current, fields| NodeError::Conflict {
        message,
        current,
        merge: Some(Box::new(MergeConflict {
            conflicting_fields: fields,
        })),
    };
    let error = match outcome {
        Ok(finished) => {
            let written = finished.updated;
            let answer = MergeAnswer {
                header: written.header,
                kv: kv_json_after_write(&written.kv, request.encoding),
                merged: written.merged,
                merged_fields: written.merged_fields,
            };
            let etag = etag_header(written.kv.mod_revision);
            return Ok(([etag], Json(answer)).into_response());
        }
        Err(GaveUp::Exhausted {
            conflict: now,
            attempts,
        }) => conflict(
            format!(
                "key {} changed concurrently on each of {attempts} merge attempts",
                describe_key(&request.key)
            ),
            now,
            Vec::new(),
        ),
        Err(GaveUp::Failed {
            error: MergeFailure::Overlap { current, fields },
            ..
        }) => conflict(
            format!(
                "key {} changed since revision {} in the same fields as this write",
                describe_key(&request.key),
                request.base_revision
            ),
            current,
            fields,
        ),
        Err(GaveUp::Failed {
            error: MergeFailure::Node(error),
            ..
        }) => error,
    };
    Err(ApiError::with_encoding(error, request.encoding))
}

/// A merge put written: the key now, and whether (and which of) the client's changes were merged.
struct MergeWritten {
    header: ResponseHeader,
    kv: KeyValue,
    merged: bool,
    merged_fields: Vec<String>,
}

/// Why an attempt ends the request without a write.
enum MergeFailure {
    /// The changes overlap: a real conflict, not worth retrying.
    Overlap {
        current: Option<KeyValue>,
        fields: Vec<String>,
    },
    Node(NodeError),
}

impl From<NodeError> for MergeFailure {
    fn from(error: NodeError) -> Self {
        MergeFailure::Node(error)
    }
}

/// One attempt: read the key, merge if it moved past R, compare-and-swap. The base (the value at
/// R) is read once and kept for later attempts.
struct MergeUpdate<'a, B> {
    backend: &'a B,
    request: &'a MergePutRequest,
    base: Mutex<Option<Value>>,
}

impl<B: KvBackend> UpdateAttempt for MergeUpdate<'_, B> {
    type Updated = MergeWritten;
    type Conflict = Option<KeyValue>;
    type Error = MergeFailure;

    async fn attempt(
        &self,
        previous_conflict: Option<Option<KeyValue>>,
    ) -> Result<AttemptOutcome<MergeWritten, Option<KeyValue>>, MergeFailure> {
        let current = match previous_conflict {
            Some(current) => current,
            None => self.read_key(None, ReadConsistency::Linearizable).await?,
        };
        let Some(current) = current else {
            return Err(whole_document_conflict(None));
        };
        let (value, merged, merged_fields) = if current.mod_revision == self.request.base_revision {
            let base = json_of(&current, "current")?;
            let fields = pointers(&changes_between(&base, &self.request.desired));
            (self.request.desired.clone(), false, fields)
        } else {
            let base = self.base().await?;
            let Ok(now) = serde_json::from_slice::<Value>(&current.value) else {
                return Err(whole_document_conflict(Some(current)));
            };
            match three_way_merge(&base, &now, &self.request.desired) {
                Ok(merged) => (merged.value, true, merged.merged_fields),
                Err(overlap) => {
                    return Err(MergeFailure::Overlap {
                        current: Some(current),
                        fields: overlap.conflicting_fields,
                    })
                }
            }
        };
        let bytes = serde_json::to_vec(&value)
            .map_err(|error| NodeError::Internal(format!("cannot encode JSON: {error}")))?;
        let swapped =
            compare_and_swap(self.backend, &self.request.key, Some(&current), bytes).await?;
        Ok(match swapped {
            SwapOutcome::Swapped { header, kv } => AttemptOutcome::Updated(MergeWritten {
                header,
                kv,
                merged,
                merged_fields,
            }),
            SwapOutcome::Lost(now) => AttemptOutcome::Conflict(now),
        })
    }
}

impl<B: KvBackend> MergeUpdate<'_, B> {
    async fn read_key(
        &self,
        revision: Option<u64>,
        consistency: ReadConsistency,
    ) -> Result<Option<KeyValue>, NodeError> {
        let mut request = RangeRequest::of(KeyRange::single(self.request.key.clone()));
        request.revision = revision;
        let answer = self.backend.read(request, consistency).await?;
        Ok(answer.response.kvs.into_iter().next())
    }

    /// The key's value at the base revision, as JSON; `null` if the key did not exist then. History
    /// at a revision this member has applied never changes (only compaction removes it), so a
    /// serializable read that waits for the base revision is exact and spares a leader round.
    async fn base(&self) -> Result<Value, MergeFailure> {
        if let Some(base) = self.base.lock().expect("base lock").clone() {
            return Ok(base);
        }
        let at_base = self
            .read_key(
                Some(self.request.base_revision),
                ReadConsistency::Serializable {
                    min_revision: Some(self.request.base_revision),
                },
            )
            .await?;
        let base = match at_base {
            Some(kv) => json_of(&kv, "base")?,
            None => Value::Null,
        };
        *self.base.lock().expect("base lock") = Some(base.clone());
        Ok(base)
    }
}

/// A conflict of the whole document: the key was deleted, or its value is no longer JSON.
fn whole_document_conflict(current: Option<KeyValue>) -> MergeFailure {
    MergeFailure::Overlap {
        current,
        fields: vec![String::new()],
    }
}

fn json_of(kv: &KeyValue, which: &str) -> Result<Value, NodeError> {
    serde_json::from_slice(&kv.value).map_err(|error| {
        NodeError::Invalid(format!(
            "the {which} value of key {} (revision {}) is not JSON, so it cannot be merged: {error}",
            describe_key(&kv.key),
            kv.mod_revision
        ))
    })
}

fn pointers(changes: &[FieldChange]) -> Vec<String> {
    changes.iter().map(FieldChange::pointer).collect()
}
