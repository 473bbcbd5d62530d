//! Membership routes: `GET /v1/members`, `POST /v1/members` (add a learner), `POST
//! /v1/members/{id}/promote`, `DELETE /v1/members/{id}`, and `POST /v1/leader/transfer`.
//!
//! Membership answers reflect no store read, so their header is taken from the member's status
//! before the change: if the member cannot report its status it cannot change membership either,
//! and a failure there leaves nothing half done.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::body::read_json;
use super::error::ApiError;
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::HeaderAnswer;
use crate::backend::{KvBackend, LearnerJoin, MemberInfo, ResponseHeader};
use crate::error::NodeError;

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/v1/members", get(list_members::<B>).post(add_learner::<B>))
        .route("/v1/members/{id}/promote", post(promote_member::<B>))
        .route("/v1/members/{id}", delete(remove_member::<B>))
        .route("/v1/leader/transfer", post(transfer_leader::<B>))
}

#[derive(Serialize, utoipa::ToSchema)]
struct MembersAnswer {
    header: ResponseHeader,
    members: Vec<MemberInfo>,
}

/// The body of `POST /v1/members`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct NewMemberBody {
    id: u64,
    peer_url: String,
    client_url: String,
    /// The member's etcd gRPC URL, if it serves etcd's API.
    #[serde(default)]
    grpc_url: Option<String>,
    /// Have the leader promote the learner once it has caught up; the answer then comes once
    /// the learner is in the membership, without waiting for it to catch up.
    #[serde(default)]
    auto_promote: bool,
    /// With `auto_promote`: the most log entries the learner may be behind the leader when it
    /// is promoted (default: the leader's `--auto-promote-max-lag`).
    #[serde(default)]
    auto_promote_max_lag: Option<u64>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct TransferBody {
    to: u64,
}

fn members_answer(header: ResponseHeader, members: Vec<MemberInfo>) -> Response {
    Json(MembersAnswer { header, members }).into_response()
}

/// A member id from the path; ids are positive whole numbers.
fn member_id(path: Result<Path<String>, PathRejection>) -> Result<u64, NodeError> {
    let Path(text) = path.map_err(|rejection| {
        NodeError::Invalid(format!("bad member id in the path: {rejection}"))
    })?;
    match text.parse::<u64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(NodeError::Invalid(format!(
            "a member id is a positive whole number, not {text:?}"
        ))),
    }
}

#[utoipa::path(
    get,
    path = "/v1/members",
    tag = "cluster",
    summary = "The members",
    responses(
        (status = 200, description = "The members", body = MembersAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn list_members<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let members = state.backend.members().await?;
    Ok(members_answer(state.backend.header()?, members))
}

/// Adds a learner; the backend answers once it has caught up (bounded), or, with `auto_promote`,
/// once it is in the membership (the leader promotes it when it has caught up).
#[utoipa::path(
    post,
    path = "/v1/members",
    tag = "cluster",
    summary = "Add a learner; answers once it has caught up",
    request_body(content = NewMemberBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The members after the change", body = MembersAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn add_learner<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let body: NewMemberBody = read_json(body, state.limits.max_body_bytes).await?;
    let join = learner_join(&body)?;
    let member = new_learner(body)?;
    let members = state.backend.add_learner(member, join).await?;
    Ok(members_answer(state.backend.header()?, members))
}

/// How the new learner joins, as the body's `auto_promote` and `auto_promote_max_lag` say.
fn learner_join(body: &NewMemberBody) -> Result<LearnerJoin, NodeError> {
    let names = ("auto_promote", "auto_promote_max_lag");
    LearnerJoin::asked(body.auto_promote, body.auto_promote_max_lag, names)
}

/// Checks a new member's fields: a positive id and http(s) URLs, so a typo cannot become a member
/// that every peer then fails to reach.
fn new_learner(body: NewMemberBody) -> Result<MemberInfo, NodeError> {
    if body.id == 0 {
        return Err(NodeError::Invalid("a member id must be positive".into()));
    }
    let urls = [
        ("peer_url", Some(&body.peer_url)),
        ("client_url", Some(&body.client_url)),
        ("grpc_url", body.grpc_url.as_ref()),
    ];
    for (name, url) in urls {
        let Some(url) = url else { continue };
        // A member's client URLs are stored space-separated (`MemberNode`), so no URL holds one.
        let has_host = ["http://", "https://"].iter().any(|scheme| {
            url.strip_prefix(scheme)
                .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
        });
        if !has_host {
            return Err(NodeError::Invalid(format!(
                "{name} must be an http:// or https:// URL without spaces, not {url:?}"
            )));
        }
    }
    Ok(MemberInfo {
        id: body.id,
        peer_url: body.peer_url,
        client_url: body.client_url,
        grpc_url: body.grpc_url,
        is_learner: true,
        auto_promote_max_lag: None,
    })
}

#[utoipa::path(
    post,
    path = "/v1/members/{id}/promote",
    tag = "cluster",
    summary = "Promote a learner to a voter",
    params(("id" = u64, Path, description = "The member id")),
    responses(
        (status = 200, description = "The members after the change", body = MembersAnswer),
        (status = "4XX", description = "Refused: invalid, not_found", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn promote_member<B: KvBackend>(
    State(state): State<ApiState<B>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    change_member(&state, path, raw_query, MemberChange::Promote).await
}

#[utoipa::path(
    delete,
    path = "/v1/members/{id}",
    tag = "cluster",
    summary = "Remove a member",
    params(("id" = u64, Path, description = "The member id")),
    responses(
        (status = 200, description = "The members after the change", body = MembersAnswer),
        (status = "4XX", description = "Refused: invalid, not_found", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn remove_member<B: KvBackend>(
    State(state): State<ApiState<B>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    change_member(&state, path, raw_query, MemberChange::Remove).await
}

/// What a `/v1/members/{id}` route does to the member.
enum MemberChange {
    Promote,
    Remove,
}

/// Runs a change to one member named in the path and answers the membership after it.
async fn change_member<B: KvBackend>(
    state: &ApiState<B>,
    path: Result<Path<String>, PathRejection>,
    raw_query: Option<String>,
    change: MemberChange,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let id = member_id(path)?;
    let members = match change {
        MemberChange::Promote => state.backend.promote(id).await?,
        MemberChange::Remove => state.backend.remove_member(id).await?,
    };
    Ok(members_answer(state.backend.header()?, members))
}

/// `POST /v1/leader/transfer` with `{"to": id}`.
#[utoipa::path(
    post,
    path = "/v1/leader/transfer",
    tag = "cluster",
    summary = "Hand leadership to another voter",
    request_body(content = TransferBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Transferred", body = super::wire::HeaderAnswer),
        (status = "4XX", description = "Refused: invalid, not_found", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn transfer_leader<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let body: TransferBody = read_json(body, state.limits.max_body_bytes).await?;
    state.backend.transfer_leader(body.to).await?;
    Ok(Json(HeaderAnswer {
        header: state.backend.header()?,
    })
    .into_response())
}
