//! `GET /v1/kv/{key}?history=true`: one key's versions from a revision on, oldest first, for the
//! question "who changed this, and when?" (contract section 7).
//!
//! Parameters: `from_revision=R` (default: the oldest revision still kept), `limit=N` (default
//! 100, at most the range limit), `continue` (the token of the previous page, instead of
//! `from_revision`), `consistency`, `min_revision`, `encoding`. The answer is `{header, versions,
//! more, continue?}`; a version is `{"type": "PUT", "kv"}` or, where a delete removed the key,
//! `{"type": "DELETE", "kv": {key, mod_revision, ...zeros}}`, as watch events are. `410
//! compacted` when R is below the compact revision (at it, its puts remain and its deletes are
//! gone). The page is served from the store's key index, so its cost follows the versions
//! returned (`MvccStore::key_history`).

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::error::ApiError;
use super::keys::TextEncoding;
use super::query::QueryParams;
use super::state::ApiState;
use super::wire::{kv_json, KvJson};
use crate::backend::{KvBackend, ResponseHeader};
use crate::error::NodeError;

/// Versions per page when the request names no limit.
pub const DEFAULT_HISTORY_LIMIT: u64 = 100;

#[derive(Serialize, utoipa::ToSchema)]
pub struct HistoryAnswer {
    header: ResponseHeader,
    versions: Vec<VersionJson>,
    more: bool,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_token: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct VersionJson {
    /// `PUT` or `DELETE` (a tombstone).
    #[serde(rename = "type")]
    kind: &'static str,
    kv: KvJson,
}

/// Serves a history page; `query` holds what `get_key` has not taken (encoding and consistency
/// are taken already).
pub async fn get_history<B: KvBackend>(
    state: &ApiState<B>,
    key: Vec<u8>,
    encoding: TextEncoding,
    consistency: crate::backend::ReadConsistency,
    mut query: QueryParams,
) -> Result<Response, ApiError> {
    let from_revision = query.take_u64("from_revision")?;
    let continue_token = query.take_text("continue")?;
    let limit = query.take_u64("limit")?.unwrap_or(DEFAULT_HISTORY_LIMIT);
    query.finish()?;
    let from_revision = match (from_revision, continue_token) {
        (from, None) => from,
        (None, Some(token)) => Some(revision_of_token(&token)?),
        (Some(_), Some(_)) => {
            return Err(
                NodeError::Invalid("give from_revision or continue, not both".into()).into(),
            )
        }
    };
    let (header, history) = state
        .backend
        .key_history(key, from_revision, limit, consistency)
        .await?;
    let versions = history
        .versions
        .iter()
        .map(|version| {
            Ok(VersionJson {
                kind: if version.deleted { "DELETE" } else { "PUT" },
                kv: kv_json(&version.kv, encoding)?,
            })
        })
        .collect::<Result<Vec<_>, NodeError>>()?;
    let answer = HistoryAnswer {
        header,
        versions,
        more: history.next_from_revision.is_some(),
        continue_token: history
            .next_from_revision
            .map(|revision| revision.to_string()),
    };
    Ok(Json(answer).into_response())
}

/// A continue token is the revision the next page starts from; history below it never changes
/// (only compaction removes it, which the next page then reports as `410`).
fn revision_of_token(token: &str) -> Result<u64, NodeError> {
    token.parse().map_err(|_| {
        NodeError::Invalid(format!(
            "continue token {token:?} is not one this member gave"
        ))
    })
}
