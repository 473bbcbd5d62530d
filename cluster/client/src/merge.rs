//! Three-way merge writes and a key's history, from the client's side.
//!
//! [`Client::merge_put`] sends `PUT /v1/kv/{key}?merge=three-way` with `If-Match`: the member
//! merges the changes since that revision field by field, so writers of different fields of one
//! JSON document no longer conflict. [`Client::update_with_merge`] is the read-modify-write on
//! top: read, apply the caller's function, merge-put; only a real conflict (both sides changed the
//! same field, the key was deleted, or the member lost every race) is retried, from a fresh read,
//! with the adaptive backoff (`adaptive_backoff`: waits follow how often this client has seen the
//! key conflict lately), or with a fixed [`Backoff`] through
//! [`Client::update_with_merge_backoff`]. [`Client::history`] reads one page of a key's versions.

use std::sync::Mutex;

use reqwest::Method;
use serde_json::{json, Value};

use super::adaptive_backoff::DEFAULT_ADAPTIVE_BACKOFF;
use super::backoff::{Backoff, TokioSleeper};
use super::error::ClientError;
use super::kv::{key_path, with_query, Precondition};
use super::retry::{retry_on_conflict_scheduled, AdaptiveRetry, RetrySchedule};
use super::transport::Call;
use super::types::{HistoryResponse, MergePutResponse};
use super::Client;

impl Client {
    /// Writes the JSON `value` at `key`, merged with whatever changed since `read_revision` (the
    /// mod revision the value was read at). A real conflict is [`ClientError::Conflict`] with
    /// `conflicting_fields`; a compacted `read_revision` is [`ClientError::Compacted`].
    pub async fn merge_put(
        &self,
        key: &str,
        value: &Value,
        read_revision: u64,
    ) -> Result<MergePutResponse, ClientError> {
        let path = with_query(key_path(key), &[("merge", "three-way".to_string())]);
        let body = json!({ "value": value.to_string() });
        let call = Call::write(Method::PUT, path, Some(body));
        self.call_json(&Precondition::ModRevision(read_revision).add_header(call))
            .await
    }

    /// Reads `key`'s JSON value, applies `change` to it and writes the result with a three-way
    /// merge; retries only on real conflicts, at most 5 attempts, waiting as the adaptive backoff
    /// says from this client's record of the key's recent conflicts. A value that is not JSON is
    /// [`ClientError::Invalid`].
    pub async fn update_with_merge(
        &self,
        key: &str,
        change: impl FnMut(Value) -> Value + Send,
    ) -> Result<MergePutResponse, ClientError> {
        let mut schedule = AdaptiveRetry::new(&self.conflicts, key, DEFAULT_ADAPTIVE_BACKOFF);
        self.update_with_merge_scheduled(key, &mut schedule, change)
            .await
    }

    /// [`Client::update_with_merge`] with the retries of a fixed `backoff` (client-go's
    /// `DefaultBackoff` or `DefaultRetry`, say).
    pub async fn update_with_merge_backoff(
        &self,
        key: &str,
        mut backoff: Backoff,
        change: impl FnMut(Value) -> Value + Send,
    ) -> Result<MergePutResponse, ClientError> {
        self.update_with_merge_scheduled(key, &mut backoff, change)
            .await
    }

    async fn update_with_merge_scheduled<S: RetrySchedule + Send>(
        &self,
        key: &str,
        schedule: &mut S,
        change: impl FnMut(Value) -> Value + Send,
    ) -> Result<MergePutResponse, ClientError> {
        // The change runs between two awaits of each attempt; a mutex (never held across an
        // await) lets every attempt's future borrow it and keeps the future `Send`.
        let change = Mutex::new(change);
        let change = &change;
        let attempt = || async move {
            let read = self.get(key).await?;
            let current =
                serde_json::from_str(&read.kv.value).map_err(|error| ClientError::Invalid {
                    message: format!("the value of {key} is not JSON: {error}"),
                })?;
            let desired = (change.lock().expect("the change never panics midway"))(current);
            self.merge_put(key, &desired, read.kv.mod_revision).await
        };
        retry_on_conflict_scheduled(schedule, &TokioSleeper, attempt)
            .await
            .0
    }

    /// One page of `key`'s history: versions with mod revision `>= from_revision` (default: the
    /// oldest kept), at most `limit` (default: the member's, 100), oldest first. Pass the answer's
    /// `continue_token` back as `from_revision`'s successor with [`Client::history_after`].
    pub async fn history(
        &self,
        key: &str,
        from_revision: Option<u64>,
        limit: Option<u64>,
    ) -> Result<HistoryResponse, ClientError> {
        let mut pairs = vec![("history", "true".to_string())];
        pairs.extend(from_revision.map(|revision| ("from_revision", revision.to_string())));
        pairs.extend(limit.map(|limit| ("limit", limit.to_string())));
        self.call_json(&Call::read(with_query(key_path(key), &pairs)))
            .await
    }

    /// The page after one that answered `more` with `continue_token`.
    pub async fn history_after(
        &self,
        key: &str,
        continue_token: &str,
        limit: Option<u64>,
    ) -> Result<HistoryResponse, ClientError> {
        let mut pairs = vec![
            ("history", "true".to_string()),
            ("continue", continue_token.to_string()),
        ];
        pairs.extend(limit.map(|limit| ("limit", limit.to_string())));
        self.call_json(&Call::read(with_query(key_path(key), &pairs)))
            .await
    }
}
