//! `GET /v1/cluster/status`: every member's status as one member sees it, for the web console's
//! Cluster page and anyone who can reach only one member. The member asks every other member over
//! the peer port at once, each bounded by `CLUSTER_STATUS_TIMEOUT`; a member that does not answer
//! is listed with why, so a member that is down shows up instead of holding the answer back.
//! `{header, quota_backend_bytes, members: [{id, peer_url, client_url, grpc_url, is_learner,
//! status, error}]}`, in member id order; `status` is what `GET /v1/status` on that member says.

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::error::ApiError;
use super::query::QueryParams;
use super::state::ApiState;
use crate::backend::{KvBackend, MemberInfo, MemberStatus, ResponseHeader};

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new().route("/v1/cluster/status", get(cluster_status::<B>))
}

#[derive(Serialize, utoipa::ToSchema)]
struct ClusterStatusAnswer {
    header: ResponseHeader,
    /// The answering member's `--quota-backend-bytes` (null without one).
    quota_backend_bytes: Option<u64>,
    members: Vec<ClusterMemberJson>,
}

/// One member: where it is, and its status or why there is none.
#[derive(Serialize, utoipa::ToSchema)]
struct ClusterMemberJson {
    #[serde(flatten)]
    member: MemberInfo,
    status: Option<MemberStatus>,
    error: Option<String>,
}

/// `GET /v1/cluster/status`.
#[utoipa::path(
    get,
    path = "/v1/cluster/status",
    tag = "cluster",
    summary = "Every member's status, asked by this member over the peer port",
    responses(
        (status = 200, description = "The members and their status", body = ClusterStatusAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
pub(super) async fn cluster_status<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let header = state.backend.header()?;
    let members = state.backend.members().await?;
    let mut statuses: BTreeMap<u64, Result<MemberStatus, String>> = state
        .backend
        .cluster_status()
        .await?
        .into_iter()
        .map(|entry| (entry.member_id, entry.status))
        .collect();
    let members = members
        .into_iter()
        .map(|member| {
            let answer = statuses
                .remove(&member.id)
                .unwrap_or_else(|| Err("not in the membership when asked".to_string()));
            let (status, error) = match answer {
                Ok(status) => (Some(status), None),
                Err(error) => (None, Some(error)),
            };
            ClusterMemberJson {
                member,
                status,
                error,
            }
        })
        .collect();
    let answer = ClusterStatusAnswer {
        header,
        quota_backend_bytes: state.backend.quota_backend_bytes(),
        members,
    };
    Ok(Json(answer).into_response())
}
