//! etcd's Lease service over `KvBackend`'s lease methods: grant, revoke (a `write` of
//! `Request::LeaseRevoke`, as HTTP does), the keep-alive stream, time-to-live and the list.
//!
//! The keep-alive stream renews one request at a time, in order: the next request is read only
//! once the previous answer was taken by the stream, so a fast sender is slowed by HTTP/2 flow
//! control, never queued here. At most `max_keepalive_streams` streams are open per member; one
//! more is refused with `ResourceExhausted`, like HTTP's 503.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use revkv_node::{KvBackend, Missing, NodeError};
use revkv_storage::Request;
use tokio::sync::Semaphore;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status, Streaming};

use crate::auth;
use crate::convert;
use crate::error::{self, status};
use crate::proto::etcdserverpb as pb;

pub struct LeaseService<B> {
    pub backend: Arc<B>,
    /// One permit per open keep-alive stream.
    pub keepalive_streams: Arc<Semaphore>,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

#[tonic::async_trait]
impl<B: KvBackend> pb::lease_server::Lease for LeaseService<B> {
    async fn lease_grant(
        &self,
        request: GrpcRequest<pb::LeaseGrantRequest>,
    ) -> Answer<pb::LeaseGrantResponse> {
        let request = request.into_inner();
        let id = (request.id != 0).then_some(request.id);
        let granted = self
            .backend
            .lease_grant(id, request.ttl)
            .await
            .map_err(status)?;
        Ok(GrpcResponse::new(pb::LeaseGrantResponse {
            header: convert::header(granted.header, self.backend.cluster_id()),
            id: granted.id,
            ttl: granted.ttl_seconds,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        request: GrpcRequest<pb::LeaseRevokeRequest>,
    ) -> Answer<pb::LeaseRevokeResponse> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let id = request.into_inner().id;
        let written = backend
            .write(Request::LeaseRevoke { id })
            .await
            .map_err(status)?;
        Ok(GrpcResponse::new(pb::LeaseRevokeResponse {
            header: convert::header(written.header, self.backend.cluster_id()),
        }))
    }

    type LeaseKeepAliveStream =
        Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

    async fn lease_keep_alive(
        &self,
        request: GrpcRequest<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Answer<Self::LeaseKeepAliveStream> {
        let permit = self
            .keepalive_streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| Status::resource_exhausted(error::TOO_MANY_REQUESTS))?;
        let backend = self.backend.clone();
        let answers = request.into_inner().then(move |next| {
            let backend = backend.clone();
            // Each answer holds the permit until the stream ends: it is dropped with the stream.
            let _permit = &permit;
            async move {
                let id = next?.id;
                keep_alive_answer(backend.as_ref(), id).await
            }
        });
        Ok(GrpcResponse::new(Box::pin(answers)))
    }

    async fn lease_time_to_live(
        &self,
        request: GrpcRequest<pb::LeaseTimeToLiveRequest>,
    ) -> Answer<pb::LeaseTimeToLiveResponse> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let request = request.into_inner();
        match backend.lease_time_to_live(request.id, request.keys).await {
            Ok(reading) => Ok(GrpcResponse::new(pb::LeaseTimeToLiveResponse {
                header: convert::header(reading.header, self.backend.cluster_id()),
                id: reading.id,
                ttl: reading.remaining_ttl_seconds,
                granted_ttl: reading.granted_ttl_seconds,
                keys: reading.keys,
            })),
            // etcd answers a lease that is gone with TTL -1 rather than an error (etcdctl prints
            // "already expired" from it).
            Err(NodeError::NotFound(Missing::Lease(_))) => {
                Ok(GrpcResponse::new(pb::LeaseTimeToLiveResponse {
                    header: Some(pb::ResponseHeader::default()),
                    id: request.id,
                    ttl: -1,
                    granted_ttl: 0,
                    keys: Vec::new(),
                }))
            }
            Err(error) => Err(status(error)),
        }
    }

    async fn lease_leases(
        &self,
        _request: GrpcRequest<pb::LeaseLeasesRequest>,
    ) -> Answer<pb::LeaseLeasesResponse> {
        let (header, ids) = self.backend.lease_ids().await.map_err(status)?;
        Ok(GrpcResponse::new(pb::LeaseLeasesResponse {
            header: convert::header(header, self.backend.cluster_id()),
            leases: ids.into_iter().map(|id| pb::LeaseStatus { id }).collect(),
        }))
    }
}

/// One keep-alive's answer. etcd answers a lease that is gone with TTL 0, not an error, and the
/// stream goes on; clientv3's keeper ends that lease's channel on it.
async fn keep_alive_answer<B: KvBackend>(
    backend: &B,
    id: i64,
) -> Result<pb::LeaseKeepAliveResponse, Status> {
    let cluster_id = backend.cluster_id();
    match backend.lease_keep_alive(id).await {
        Ok((header, ttl)) => Ok(pb::LeaseKeepAliveResponse {
            header: convert::header(header, cluster_id),
            id,
            ttl,
        }),
        Err(NodeError::NotFound(Missing::Lease(_))) => Ok(pb::LeaseKeepAliveResponse {
            header: convert::header(backend.header().map_err(status)?, cluster_id),
            id,
            ttl: 0,
        }),
        Err(error) => Err(status(error)),
    }
}
