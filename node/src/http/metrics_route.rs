//! `GET /metrics`: every metric of this member in the Prometheus text exposition format.

use axum::extract::{RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use revkv_metrics::TEXT_CONTENT_TYPE;

use super::error::ApiError;
use super::query::QueryParams;
use super::state::ApiState;
use crate::backend::KvBackend;
use crate::error::NodeError;

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new().route("/metrics", get(get_metrics::<B>))
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "maintenance",
    summary = "This member's metrics in Prometheus' text format",
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain", body = String),
        (status = "4XX", description = "Refused: invalid", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_metrics<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    // Rendering reads the store's statistics first (a redb read transaction), so keep it off the
    // async workers.
    let metrics = state.metrics.clone();
    let text = tokio::task::spawn_blocking(move || metrics.render())
        .await
        .map_err(|error| NodeError::Internal(format!("rendering metrics failed: {error}")))?
        .map_err(|error| NodeError::Internal(format!("rendering metrics failed: {error}")))?;
    Ok(([(CONTENT_TYPE, TEXT_CONTENT_TYPE)], text).into_response())
}
