//! Member-wide routes: `GET /v1/status`, `POST /v1/compact`, `GET /v1/hash`, and the probes
//! `GET /healthz` (the process serves HTTP) and `GET /readyz` (the member has a leader and has
//! caught up once since it started, so it does not flap with the writes in flight; `503
//! unavailable` with `Retry-After` otherwise, so load balancers skip it).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use revkv_storage::{Request, Response as StoreResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::body::read_json;
use super::error::ApiError;
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::{unexpected_response, HeaderAnswer};
use crate::backend::{KvBackend, MemberStatus, ResponseHeader};
use crate::error::NodeError;

/// How long a client or load balancer should wait before asking `/readyz` again.
const READY_RETRY_AFTER: Duration = Duration::from_secs(1);

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/status", get(get_status::<B>))
        .route("/v1/compact", post(post_compact::<B>))
        .route("/v1/hash", get(get_hash::<B>))
        .route("/healthz", get(get_health))
        .route("/readyz", get(get_ready::<B>))
}

#[derive(Serialize, utoipa::ToSchema)]
struct StatusAnswer {
    header: ResponseHeader,
    #[serde(flatten)]
    status: MemberStatus,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CompactBody {
    revision: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
struct HashAnswer {
    header: ResponseHeader,
    hash: u64,
    revision: u64,
    compact_revision: u64,
}

/// The header of an answer that reflects no particular read, built from the member's status.
pub(super) fn header_of(status: &MemberStatus) -> ResponseHeader {
    ResponseHeader {
        revision: status.revision,
        member_id: status.member_id,
        raft_term: status.raft_term,
    }
}

/// `GET /v1/status`: `{header, member_id, leader_id, raft_term, ...}`.
#[utoipa::path(
    get,
    path = "/v1/status",
    tag = "cluster",
    summary = "This member's status",
    responses(
        (status = 200, description = "The status", body = StatusAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_status<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let status = state.backend.status().await?;
    let answer = StatusAnswer {
        header: header_of(&status),
        status,
    };
    Ok(Json(answer).into_response())
}

/// `POST /v1/compact` with `{"revision": R}`: replicated, so every member compacts at one log
/// position.
#[utoipa::path(
    post,
    path = "/v1/compact",
    tag = "cluster",
    summary = "Compact the history up to a revision, on every member",
    request_body(content = CompactBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Compacted", body = super::wire::HeaderAnswer),
        (status = "4XX", description = "Refused: invalid, compacted, future_revision", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn post_compact<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let body: CompactBody = read_json(body, state.limits.max_body_bytes).await?;
    let request = Request::Compact {
        revision: body.revision,
    };
    let written = state.backend.write(request).await?;
    if written.response != StoreResponse::Compact {
        return Err(unexpected_response("compact").into());
    }
    Ok(Json(HeaderAnswer {
        header: written.header,
    })
    .into_response())
}

/// `GET /v1/hash[?revision=R]`: the replica-consistency hash, equal on members that applied the
/// same log.
#[utoipa::path(
    get,
    path = "/v1/hash",
    tag = "cluster",
    summary = "A hash of the MVCC state up to a revision, equal on every member",
    params(("revision" = Option<u64>, Query, description = "Hash the state up to this revision (default: the current one)")),
    responses(
        (status = 200, description = "The hash", body = HashAnswer),
        (status = "4XX", description = "Refused: invalid, compacted, future_revision", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_hash<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = QueryParams::parse(raw_query.as_deref())?;
    let revision = query.take_u64("revision")?;
    query.finish()?;
    let (header, hash) = state.backend.hash(revision).await?;
    let answer = HashAnswer {
        header,
        hash: hash.hash,
        revision: hash.revision,
        compact_revision: hash.compact_revision,
    };
    Ok(Json(answer).into_response())
}

/// `GET /healthz`: answering at all is the health signal.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "cluster",
    summary = "The process is up",
    responses(
        (status = 200, description = "Always `{\"health\": true}`", body = Object),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_health() -> Response {
    Json(json!({ "health": true })).into_response()
}

/// `GET /readyz`: ready to serve linearizable requests.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "cluster",
    summary = "This member has a leader and has caught up",
    responses(
        (status = 200, description = "`{\"ready\": true}`", body = Object),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_ready<B: KvBackend>(State(state): State<ApiState<B>>) -> Result<Response, ApiError> {
    if !state.backend.is_ready().await {
        return Err(NodeError::Unavailable {
            reason: "the member has no leader or has not caught up with the log yet".into(),
            retry_after: READY_RETRY_AFTER,
        }
        .into());
    }
    Ok(Json(json!({ "ready": true })).into_response())
}
