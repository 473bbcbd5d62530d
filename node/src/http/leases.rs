//! Leases (contract sections 4 and 7): `POST /v1/leases` grants `{ttl, id?}`, `GET /v1/leases`
//! lists the ids, `GET /v1/leases/{id}?keys=true` answers the time-to-live (remaining and granted)
//! and the attached keys, `DELETE /v1/leases/{id}` revokes (deleting the attached keys in one
//! revision), and `POST /v1/leases/{id}/keepalive` renews. `POST /v1/leases/keepalive` is the
//! streaming keep-alive (`lease_stream`). Lease ids are JSON numbers; an unknown lease is
//! `404 not_found`.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use revkv_storage::{Request, Response as StoreResponse};
use serde::{Deserialize, Serialize};

use super::auth_gate::CheckedState;
use super::body::read_json;
use super::error::ApiError;
use super::keys::TextEncoding;
use super::lease_stream::keep_alive_stream;
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::{unexpected_response, HeaderAnswer};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/leases", post(grant::<B>).get(list::<B>))
        .route(
            "/v1/leases/{id}",
            get(time_to_live::<B>).delete(revoke::<B>),
        )
        .route("/v1/leases/{id}/keepalive", post(keep_alive::<B>))
        .route("/v1/leases/keepalive", post(keep_alive_stream::<B>))
}

/// The body of a grant. `id` 0 or absent lets the cluster pick one, as in etcd.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    /// Seconds; raised to the minimum TTL.
    #[schema(minimum = 0)]
    ttl: i64,
    /// The id to grant (0 or absent: the cluster picks one).
    #[serde(default)]
    #[schema(minimum = 0)]
    id: i64,
}

/// The answer of a grant and of a keep-alive: `{header, id, ttl}`.
#[derive(Serialize, utoipa::ToSchema)]
struct LeaseAnswer {
    header: ResponseHeader,
    id: i64,
    ttl: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
struct TimeToLiveAnswer {
    header: ResponseHeader,
    id: i64,
    /// Seconds left.
    ttl: i64,
    granted_ttl: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<Vec<String>>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct LeaseId {
    id: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ListAnswer {
    header: ResponseHeader,
    leases: Vec<LeaseId>,
}

/// A lease id from the path: a positive whole number.
fn lease_id(text: &str) -> Result<i64, NodeError> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(NodeError::Invalid(format!(
            "lease id must be a positive whole number, not {text:?}"
        ))),
    }
}

/// `POST /v1/leases` with `{"ttl": S, "id"?: N}`: `{header, id, ttl}` (the TTL granted, at least
/// the minimum).
#[utoipa::path(
    post,
    path = "/v1/leases",
    tag = "lease",
    summary = "Grant a lease",
    request_body(content = GrantBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The lease granted (ttl: at least the minimum)", body = LeaseAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn grant<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let body: GrantBody = read_json(body, state.limits.max_body_bytes).await?;
    if body.ttl < 0 {
        return Err(
            NodeError::Invalid(format!("ttl must not be negative, not {}", body.ttl)).into(),
        );
    }
    if body.id < 0 {
        return Err(
            NodeError::Invalid(format!("lease id must be positive, not {}", body.id)).into(),
        );
    }
    let id = (body.id != 0).then_some(body.id);
    let granted = state.backend.lease_grant(id, body.ttl).await?;
    let answer = LeaseAnswer {
        header: granted.header,
        id: granted.id,
        ttl: granted.ttl_seconds,
    };
    Ok(Json(answer).into_response())
}

/// `DELETE /v1/leases/{id}`: `{header}`, whose revision is the one the deletes took (unchanged
/// when no key was attached).
#[utoipa::path(
    delete,
    path = "/v1/leases/{id}",
    tag = "lease",
    summary = "Revoke a lease and delete its keys",
    params(("id" = i64, Path, description = "The lease id, a positive whole number", minimum = 1)),
    responses(
        (status = 200, description = "Revoked; the revision is the one the deletes took", body = super::wire::HeaderAnswer),
        (status = "4XX", description = "Refused: not_found, invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn revoke<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    Path(id): Path<String>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let id = lease_id(&id)?;
    let written = state.backend.write(Request::LeaseRevoke { id }).await?;
    let StoreResponse::LeaseRevoke(_) = written.response else {
        return Err(unexpected_response("lease revoke").into());
    };
    Ok(Json(HeaderAnswer {
        header: written.header,
    })
    .into_response())
}

/// `POST /v1/leases/{id}/keepalive`: `{header, id, ttl}` with the granted TTL.
#[utoipa::path(
    post,
    path = "/v1/leases/{id}/keepalive",
    tag = "lease",
    summary = "Renew a lease once",
    params(("id" = i64, Path, description = "The lease id, a positive whole number", minimum = 1)),
    responses(
        (status = 200, description = "Renewed: the granted TTL", body = LeaseAnswer),
        (status = "4XX", description = "Refused: not_found, invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn keep_alive<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Path(id): Path<String>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let id = lease_id(&id)?;
    let (header, ttl) = state.backend.lease_keep_alive(id).await?;
    Ok(Json(LeaseAnswer { header, id, ttl }).into_response())
}

/// `GET /v1/leases/{id}?keys=true`: `{header, id, ttl, granted_ttl, keys?}`; keys in the
/// `encoding` asked for.
#[utoipa::path(
    get,
    path = "/v1/leases/{id}",
    tag = "lease",
    summary = "A lease's remaining time, and with keys=true its keys",
    params(("id" = i64, Path, description = "The lease id, a positive whole number", minimum = 1), super::openapi_shapes::EncodingQuery, ("keys" = Option<super::openapi_shapes::QueryFlag>, Query, description = "Answer the attached keys")),
    responses(
        (status = 200, description = "The lease", body = TimeToLiveAnswer),
        (status = "4XX", description = "Refused: not_found, invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn time_to_live<B: KvBackend>(
    CheckedState(state): CheckedState<B>,
    Path(id): Path<String>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = QueryParams::parse(raw_query.as_deref())?;
    let encoding = query.take_encoding()?;
    let with_keys = query.take_flag("keys")?;
    query.finish()?;
    let id = lease_id(&id)?;
    let reading = state.backend.lease_time_to_live(id, with_keys).await?;
    let keys = with_keys
        .then(|| encode_keys(&reading.keys, encoding))
        .transpose()?;
    let answer = TimeToLiveAnswer {
        header: reading.header,
        id,
        ttl: reading.remaining_ttl_seconds,
        granted_ttl: reading.granted_ttl_seconds,
        keys,
    };
    Ok(Json(answer).into_response())
}

fn encode_keys(keys: &[Vec<u8>], encoding: TextEncoding) -> Result<Vec<String>, NodeError> {
    keys.iter()
        .map(|key| {
            encoding.encode(key).ok_or_else(|| {
                NodeError::Invalid(
                    "an attached key is not valid UTF-8; repeat the request with encoding=base64"
                        .into(),
                )
            })
        })
        .collect()
}

/// `GET /v1/leases`: `{header, leases: [{id}]}`.
#[utoipa::path(
    get,
    path = "/v1/leases",
    tag = "lease",
    summary = "Every lease",
    responses(
        (status = 200, description = "The ids of every lease", body = ListAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn list<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let (header, ids) = state.backend.lease_ids().await?;
    let leases = ids.into_iter().map(|id| LeaseId { id }).collect();
    Ok(Json(ListAnswer { header, leases }).into_response())
}
