//! Auth's own routes (issue 15), with etcd's meanings: `POST /v1/auth/authenticate` trades a
//! user name and password for a token, `GET /v1/auth/status` says whether auth is enabled, and
//! `POST /v1/auth/enable` / `disable` switch it (root only, as the gate decides). Users and roles
//! are administered in `auth_admin`. Every change is a `Request::Auth` through raft, so all
//! members agree; password hashing and checking run off the async threads, bounded by
//! `AuthOptions::max_concurrent_password_checks`.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use revkv_storage::auth::AuthRequest;
use revkv_storage::{Request, Response as StoreResponse};
use serde::{Deserialize, Serialize};

use super::body::read_json;
use super::error::ApiError;
use super::openapi_shapes::ErrorBody;
use super::query::QueryParams;
use super::state::ApiState;
use crate::auth::authenticate::{fill_random, issue_token, records_with_token_key, unix_now};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/auth/authenticate", post(authenticate::<B>))
        .route("/v1/auth/status", get(status::<B>))
        .route("/v1/auth/enable", post(enable::<B>))
        .route("/v1/auth/disable", post(disable::<B>))
}

/// The body of `POST /v1/auth/authenticate`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialsBody {
    name: String,
    password: String,
}

#[derive(Serialize, utoipa::ToSchema)]
struct TokenAnswer {
    header: ResponseHeader,
    /// Send as `Authorization: Bearer TOKEN`; valid on every member until it expires.
    token: String,
}

#[derive(Serialize, utoipa::ToSchema)]
struct AuthStatusAnswer {
    header: ResponseHeader,
    enabled: bool,
    auth_revision: u64,
}

/// The answer of every auth change: the auth revision it produced.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AuthChangeAnswer {
    pub header: ResponseHeader,
    pub auth_revision: u64,
}

/// `POST /v1/auth/authenticate`: a token for a user name and password.
#[utoipa::path(
    post,
    path = "/v1/auth/authenticate",
    tag = "auth",
    summary = "Trade a user name and password for a token",
    request_body(content = CredentialsBody, content_type = "application/json"),
    responses(
        (status = 200, description = "A token, valid on every member until it expires", body = TokenAnswer),
        (status = 401, description = "unauthenticated: wrong user name or password", body = ErrorBody),
        (status = "4XX", description = "Refused: invalid (auth is not enabled)", body = ErrorBody),
        (status = "5XX", description = "unavailable: too many password checks at once", body = ErrorBody),
    )
)]
async fn authenticate<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let body: CredentialsBody = read_json(body, state.limits.max_body_bytes).await?;
    let records = records_with_token_key(state.backend.as_ref()).await?;
    let options = state.limits.auth.clone();
    let token = run_password_work(&state, move || {
        issue_token(&records, &body.name, &body.password, &options, unix_now())
    })
    .await?;
    state.metrics.auth.record_authenticated();
    let header = state.backend.header()?;
    Ok(Json(TokenAnswer { header, token }).into_response())
}

/// Slow password work (argon2) for a handler: `auth::password::run_password_work` with this
/// member's bound and request timeout.
pub async fn run_password_work<B: KvBackend, T: Send + 'static>(
    state: &ApiState<B>,
    work: impl FnOnce() -> Result<T, NodeError> + Send + 'static,
) -> Result<T, NodeError> {
    let wait = state.backend.request_timeout();
    crate::auth::password::run_password_work(&state.password_checks, wait, work).await
}

/// `GET /v1/auth/status`.
#[utoipa::path(
    get,
    path = "/v1/auth/status",
    tag = "auth",
    summary = "Whether auth is enabled, and the auth revision",
    responses(
        (status = 200, description = "Auth's state", body = AuthStatusAnswer),
        (status = "4XX", description = "Refused: invalid", body = ErrorBody),
        (status = "5XX", description = "unavailable", body = ErrorBody),
    )
)]
async fn status<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let records = state.backend.auth_records();
    Ok(Json(AuthStatusAnswer {
        header: state.backend.header()?,
        enabled: records.enabled,
        auth_revision: records.revision,
    })
    .into_response())
}

/// `POST /v1/auth/enable`: needs a `root` user holding the `root` role.
#[utoipa::path(
    post,
    path = "/v1/auth/enable",
    tag = "auth",
    summary = "Enable auth (a root user holding the root role must exist)",
    responses(
        (status = 200, description = "Enabled", body = AuthChangeAnswer),
        (status = "4XX", description = "Refused: invalid (no root user with the root role), unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody),
    )
)]
async fn enable<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let mut token_key = vec![0u8; 32];
    fill_random(&mut token_key);
    change_auth(&state, AuthRequest::Enable { token_key }).await
}

/// `POST /v1/auth/disable`.
#[utoipa::path(
    post,
    path = "/v1/auth/disable",
    tag = "auth",
    summary = "Disable auth",
    responses(
        (status = 200, description = "Disabled", body = AuthChangeAnswer),
        (status = "4XX", description = "Refused: unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody),
    )
)]
async fn disable<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    change_auth(&state, AuthRequest::Disable).await
}

/// Replicates one auth change and answers the auth revision it produced.
pub async fn change_auth<B: KvBackend>(
    state: &ApiState<B>,
    change: AuthRequest,
) -> Result<Response, ApiError> {
    let written = state.backend.write(Request::Auth(change)).await?;
    let StoreResponse::Auth { auth_revision } = written.response else {
        return Err(super::wire::unexpected_response("auth change").into());
    };
    Ok(Json(AuthChangeAnswer {
        header: written.header,
        auth_revision,
    })
    .into_response())
}
