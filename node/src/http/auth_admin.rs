//! Users and roles (issue 15), root only (the gate decides): etcd's user and role verbs as
//! resources under `/v1/auth/users` and `/v1/auth/roles`. Changes go through raft as
//! `Request::Auth`; a password is hashed (argon2) on this member before it is proposed, so no
//! member ever logs or stores it. Permission keys are UTF-8 strings, as keys are elsewhere in
//! the JSON API.

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use revkv_storage::auth::{AuthRequest, AuthState, Permission, PermissionKind};
use revkv_storage::{KeyRange, RangeEnd};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::auth_routes::{change_auth, run_password_work};
use super::body::read_json;
use super::error::ApiError;
use super::openapi_shapes::ErrorBody;
use super::query::QueryParams;
use super::state::ApiState;
use crate::auth::password::hash_password;
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::{Missing, NodeError};

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/auth/users", get(list_users::<B>))
        .route(
            "/v1/auth/users/{name}",
            get(get_user::<B>)
                .put(add_user::<B>)
                .delete(delete_user::<B>),
        )
        .route("/v1/auth/users/{name}/password", post(change_password::<B>))
        .route(
            "/v1/auth/users/{name}/roles/{role}",
            put(grant_role::<B>).delete(revoke_role::<B>),
        )
        .route("/v1/auth/roles", get(list_roles::<B>))
        .route(
            "/v1/auth/roles/{name}",
            get(get_role::<B>)
                .put(add_role::<B>)
                .delete(delete_role::<B>),
        )
        .route(
            "/v1/auth/roles/{name}/permissions",
            post(grant_permission::<B>).delete(revoke_permission::<B>),
        )
}

/// The body of adding a user or changing its password.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordBody {
    password: String,
}

/// One permission as the API shows and takes it: etcd's `{permType, key, range_end}`.
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionJson {
    /// `read`, `write` or `readwrite`.
    permission: String,
    key: String,
    /// The end of the range, exclusive; `"\u0000"` means every key from `key` on. Absent (and
    /// `prefix` false): `key` alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    range_end: Option<String>,
    /// Every key that starts with `key` (etcdctl's `--prefix`). Not with `range_end`.
    #[serde(default, skip_serializing)]
    prefix: bool,
}

/// The keys of a permission to revoke: exactly the range it was granted on.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionKeysBody {
    key: String,
    #[serde(default)]
    range_end: Option<String>,
    #[serde(default)]
    prefix: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
struct NamesAnswer {
    header: ResponseHeader,
    names: Vec<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct UserAnswer {
    header: ResponseHeader,
    name: String,
    roles: Vec<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct RoleAnswer {
    header: ResponseHeader,
    name: String,
    permissions: Vec<PermissionJson>,
}

/// The names in a user's or role's path, from a request that takes no query: a `String` for one
/// name, `(String, String)` for a user and a role. As an extractor it refuses a bad path, then a
/// query, before a handler reads any body, and it saves each handler those checks.
struct Named<T>(T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Named<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let path = Path::<T>::from_request_parts(parts, state).await;
        let Path(names) = path.map_err(|rejection| {
            NodeError::Invalid(format!("bad name in the path: {rejection}"))
        })?;
        no_query(parts.uri.query())?;
        Ok(Named(names))
    }
}

fn no_query(raw_query: Option<&str>) -> Result<(), NodeError> {
    QueryParams::parse(raw_query)?.finish()
}

/// The answer of both listings: the names `names_of` takes from the auth records.
fn names_answer<B: KvBackend>(
    state: &ApiState<B>,
    raw_query: Option<String>,
    names_of: impl FnOnce(&AuthState) -> Vec<String>,
) -> Result<Response, ApiError> {
    no_query(raw_query.as_deref())?;
    let names = names_of(&state.backend.auth_records());
    let header = state.backend.header()?;
    Ok(Json(NamesAnswer { header, names }).into_response())
}

/// The answer about one user or role: `find` looks `name` up in the auth records (nothing found
/// is `not_found`, naming the `kind` of record), and `answer` shapes what it found.
fn record_answer<B: KvBackend, T, A: Serialize>(
    state: &ApiState<B>,
    kind: &str,
    name: String,
    find: impl FnOnce(&AuthState, &str) -> Option<T>,
    answer: impl FnOnce(ResponseHeader, String, T) -> A,
) -> Result<Response, ApiError> {
    let found = find(&state.backend.auth_records(), &name).ok_or_else(|| {
        NodeError::NotFound(Missing::Other(format!("{kind} {name} does not exist")))
    })?;
    let header = state.backend.header()?;
    Ok(Json(answer(header, name, found)).into_response())
}

#[utoipa::path(get, path = "/v1/auth/users", tag = "auth", summary = "Every user's name",
    responses((status = 200, description = "The users", body = NamesAnswer),
        (status = "4XX", description = "Refused: invalid, unauthenticated, forbidden", body = ErrorBody)))]
async fn list_users<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    names_answer(&state, raw_query, |records| {
        records.users.keys().cloned().collect()
    })
}

#[utoipa::path(get, path = "/v1/auth/users/{name}", tag = "auth", summary = "A user's roles",
    params(("name" = String, Path, description = "The user")),
    responses((status = 200, description = "The user", body = UserAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody)))]
async fn get_user<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
) -> Result<Response, ApiError> {
    record_answer(
        &state,
        "user",
        name,
        |records, name| Some(records.users.get(name)?.roles.iter().cloned().collect()),
        |header, name, roles| UserAnswer {
            header,
            name,
            roles,
        },
    )
}

#[utoipa::path(put, path = "/v1/auth/users/{name}", tag = "auth", summary = "Add a user",
    params(("name" = String, Path, description = "The new user")),
    request_body(content = PasswordBody, content_type = "application/json"),
    responses((status = 200, description = "Added", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: invalid (exists, bad name, limit), unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn add_user<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let password_hash = hashed_password_of(&state, body).await?;
    let request = AuthRequest::UserAdd {
        name,
        password_hash,
    };
    change_auth(&state, request).await
}

#[utoipa::path(post, path = "/v1/auth/users/{name}/password", tag = "auth", summary = "Change a user's password",
    params(("name" = String, Path, description = "The user")),
    request_body(content = PasswordBody, content_type = "application/json"),
    responses((status = 200, description = "Changed", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn change_password<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let password_hash = hashed_password_of(&state, body).await?;
    let request = AuthRequest::UserChangePassword {
        name,
        password_hash,
    };
    change_auth(&state, request).await
}

/// Reads a `{password}` body and hashes the password off the async threads.
async fn hashed_password_of<B: KvBackend>(
    state: &ApiState<B>,
    body: Body,
) -> Result<String, NodeError> {
    let body: PasswordBody = read_json(body, state.limits.max_body_bytes).await?;
    if body.password.is_empty() {
        return Err(NodeError::Invalid("a password must not be empty".into()));
    }
    let scheme = state.limits.auth.password_hash;
    run_password_work(state, move || {
        hash_password(&body.password, scheme).map_err(|error| NodeError::Invalid(error.to_string()))
    })
    .await
}

#[utoipa::path(delete, path = "/v1/auth/users/{name}", tag = "auth", summary = "Delete a user",
    params(("name" = String, Path, description = "The user")),
    responses((status = 200, description = "Deleted", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid (root while enabled), unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn delete_user<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
) -> Result<Response, ApiError> {
    change_auth(&state, AuthRequest::UserDelete { name }).await
}

#[utoipa::path(put, path = "/v1/auth/users/{name}/roles/{role}", tag = "auth", summary = "Grant a role to a user",
    params(("name" = String, Path, description = "The user"), ("role" = String, Path, description = "The role")),
    responses((status = 200, description = "Granted", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn grant_role<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named((user, role)): Named<(String, String)>,
) -> Result<Response, ApiError> {
    change_auth(&state, AuthRequest::UserGrantRole { user, role }).await
}

#[utoipa::path(delete, path = "/v1/auth/users/{name}/roles/{role}", tag = "auth", summary = "Revoke a role from a user",
    params(("name" = String, Path, description = "The user"), ("role" = String, Path, description = "The role")),
    responses((status = 200, description = "Revoked", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn revoke_role<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named((user, role)): Named<(String, String)>,
) -> Result<Response, ApiError> {
    change_auth(&state, AuthRequest::UserRevokeRole { user, role }).await
}

#[utoipa::path(get, path = "/v1/auth/roles", tag = "auth", summary = "Every role's name",
    responses((status = 200, description = "The roles", body = NamesAnswer),
        (status = "4XX", description = "Refused: invalid, unauthenticated, forbidden", body = ErrorBody)))]
async fn list_roles<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    names_answer(&state, raw_query, |records| {
        records.roles.keys().cloned().collect()
    })
}

#[utoipa::path(get, path = "/v1/auth/roles/{name}", tag = "auth", summary = "A role's permissions",
    params(("name" = String, Path, description = "The role")),
    responses((status = 200, description = "The role", body = RoleAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody)))]
async fn get_role<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
) -> Result<Response, ApiError> {
    record_answer(
        &state,
        "role",
        name,
        |records, name| {
            Some(
                records
                    .roles
                    .get(name)?
                    .iter()
                    .map(permission_json)
                    .collect(),
            )
        },
        |header, name, permissions| RoleAnswer {
            header,
            name,
            permissions,
        },
    )
}

#[utoipa::path(put, path = "/v1/auth/roles/{name}", tag = "auth", summary = "Add a role",
    params(("name" = String, Path, description = "The new role")),
    responses((status = 200, description = "Added", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: invalid (exists, bad name, limit), unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn add_role<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
) -> Result<Response, ApiError> {
    change_auth(&state, AuthRequest::RoleAdd { name }).await
}

#[utoipa::path(delete, path = "/v1/auth/roles/{name}", tag = "auth", summary = "Delete a role (and take it from every user)",
    params(("name" = String, Path, description = "The role")),
    responses((status = 200, description = "Deleted", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid (root while enabled), unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn delete_role<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(name): Named<String>,
) -> Result<Response, ApiError> {
    change_auth(&state, AuthRequest::RoleDelete { name }).await
}

#[utoipa::path(post, path = "/v1/auth/roles/{name}/permissions", tag = "auth", summary = "Grant a permission to a role",
    params(("name" = String, Path, description = "The role")),
    request_body(content = PermissionJson, content_type = "application/json"),
    responses((status = 200, description = "Granted", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn grant_permission<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(role): Named<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let body: PermissionJson = read_json(body, state.limits.max_body_bytes).await?;
    let kind = permission_kind(&body.permission)?;
    let keys = key_range(body.key, body.range_end, body.prefix)?;
    let permission = Permission { kind, keys };
    change_auth(
        &state,
        AuthRequest::RoleGrantPermission { role, permission },
    )
    .await
}

#[utoipa::path(delete, path = "/v1/auth/roles/{name}/permissions", tag = "auth", summary = "Revoke a role's permission on exactly a key range",
    params(("name" = String, Path, description = "The role")),
    request_body(content = PermissionKeysBody, content_type = "application/json"),
    responses((status = 200, description = "Revoked", body = super::auth_routes::AuthChangeAnswer),
        (status = "4XX", description = "Refused: not_found, invalid, unauthenticated, forbidden", body = ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = ErrorBody)))]
async fn revoke_permission<B: KvBackend>(
    State(state): State<ApiState<B>>,
    Named(role): Named<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let body: PermissionKeysBody = read_json(body, state.limits.max_body_bytes).await?;
    let keys = key_range(body.key, body.range_end, body.prefix)?;
    change_auth(&state, AuthRequest::RoleRevokePermission { role, keys }).await
}

fn permission_kind(text: &str) -> Result<PermissionKind, NodeError> {
    match text.to_ascii_lowercase().as_str() {
        "read" => Ok(PermissionKind::Read),
        "write" => Ok(PermissionKind::Write),
        "readwrite" => Ok(PermissionKind::ReadWrite),
        _ => Err(NodeError::Invalid(
            "permission must be read, write or readwrite".into(),
        )),
    }
}

/// etcd's key and range_end: no end is one key, `"\0"` every key from `key` on, and `prefix`
/// every key that starts with `key`.
fn key_range(key: String, range_end: Option<String>, prefix: bool) -> Result<KeyRange, NodeError> {
    if key.is_empty() {
        return Err(NodeError::Invalid(
            "a permission's key must not be empty".into(),
        ));
    }
    match (range_end, prefix) {
        (Some(_), true) => Err(NodeError::Invalid(
            "give range_end or prefix, not both".into(),
        )),
        (None, true) => Ok(KeyRange::prefix(key)),
        (None, false) => Ok(KeyRange::single(key)),
        (Some(end), false) if end == "\0" => Ok(KeyRange {
            start: key.into_bytes(),
            end: RangeEnd::Unbounded,
        }),
        (Some(end), false) if end.as_bytes() > key.as_bytes() => Ok(KeyRange {
            start: key.into_bytes(),
            end: RangeEnd::Until(end.into_bytes()),
        }),
        (Some(_), false) => Err(NodeError::Invalid(
            "range_end must be above key (or \"\\u0000\" for every key from key on)".into(),
        )),
    }
}

fn permission_json(permission: &Permission) -> PermissionJson {
    let kind = match permission.kind {
        PermissionKind::Read => "read",
        PermissionKind::Write => "write",
        PermissionKind::ReadWrite => "readwrite",
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let range_end = match &permission.keys.end {
        RangeEnd::Single => None,
        RangeEnd::Until(end) => Some(text(end)),
        RangeEnd::Unbounded => Some("\0".to_string()),
    };
    PermissionJson {
        permission: kind.to_string(),
        key: text(&permission.keys.start),
        range_end,
        prefix: false,
    }
}
