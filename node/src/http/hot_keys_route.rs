//! `GET /v1/conflicts?top=N`: this member's hottest conflicting keys over its sliding window
//! (`crate::hot_keys`), `{header, window_seconds, keys: [{key, conflicts, retries,
//! last_revision}]}`, hottest first. `top` defaults to 10 and may not exceed what the top-k can
//! hold. Counts are this member's own (conflicts are counted where the client was answered);
//! `revkv ctl conflicts top` adds up every member's answer.
//!
//! `GET /v1/conflicts/rates`: this member's conflicts and client retries per interval over the
//! last minutes (`crate::conflict_rates`), `{header, interval_seconds, intervals: [{start_unix_seconds,
//! conflicts, retries}]}`, oldest first, every interval listed: the web console's chart.

use std::time::Instant;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::error::ApiError;
use super::keys::{base64_encode, TextEncoding};
use super::opening::open_query;
use super::query::QueryParams;
use super::state::ApiState;
use crate::auth::authenticate::unix_now;
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;

/// Keys answered when the request names no `top`.
const DEFAULT_TOP: u64 = 10;

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/conflicts", get(hot_keys::<B>))
        .route("/v1/conflicts/rates", get(conflict_rates::<B>))
}

#[derive(Serialize, utoipa::ToSchema)]
struct HotKeysAnswer {
    header: ResponseHeader,
    window_seconds: u64,
    keys: Vec<HotKeyJson>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct HotKeyJson {
    key: String,
    conflicts: u64,
    retries: u64,
    last_revision: u64,
}

#[utoipa::path(
    get,
    path = "/v1/conflicts",
    tag = "kv",
    summary = "The keys that conflicted most on this member over the window",
    params(super::openapi_shapes::EncodingQuery, ("top" = Option<u64>, Query, description = "How many keys (default 10; at most the hot-key capacity times 5, 1280 with default flags)", minimum = 1)),
    responses(
        (status = 200, description = "The hottest keys", body = HotKeysAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn hot_keys<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let (encoding, top) = open_query(raw_query.as_deref(), |query| {
        Ok(query.take_u64("top")?.unwrap_or(DEFAULT_TOP))
    })?;
    let limits = &state.limits.hot_keys;
    let most = (limits.capacity * limits.buckets) as u64;
    if top == 0 || top > most {
        return Err(NodeError::Invalid(format!("top must be 1 to {most}, not {top}")).into());
    }
    let keys = state
        .hot_keys
        .top(usize::try_from(top).unwrap_or(usize::MAX), Instant::now())
        .into_iter()
        .map(|hot| HotKeyJson {
            key: key_text(&hot.key, encoding),
            conflicts: hot.conflicts,
            retries: hot.retries,
            last_revision: hot.last_revision,
        })
        .collect();
    let answer = HotKeysAnswer {
        header: state.backend.header()?,
        window_seconds: state.hot_keys.window().as_secs(),
        keys,
    };
    Ok(Json(answer).into_response())
}

#[derive(Serialize, utoipa::ToSchema)]
struct ConflictRatesAnswer {
    header: ResponseHeader,
    interval_seconds: u64,
    intervals: Vec<ConflictIntervalJson>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ConflictIntervalJson {
    /// The Unix time the interval starts at.
    start_unix_seconds: u64,
    conflicts: u64,
    retries: u64,
}

#[utoipa::path(
    get,
    path = "/v1/conflicts/rates",
    tag = "kv",
    summary = "Conflicts and client retries on this member per interval over the last minutes",
    responses(
        (status = 200, description = "Every interval, oldest first", body = ConflictRatesAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
pub(super) async fn conflict_rates<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let intervals = state
        .conflict_rates
        .history(unix_now())
        .into_iter()
        .map(|interval| ConflictIntervalJson {
            start_unix_seconds: interval.start_unix_seconds,
            conflicts: interval.conflicts,
            retries: interval.retries,
        })
        .collect();
    let answer = ConflictRatesAnswer {
        header: state.backend.header()?,
        interval_seconds: state.conflict_rates.limits().interval_seconds,
        intervals,
    };
    Ok(Json(answer).into_response())
}

/// A key as text: UTF-8 as it is, base64 when asked (`encoding=base64`) or when it is not UTF-8.
fn key_text(key: &[u8], encoding: TextEncoding) -> String {
    match (encoding, std::str::from_utf8(key)) {
        (TextEncoding::Utf8, Ok(text)) => text.to_string(),
        _ => base64_encode(key),
    }
}
