//! Cluster calls: status, the hot conflicting keys, compaction, membership, leader transfer, the replica hash and snapshots.
//!
//! Status, the member list, the hash and a snapshot are reads; everything else is a write (never
//! repeated once its outcome is unknown). `status`, `hash` and `snapshot_save` are answered by
//! whichever member takes the call; to ask one member in particular, make a client of that member
//! alone ([`Client::for_member`]).

use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::error::ClientError;
use super::kv::with_query;
use super::transport::{Call, Transport};
use super::types::{
    HashResponse, HeaderResponse, HotKeysResponse, MembersResponse, StatusResponse,
};
use super::{normalised_endpoint, Client, TokioSleeper};
use std::sync::Arc;

/// The largest snapshot [`Client::snapshot_save`] writes (a guard against an endless stream).
pub const LARGEST_SNAPSHOT_BYTES: u64 = 64 * 1024 * 1024 * 1024;

impl Client {
    /// A client with the same settings that talks to `endpoint` only (no failover).
    /// It shares this client's connections and TLS settings.
    pub fn for_member(&self, endpoint: &str) -> Result<Client, ClientError> {
        let transport = Transport::new(
            vec![normalised_endpoint(endpoint)?],
            self.transport.http.clone(),
            self.transport.failover_backoff,
            1,
            self.transport.max_answer_bytes,
            Box::new(TokioSleeper),
        );
        Ok(Client {
            transport: Arc::new(transport),
            timeout: self.timeout(),
            conflicts: Arc::clone(&self.conflicts),
        })
    }

    /// The answering member's status.
    pub async fn status(&self) -> Result<StatusResponse, ClientError> {
        self.call_json(&Call::read("/v1/status".to_string())).await
    }

    /// The answering member's hottest conflicting keys over its window (`GET /v1/conflicts`).
    pub async fn hot_keys(&self, top: u64) -> Result<HotKeysResponse, ClientError> {
        let path = with_query("/v1/conflicts".to_string(), &[("top", top.to_string())]);
        self.call_json(&Call::read(path)).await
    }

    /// Discards history at and below `revision` on every member.
    pub async fn compact(&self, revision: u64) -> Result<HeaderResponse, ClientError> {
        let body = json!({ "revision": revision });
        let call = Call::write(Method::POST, "/v1/compact".to_string(), Some(body));
        self.call_json(&call).await
    }

    /// The replica-consistency hash at `revision` (None: the current revision).
    pub async fn hash(&self, revision: Option<u64>) -> Result<HashResponse, ClientError> {
        let pairs: Vec<(&str, String)> = revision
            .map(|revision| vec![("revision", revision.to_string())])
            .unwrap_or_default();
        let path = with_query("/v1/hash".to_string(), &pairs);
        self.call_json(&Call::read(path)).await
    }

    /// The members of the cluster.
    pub async fn members(&self) -> Result<MembersResponse, ClientError> {
        self.call_json(&Call::read("/v1/members".to_string())).await
    }

    /// Adds a learner (it receives the log but does not vote until promoted); `grpc_url` is its
    /// etcd gRPC URL if it serves etcd's API.
    pub async fn add_learner(
        &self,
        id: u64,
        peer_url: &str,
        client_url: &str,
        grpc_url: Option<&str>,
    ) -> Result<MembersResponse, ClientError> {
        let body = json!({ "id": id, "peer_url": peer_url, "client_url": client_url,
                           "grpc_url": grpc_url });
        let call = Call::write(Method::POST, "/v1/members".to_string(), Some(body));
        self.call_json(&call).await
    }

    /// Adds a learner that the leader promotes to a voter once its log is at most
    /// `max_lag_entries` behind (`None`: the leader's `--auto-promote-max-lag`); answers once the
    /// learner is in the membership. `urls` are its peer, client and (if it serves etcd's API)
    /// gRPC URLs.
    pub async fn add_learner_to_promote(
        &self,
        id: u64,
        urls: (&str, &str, Option<&str>),
        max_lag_entries: Option<u64>,
    ) -> Result<MembersResponse, ClientError> {
        let (peer_url, client_url, grpc_url) = urls;
        let body = json!({ "id": id, "peer_url": peer_url, "client_url": client_url,
                           "grpc_url": grpc_url, "auto_promote": true,
                           "auto_promote_max_lag": max_lag_entries });
        let call = Call::write(Method::POST, "/v1/members".to_string(), Some(body));
        self.call_json(&call).await
    }

    /// Makes learner `id` a voter.
    pub async fn promote_member(&self, id: u64) -> Result<MembersResponse, ClientError> {
        let call = Call::write(Method::POST, format!("/v1/members/{id}/promote"), None);
        self.call_json(&call).await
    }

    /// Removes member `id`.
    pub async fn remove_member(&self, id: u64) -> Result<MembersResponse, ClientError> {
        let call = Call::write(Method::DELETE, format!("/v1/members/{id}"), None);
        self.call_json(&call).await
    }

    /// Asks the leader to hand leadership to member `to`.
    pub async fn transfer_leader(&self, to: u64) -> Result<HeaderResponse, ClientError> {
        let body = json!({ "to": to });
        let call = Call::write(Method::POST, "/v1/leader/transfer".to_string(), Some(body));
        self.call_json(&call).await
    }

    /// Streams a consistent backup (`GET /v1/snapshot`) into `output`; returns the bytes written.
    /// The call's timeout bounds the start of the answer; the stream itself is bounded in size.
    pub async fn snapshot_save<W>(&self, output: &mut W) -> Result<u64, ClientError>
    where
        W: AsyncWrite + Unpin,
    {
        let call = Call::read("/v1/snapshot".to_string());
        let (mut response, endpoint) = self.transport.open_stream(&call, self.timeout()).await?;
        let mut written = 0u64;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| ClientError::Timeout {
                message: format!("the snapshot stream from {endpoint} broke: {error}"),
            })?
        {
            written += chunk.len() as u64;
            if written > LARGEST_SNAPSHOT_BYTES {
                return Err(ClientError::TooLarge {
                    message: format!("the snapshot is over {LARGEST_SNAPSHOT_BYTES} bytes"),
                });
            }
            output.write_all(&chunk).await.map_err(local_io)?;
        }
        output.flush().await.map_err(local_io)?;
        Ok(written)
    }
}

fn local_io(error: std::io::Error) -> ClientError {
    ClientError::Transport {
        message: format!("cannot write the snapshot: {error}"),
    }
}
