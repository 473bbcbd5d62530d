//! Space maintenance routes: `GET /v1/alarms` (the alarms raised), `DELETE /v1/alarms` (clear
//! them, through raft, once there is room) and `POST /v1/defragment` (this member's state file
//! gives back the space compaction freed). See `space_quota.rs` for when the NOSPACE alarm rises
//! and `corruption_check/` for the CORRUPT alarm.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use revkv_storage::{Alarm, AlarmAction, Request, Response as StoreResponse};
use serde::Serialize;

use super::error::ApiError;
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::unexpected_response;
use crate::backend::{KvBackend, ResponseHeader};

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route(
            "/v1/alarms",
            get(get_alarms::<B>).delete(delete_alarms::<B>),
        )
        .route("/v1/defragment", post(post_defragment::<B>))
}

/// One raised alarm as the API shows it: etcd's `{memberID, alarm}`.
#[derive(Serialize, utoipa::ToSchema)]
struct AlarmJson {
    member_id: u64,
    /// The kind: NOSPACE (the member's state file passed its quota) or CORRUPT (the member's data
    /// differs from the rest of the cluster's).
    alarm: &'static str,
}

impl From<&Alarm> for AlarmJson {
    fn from(alarm: &Alarm) -> Self {
        AlarmJson {
            member_id: alarm.member_id,
            alarm: alarm.kind.name(),
        }
    }
}

fn alarms_json(alarms: &[Alarm]) -> Vec<AlarmJson> {
    alarms.iter().map(AlarmJson::from).collect()
}

#[derive(Serialize, utoipa::ToSchema)]
struct AlarmsAnswer {
    header: ResponseHeader,
    alarms: Vec<AlarmJson>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct DisarmAnswer {
    header: ResponseHeader,
    /// The alarms this request cleared.
    disarmed: Vec<AlarmJson>,
    /// The alarms still raised after it.
    alarms: Vec<AlarmJson>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct DefragmentAnswer {
    header: ResponseHeader,
    file_bytes_before: u64,
    file_bytes_after: u64,
    elapsed_ms: u128,
}

/// `GET /v1/alarms`: `{header, alarms: [{member_id, alarm}]}`, as this member has applied them.
#[utoipa::path(
    get,
    path = "/v1/alarms",
    tag = "maintenance",
    summary = "The raised alarms",
    responses(
        (status = 200, description = "The alarms", body = AlarmsAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_alarms<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let alarms = state.backend.alarms()?;
    let answer = AlarmsAnswer {
        header: state.backend.header()?,
        alarms: alarms_json(&alarms),
    };
    Ok(Json(answer).into_response())
}

/// `DELETE /v1/alarms[?member_id=N]`: clears every raised alarm (or only member N's), each through
/// raft. A member still past its quota raises its alarm again at its next check.
#[utoipa::path(
    delete,
    path = "/v1/alarms",
    tag = "maintenance",
    summary = "Disarm every alarm, or one member's",
    params(("member_id" = Option<u64>, Query, description = "Disarm only this member's alarms")),
    responses(
        (status = 200, description = "What was disarmed and what is still raised", body = DisarmAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn delete_alarms<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = QueryParams::parse(raw_query.as_deref())?;
    let member_id = query.take_u64("member_id")?;
    query.finish()?;
    let mut remaining = state.backend.alarms()?;
    let chosen: Vec<Alarm> = remaining
        .iter()
        .filter(|alarm| member_id.is_none_or(|id| alarm.member_id == id))
        .copied()
        .collect();
    let mut header = state.backend.header()?;
    for alarm in &chosen {
        let action = AlarmAction::Deactivate;
        let written = state
            .backend
            .write(Request::Alarm {
                action,
                alarm: *alarm,
            })
            .await?;
        let StoreResponse::Alarms(after) = written.response else {
            return Err(unexpected_response("alarm").into());
        };
        header = written.header;
        remaining = after;
    }
    let answer = DisarmAnswer {
        header,
        disarmed: alarms_json(&chosen),
        alarms: alarms_json(&remaining),
    };
    Ok(Json(answer).into_response())
}

/// `POST /v1/defragment`: this member only, as etcd's defrag is per member.
#[utoipa::path(
    post,
    path = "/v1/defragment",
    tag = "maintenance",
    summary = "Give back the space freed by compaction, on this member",
    responses(
        (status = 200, description = "Defragmented", body = DefragmentAnswer),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn post_defragment<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let defragmented = state.backend.defragment().await?;
    tracing::info!(
        before = defragmented.file_bytes_before,
        after = defragmented.file_bytes_after,
        elapsed = ?defragmented.elapsed,
        "defragmented the state file"
    );
    let answer = DefragmentAnswer {
        header: state.backend.header()?,
        file_bytes_before: defragmented.file_bytes_before,
        file_bytes_after: defragmented.file_bytes_after,
        elapsed_ms: defragmented.elapsed.as_millis(),
    };
    Ok(Json(answer).into_response())
}
