//! Lease calls (`docs/API.md` section 4): grant, revoke, time-to-live, list and a
//! single keep-alive. Keeping leases alive over time is the [`LeaseKeeper`](super::LeaseKeeper)'s.
//!
//! A grant without an id and a revoke are writes (never repeated once their outcome is unknown:
//! a second grant would make a second lease). A keep-alive and a grant with a chosen id are safe to
//! repeat (renewing twice is harmless, and a repeated grant of one id fails instead of doubling),
//! so they fail over like reads.

use reqwest::Method;
use serde_json::json;

use super::error::ClientError;
use super::kv::with_query;
use super::transport::Call;
use super::types::{HeaderResponse, LeaseListResponse, LeaseResponse, LeaseTimeToLiveResponse};
use super::Client;

/// `/v1/leases/{id}`.
fn lease_path(id: i64) -> String {
    format!("/v1/leases/{id}")
}

impl Client {
    /// Grants a lease of at least `ttl_seconds` (the member raises it to its minimum); with `id`
    /// that id (an id in use is [`ClientError::Invalid`]), else one the cluster picks.
    pub async fn lease_grant(
        &self,
        ttl_seconds: i64,
        id: Option<i64>,
    ) -> Result<LeaseResponse, ClientError> {
        let mut body = json!({ "ttl": ttl_seconds });
        if let Some(id) = id {
            body["id"] = json!(id);
        }
        let mut call = Call::write(Method::POST, "/v1/leases".to_string(), Some(body));
        call.idempotent = id.is_some();
        self.call_json(&call).await
    }

    /// Revokes lease `id`, deleting its attached keys in one revision. A lease that is gone is
    /// [`ClientError::NotFound`].
    pub async fn lease_revoke(&self, id: i64) -> Result<HeaderResponse, ClientError> {
        let call = Call::write(Method::DELETE, lease_path(id), None);
        self.call_json(&call).await
    }

    /// Lease `id`'s remaining and granted TTL, with its attached keys when `with_keys`.
    pub async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLiveResponse, ClientError> {
        let pairs = match with_keys {
            true => vec![("keys", "true".to_string())],
            false => Vec::new(),
        };
        self.call_json(&Call::read(with_query(lease_path(id), &pairs)))
            .await
    }

    /// Every lease's id.
    pub async fn lease_list(&self) -> Result<LeaseListResponse, ClientError> {
        self.call_json(&Call::read("/v1/leases".to_string())).await
    }

    /// Renews lease `id` once, to its granted TTL; answers that TTL. A lease that is gone is
    /// [`ClientError::NotFound`].
    pub async fn lease_keep_alive_once(&self, id: i64) -> Result<LeaseResponse, ClientError> {
        let mut call = Call::write(Method::POST, format!("{}/keepalive", lease_path(id)), None);
        call.idempotent = true;
        self.call_json(&call).await
    }
}
