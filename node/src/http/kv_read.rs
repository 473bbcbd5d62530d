//! Reads under `/v1/kv`: one key (`GET /v1/kv/{key}`) and a range (`GET /v1/kv?prefix=P` or
//! `?key=A&range_end=B`), with consistency, historical revision, paging and encoding options.
//! `GET /v1/kv/{key}?history=true` is handed to `kv_history`.

use axum::extract::RawQuery;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use revkv_storage::{KeyRange, RangeRequest};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth_gate::CheckedState;
use super::error::ApiError;
use super::keys::{describe_key, key_from_path, key_range, TextEncoding};
use super::kv_history::{get_history, HistoryAnswer};
use super::openapi_shapes::{ConsistencyQuery, EncodingQuery, ErrorBody, KeyPath};
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::{etag_header, kv_json, kvs_json, KvJson};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::{Missing, NodeError};

/// The read routes. `/v1/kv/` (no key) is routed too, so it is answered `invalid` rather than 404.
pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/kv", get(get_range::<B>))
        .route("/v1/kv/", get(get_key::<B>))
        .route("/v1/kv/{*key}", get(get_key::<B>))
}

#[derive(Serialize, ToSchema)]
struct KeyAnswer {
    header: ResponseHeader,
    kv: KvJson,
}

/// The answer of `GET /v1/kv/{key}`: the key, or with `history=true` a page of its versions.
/// For the document only: each handler path builds its own answer.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum SingleKeyAnswer {
    Key(KeyAnswer),
    History(HistoryAnswer),
}

#[derive(Serialize, ToSchema)]
struct RangeAnswer {
    header: ResponseHeader,
    kvs: Vec<KvJson>,
    count: u64,
    more: bool,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_token: Option<String>,
}

/// `GET /v1/kv/{key}`: the key with an `ETag` of its mod revision, or 404.
#[utoipa::path(
    get,
    path = "/v1/kv/{key}",
    tag = "kv",
    summary = "Read one key, or with history=true every version of it",
    params(
        KeyPath,
        EncodingQuery,
        ConsistencyQuery,
        ("revision" = Option<u64>, Query, description = "Read the key as it was at this revision"),
        ("history" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Answer the key's versions since from_revision"),
        ("from_revision" = Option<u64>, Query, description = "With history=true: the first revision"),
        ("limit" = Option<u64>, Query, description = "With history=true: versions per page"),
        ("continue" = Option<String>, Query, description = "With history=true: the token of the next page"),
    ),
    responses(
        (status = 200, description = "The key (ETag: its mod revision), or a page of its history", body = SingleKeyAnswer,
            headers(("ETag" = String, description = "The key's mod revision, quoted"))),
        (status = "4XX", description = "Refused: not_found, invalid, future_revision, compacted", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody),
    )
)]
async fn get_key<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    uri: Uri,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = QueryParams::parse(raw_query.as_deref())?;
    let encoding = query.take_encoding()?;
    let consistency = query.take_consistency()?;
    if query.take_flag("history")? {
        let key = key_from_path(uri.path(), encoding)?;
        return get_history(&state, key, encoding, consistency, query).await;
    }
    let revision = query.take_u64("revision")?;
    query.finish()?;
    let key = key_from_path(uri.path(), encoding)?;
    let request = RangeRequest {
        revision,
        ..RangeRequest::of(KeyRange::single(key.clone()))
    };
    let answer = state.backend.read(request, consistency).await?;
    let kv = answer.response.kvs.first().ok_or_else(|| {
        NodeError::NotFound(Missing::Other(format!(
            "key {} does not exist",
            describe_key(&key)
        )))
    })?;
    let body = KeyAnswer {
        header: answer.header,
        kv: kv_json(kv, encoding)?,
    };
    Ok(([etag_header(kv.mod_revision)], Json(body)).into_response())
}

/// `GET /v1/kv?prefix=P` or `?key=A[&range_end=B]`: a page of a range.
#[utoipa::path(
    get,
    path = "/v1/kv",
    tag = "kv",
    summary = "Read a range of keys: prefix=P, or key=K with an optional range_end",
    params(
        EncodingQuery,
        ConsistencyQuery,
        ("prefix" = Option<String>, Query, description = "Every key under this prefix (empty: every key)"),
        ("key" = Option<String>, Query, description = "The first key of the range"),
        ("range_end" = Option<String>, Query, description = "The end of the range, exclusive (with key or prefix)"),
        ("revision" = Option<u64>, Query, description = "Read the range as it was at this revision"),
        ("limit" = Option<u64>, Query, description = "Keys per page"),
        ("keys_only" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Answer keys without values"),
        ("count_only" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Answer only the count"),
        ("continue" = Option<String>, Query, description = "The token of the next page"),
    ),
    responses(
        (status = 200, description = "A page of the range", body = RangeAnswer),
        (status = "4XX", description = "Refused: invalid, future_revision, compacted", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody),
    )
)]
async fn get_range<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = QueryParams::parse(raw_query.as_deref())?;
    let encoding = query.take_encoding()?;
    let consistency = query.take_consistency()?;
    let request = RangeRequest {
        range: Some(range_from_query(&mut query, encoding)?),
        revision: query.take_u64("revision")?,
        limit: query.take_u64("limit")?,
        keys_only: query.take_flag("keys_only")?,
        count_only: query.take_flag("count_only")?,
        continue_token: query.take_text("continue")?,
    };
    query.finish()?;
    let answer = state.backend.read(request, consistency).await?;
    let body = RangeAnswer {
        header: answer.header,
        kvs: kvs_json(&answer.response.kvs, encoding)?,
        count: answer.response.count,
        more: answer.response.more,
        continue_token: answer.response.continue_token,
    };
    Ok(Json(body).into_response())
}

/// The key set of a range read: `prefix` (empty = every key), or `key` with optional `range_end`.
fn range_from_query(
    query: &mut QueryParams,
    encoding: TextEncoding,
) -> Result<KeyRange, NodeError> {
    let mut decoded = |name: &str| {
        query
            .take_bytes(name)
            .map(|text| encoding.decode(name, &text))
            .transpose()
    };
    let prefix = decoded("prefix")?;
    let key = decoded("key")?;
    let range_end = decoded("range_end")?;
    match (prefix, key) {
        (Some(prefix), None) => key_range(prefix, range_end, true),
        (None, Some(key)) => key_range(key, range_end, false),
        (Some(_), Some(_)) => Err(NodeError::Invalid(
            "give either prefix or key, not both".into(),
        )),
        (None, None) => Err(NodeError::Invalid(
            "a range read needs prefix=P, or key=K with an optional range_end".into(),
        )),
    }
}
