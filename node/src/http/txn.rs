//! `POST /v1/txn`: an atomic compare-and-swap over any keys (request shape in `txn_request`).
//!
//! The answer is `{header, succeeded, responses}`, where `responses[i]` mirrors the i-th op of the
//! branch that ran: `{"put": {"prev_kv"?}}`, `{"delete": {"deleted", "prev_kvs"?}}` or
//! `{"get": {"kvs", "count", "more"}}`. Failed compares are still `200` with `succeeded: false`, as
//! in etcd: a raw txn states its own conditions, so a failed one is an answer, not a conflict.

use axum::body::Body;
use axum::extract::RawQuery;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use revkv_storage::{Request, Response as StoreResponse, TxnOp, TxnOpResponse};
use serde::Serialize;

use super::auth_gate::CheckedState;
use super::body::read_json;
use super::client_retries::record_txn_retry;
use super::conflicts::count_failed_txn;
use super::error::ApiError;
use super::keys::TextEncoding;
use super::opening::open_query;
use super::state::ApiState;
use super::txn_request::TxnBody;
use super::wire::{kv_json_after_write, kvs_json_after_write, unexpected_response, KvJson};
use crate::backend::{KvBackend, ResponseHeader};

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new().route("/v1/txn", post(post_txn::<B>))
}

#[derive(Serialize, utoipa::ToSchema)]
struct TxnAnswer {
    header: ResponseHeader,
    succeeded: bool,
    responses: Vec<OpAnswer>,
}

/// One op's answer; serde's external tagging gives `{"put": {...}}` and so on.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
enum OpAnswer {
    Put {
        #[serde(skip_serializing_if = "Option::is_none")]
        prev_kv: Option<KvJson>,
    },
    Delete {
        deleted: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        prev_kvs: Option<Vec<KvJson>>,
    },
    Get {
        kvs: Vec<KvJson>,
        count: u64,
        more: bool,
    },
}

/// `POST /v1/txn`: compares, then the success or the failure branch, atomically at one revision.
#[utoipa::path(
    post,
    path = "/v1/txn",
    tag = "kv",
    summary = "An atomic transaction: compares, then the success or the failure ops",
    params(super::openapi_shapes::EncodingQuery),
    request_body(content = super::txn_request::TxnBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The branch that ran and its answers (a failed compare is succeeded: false)", body = TxnAnswer),
        (status = "4XX", description = "Refused: invalid, too_large, compacted, future_revision", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable, timeout, no_space or corrupt", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn post_txn<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    headers: HeaderMap,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    let (encoding, ()) = open_query(raw_query.as_deref(), |_| Ok(()))?;
    let body: TxnBody = read_json(body, state.limits.max_body_bytes).await?;
    let request = body.into_request(encoding)?;
    let first_compare_key = request.compare.first().map(|compare| compare.key.clone());
    record_txn_retry(&state, &headers, first_compare_key.as_deref())?;
    // The storage answer does not say whether a delete asked for its previous values, so remember
    // it per op before the request is handed over.
    let success_wants_prev_kvs = wants_prev_kvs(&request.success);
    let failure_wants_prev_kvs = wants_prev_kvs(&request.failure);
    let written = state.backend.write(Request::Txn(request)).await?;
    let StoreResponse::Txn(answer) = written.response else {
        return Err(unexpected_response("txn").into());
    };
    count_failed_txn(&state, answer.succeeded, first_compare_key.as_deref());
    let wants = match answer.succeeded {
        true => success_wants_prev_kvs,
        false => failure_wants_prev_kvs,
    };
    let responses = (answer.responses.into_iter().zip(wants))
        .map(|(response, wants_prev_kvs)| op_answer(response, wants_prev_kvs, encoding))
        .collect::<Result<_, _>>()?;
    let body = TxnAnswer {
        header: written.header,
        succeeded: answer.succeeded,
        responses,
    };
    Ok(Json(body).into_response())
}

/// For each op, whether it is a delete that asked for the deleted key-values.
fn wants_prev_kvs(ops: &[TxnOp]) -> Vec<bool> {
    ops.iter()
        .map(|op| matches!(op, TxnOp::DeleteRange(delete) if delete.prev_kv))
        .collect()
}

/// The JSON of one op's answer. The txn has run, so data that is not UTF-8 falls back to marked
/// base64 instead of failing the answer (see `wire`).
fn op_answer(
    response: TxnOpResponse,
    wants_prev_kvs: bool,
    encoding: TextEncoding,
) -> Result<OpAnswer, ApiError> {
    Ok(match response {
        TxnOpResponse::Put(put) => OpAnswer::Put {
            prev_kv: put
                .prev_kv
                .as_ref()
                .map(|kv| kv_json_after_write(kv, encoding)),
        },
        TxnOpResponse::DeleteRange(delete) => OpAnswer::Delete {
            deleted: delete.deleted,
            prev_kvs: wants_prev_kvs.then(|| kvs_json_after_write(&delete.prev_kvs, encoding)),
        },
        TxnOpResponse::Get(range) => OpAnswer::Get {
            kvs: kvs_json_after_write(&range.kvs, encoding),
            count: range.count,
            more: range.more,
        },
        // The HTTP API's txn body has no nested txn, so no answer holds one.
        TxnOpResponse::Txn(_) => return Err(unexpected_response("nested txn").into()),
    })
}
