//! `GET /v1/snapshot`: a consistent backup of this member's store, streamed.
//!
//! The answer (`application/octet-stream`) is the store's snapshot stream (codec frames: a
//! header with the stream version, revision, compact revision, live-key count, this member's id
//! and the cluster id; every history record; every lease; a trailer with the count and an xxh3
//! checksum). It is one redb read transaction, so it is one revision and never blocks writes, and
//! it is produced in bounded chunks (`revkv_raft::snapshot_stream`) as the client reads it. It is
//! this member's serializable view: whatever it has applied when the stream starts; the header
//! says which member and revision. At most `HttpLimits::max_snapshot_streams` run at once; one
//! more is answered `503 unavailable`. A stream that breaks (the export failed) ends without its
//! trailer, so the reader's checksum check refuses it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::StreamExt;
use revkv_raft::{ChunkLimits, ChunkedExport};

use super::error::ApiError;
use super::query::QueryParams;
use super::state::ApiState;
use crate::backend::KvBackend;
use crate::error::NodeError;

/// How long a client refused for too many backups at once should wait before asking again.
const STREAMS_FULL_RETRY_AFTER: Duration = Duration::from_secs(5);

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new().route("/v1/snapshot", get(get_snapshot::<B>))
}

#[utoipa::path(
    get,
    path = "/v1/snapshot",
    tag = "maintenance",
    summary = "A consistent backup of the store at one revision, as a stream",
    responses(
        (status = 200, description = "The backup: a header, frames and a checksum trailer", content_type = "application/octet-stream", body = Vec<u8>),
        (status = "4XX", description = "Refused: invalid; with auth enabled, unauthenticated or forbidden (root only, decided by `auth_gate`)", body = super::openapi_shapes::ErrorBody),
        (status = "5XX", description = "unavailable or timeout", body = super::openapi_shapes::ErrorBody),
    )
)]
async fn get_snapshot<B: KvBackend>(
    State(state): State<ApiState<B>>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, ApiError> {
    QueryParams::parse(raw_query.as_deref())?.finish()?;
    let permit = Arc::clone(&state.snapshot_streams)
        .try_acquire_owned()
        .map_err(|_| NodeError::Unavailable {
            reason: format!(
                "this member already streams {} backups; try again later or another member",
                state.limits.max_snapshot_streams
            ),
            retry_after: STREAMS_FULL_RETRY_AFTER,
        })?;
    let source = state.backend.backup_source();
    let export = ChunkedExport::start(source.store, Some(source.member_id), ChunkLimits::default());
    // The permit lives as long as the body: it is released when the stream ends or the client
    // goes away.
    let chunks = export.into_stream().map(move |chunk| {
        let _held = &permit;
        chunk
    });
    let member = source.member_id.to_string();
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::HeaderName::from_static("x-revkv-member-id"), member),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}
