//! Writes under `/v1/kv/{key}`: `PUT` stores a value, `DELETE` removes the key (or, with
//! `prefix=true`, every key under it). Both honour `prev_kv=true` and the `If-Match` /
//! `If-None-Match` preconditions of the `precondition` module. `PUT ...?merge=three-way` is
//! handed to `kv_merge`.

use axum::body::Body;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use axum::{Json, Router};
use revkv_metrics::KvOp;
use revkv_storage::{DeleteRangeRequest, PutRequest, TxnOp, TxnOpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth_gate::CheckedState;
use super::body::read_json;
use super::conflicts::count_if_conflict;
use super::error::ApiError;
use super::keys::key_range;
use super::kv_merge::{merge_put, MergeAnswer, MergePutRequest, THREE_WAY};
use super::openapi_shapes::{EncodingQuery, ErrorBody, KeyPath, PreconditionHeaders, PrevKvQuery};
use super::opening::{open_key_write, KeyWriteOpening};
use super::state::ApiState;
use super::wire::PutBody;
use super::wire::{
    etag_header, kv_json_after_write, kvs_json_after_write, unexpected_response, KvJson,
};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;
use crate::writes::write_one;

/// The write routes; `/v1/kv/` (no key) is routed so that it is answered `invalid`.
pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/kv/", put(put_key::<B>).delete(delete_key::<B>))
        .route("/v1/kv/{*key}", put(put_key::<B>).delete(delete_key::<B>))
}

#[derive(Serialize, ToSchema)]
struct PutAnswer {
    header: ResponseHeader,
    #[serde(skip_serializing_if = "Option::is_none")]
    prev_kv: Option<KvJson>,
}

/// The answer of a `PUT`: a plain put's, or a three-way merge's (`merge=three-way`).
/// For the document only: each handler path builds its own answer.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum PutOrMergeAnswer {
    Put(PutAnswer),
    Merge(MergeAnswer),
}

#[derive(Serialize, ToSchema)]
struct DeleteAnswer {
    header: ResponseHeader,
    deleted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prev_kvs: Option<Vec<KvJson>>,
}

/// `PUT /v1/kv/{key}`: answers the header, `prev_kv` when asked, and the key's new `ETag`.
#[utoipa::path(
    put,
    path = "/v1/kv/{key}",
    tag = "kv",
    summary = "Write one key, optionally conditional (If-Match, If-None-Match) or a three-way merge",
    params(
        KeyPath,
        EncodingQuery,
        PrevKvQuery,
        ("merge" = Option<String>, Query, description = "`three-way`: merge the changes since If-Match's revision into the current JSON value", pattern = "^three-way$"),
        PreconditionHeaders,
    ),
    request_body(content = PutBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Written (ETag: the new mod revision)", body = PutOrMergeAnswer,
            headers(("ETag" = String, description = "The key's new mod revision, quoted"))),
        (status = 409, description = "A precondition failed, or a merge's changes overlap", body = ErrorBody),
        (status = "4XX", description = "Refused: invalid, too_large, not_found (lease), compacted", body = ErrorBody),
        (status = "5XX", description = "unavailable, timeout, no_space or corrupt", body = ErrorBody),
    )
)]
async fn put_key<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    let (opening, (prev_kv, merge)) =
        open_key_write(&uri, &headers, raw_query.as_deref(), |query| {
            Ok((query.take_flag("prev_kv")?, query.take_text("merge")?))
        })?;
    let KeyWriteOpening {
        key,
        encoding,
        precondition,
    } = opening;
    let body: PutBody = read_json(body, state.limits.max_body_bytes).await?;
    if wants_three_way_merge(merge.as_deref(), prev_kv)? {
        let request = MergePutRequest::parse(key, encoding, precondition, body)?;
        return merge_put(&state, request).await;
    }
    let put = PutRequest {
        key: key.clone(),
        value: encoding.decode("value", body.value.as_bytes())?,
        lease: body.lease,
        prev_kv,
    };
    let written = write_one(&*state.backend, &key, precondition, TxnOp::Put(put))
        .await
        .map_err(|error| ApiError::with_encoding(error, encoding));
    count_if_conflict(&state, KvOp::Put, &key, &written);
    let (header, response) = written?;
    let TxnOpResponse::Put(put) = response else {
        return Err(unexpected_response("put").into());
    };
    let answer = PutAnswer {
        header,
        prev_kv: put
            .prev_kv
            .as_ref()
            .map(|kv| kv_json_after_write(kv, encoding)),
    };
    // A put always takes a new revision, so the key's mod revision is the header's revision.
    Ok(([etag_header(header.revision)], Json(answer)).into_response())
}

/// Whether a put's `merge` query parameter asks for a three-way merge. Any other value is refused,
/// and so is a merge together with `prev_kv`, which a merge does not support.
fn wants_three_way_merge(merge: Option<&str>, prev_kv: bool) -> Result<bool, ApiError> {
    match merge {
        None => Ok(false),
        Some(THREE_WAY) if !prev_kv => Ok(true),
        Some(THREE_WAY) => {
            Err(NodeError::Invalid("prev_kv cannot be used with merge=three-way".into()).into())
        }
        Some(other) => {
            Err(NodeError::Invalid(format!("merge must be three-way, not {other:?}")).into())
        }
    }
}

/// `DELETE /v1/kv/{key}`: answers how many keys were deleted and, when asked, what they held.
#[utoipa::path(
    delete,
    path = "/v1/kv/{key}",
    tag = "kv",
    summary = "Delete one key, or with prefix=true every key under it",
    params(
        KeyPath,
        EncodingQuery,
        PrevKvQuery,
        ("prefix" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Delete every key under the path"),
        PreconditionHeaders,
    ),
    responses(
        (status = 200, description = "Deleted (possibly nothing)", body = DeleteAnswer),
        (status = 409, description = "A precondition failed", body = ErrorBody),
        (status = "4XX", description = "Refused: invalid", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody),
    )
)]
async fn delete_key<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let (opening, (prefix, prev_kv)) =
        open_key_write(&uri, &headers, raw_query.as_deref(), |query| {
            Ok((query.take_flag("prefix")?, query.take_flag("prev_kv")?))
        })?;
    let KeyWriteOpening {
        key,
        encoding,
        precondition,
    } = opening;
    if prefix && precondition.is_some() {
        return Err(NodeError::Invalid(
            "If-Match and If-None-Match apply to one key; they cannot be used with prefix=true"
                .into(),
        )
        .into());
    }
    let delete = DeleteRangeRequest {
        range: key_range(key.clone(), None, prefix)?,
        prev_kv,
    };
    let op = TxnOp::DeleteRange(delete);
    let written = write_one(&*state.backend, &key, precondition, op)
        .await
        .map_err(|error| ApiError::with_encoding(error, encoding));
    count_if_conflict(&state, KvOp::Delete, &key, &written);
    let (header, response) = written?;
    let TxnOpResponse::DeleteRange(deleted) = response else {
        return Err(unexpected_response("delete").into());
    };
    let answer = DeleteAnswer {
        header,
        deleted: deleted.deleted,
        prev_kvs: prev_kv.then(|| kvs_json_after_write(&deleted.prev_kvs, encoding)),
    };
    Ok(Json(answer).into_response())
}
