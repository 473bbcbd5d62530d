//! etcd's Maintenance service: Status, Hash and HashKV over revkv's replica hash, Alarm (revkv
//! raises no alarms: always the empty list) and MoveLeader over `transfer_leader`. Snapshot,
//! Defragment and Downgrade answer `Unimplemented` until the maintenance issue builds them.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use revkv_node::KvBackend;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::convert::{self, to_i64};
use crate::error::status;
use crate::proto::etcdserverpb as pb;

/// The etcd version `Status` reports: the etcd API revkv answers like. etcdctl and clientv3 only
/// compare the major and minor version.
pub const ETCD_VERSION: &str = "3.4.0";

pub struct MaintenanceService<B> {
    pub backend: Arc<B>,
    pub cluster_id: u64,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

/// etcd's hashes are 32 bits; revkv's replica hash is 64: both halves are folded in.
fn fold_hash(hash: u64) -> u32 {
    // The truncation is the point: the two halves xor-ed together.
    (hash ^ (hash >> 32)) as u32
}

impl<B: KvBackend> MaintenanceService<B> {
    fn header(&self) -> Result<Option<pb::ResponseHeader>, Status> {
        Ok(convert::header(
            self.backend.header().map_err(status)?,
            self.cluster_id,
        ))
    }
}

#[tonic::async_trait]
impl<B: KvBackend> pb::maintenance_server::Maintenance for MaintenanceService<B> {
    async fn alarm(&self, _request: GrpcRequest<pb::AlarmRequest>) -> Answer<pb::AlarmResponse> {
        Ok(GrpcResponse::new(pb::AlarmResponse {
            header: self.header()?,
            alarms: Vec::new(),
        }))
    }

    async fn status(&self, _request: GrpcRequest<pb::StatusRequest>) -> Answer<pb::StatusResponse> {
        let member = self.backend.status().await.map_err(status)?;
        let header = pb::ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: member.member_id,
            revision: to_i64(member.revision),
            raft_term: member.raft_term,
        };
        let db_size = to_i64(member.state_db_bytes);
        Ok(GrpcResponse::new(pb::StatusResponse {
            header: Some(header),
            version: ETCD_VERSION.to_string(),
            db_size,
            leader: member.leader_id.unwrap_or(0),
            raft_index: member.commit_index,
            raft_term: member.raft_term,
            raft_applied_index: member.applied_index,
            errors: Vec::new(),
            db_size_in_use: db_size,
            is_learner: member.role == "learner",
            ..pb::StatusResponse::default()
        }))
    }

    async fn defragment(
        &self,
        _request: GrpcRequest<pb::DefragmentRequest>,
    ) -> Answer<pb::DefragmentResponse> {
        Err(Status::unimplemented(
            "revkv: Defragment is not implemented yet",
        ))
    }

    async fn hash(&self, _request: GrpcRequest<pb::HashRequest>) -> Answer<pb::HashResponse> {
        let (header, hash) = self.backend.hash(None).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::HashResponse {
            header: convert::header(header, self.cluster_id),
            hash: fold_hash(hash.hash),
        }))
    }

    async fn hash_kv(&self, request: GrpcRequest<pb::HashKvRequest>) -> Answer<pb::HashKvResponse> {
        let revision = u64::try_from(request.into_inner().revision)
            .ok()
            .filter(|revision| *revision > 0);
        let (header, hash) = self.backend.hash(revision).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::HashKvResponse {
            header: convert::header(header, self.cluster_id),
            hash: fold_hash(hash.hash),
            // etcd answers -1 when nothing was ever compacted; revkv's compact revision is 0 then.
            compact_revision: match hash.compact_revision {
                0 => -1,
                compacted => to_i64(compacted),
            },
            hash_revision: to_i64(hash.revision),
        }))
    }

    type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

    async fn snapshot(
        &self,
        _request: GrpcRequest<pb::SnapshotRequest>,
    ) -> Answer<Self::SnapshotStream> {
        Err(Status::unimplemented(
            "revkv: Snapshot is not implemented yet",
        ))
    }

    async fn move_leader(
        &self,
        request: GrpcRequest<pb::MoveLeaderRequest>,
    ) -> Answer<pb::MoveLeaderResponse> {
        let target = request.into_inner().target_id;
        self.backend.transfer_leader(target).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::MoveLeaderResponse {
            header: self.header()?,
        }))
    }

    async fn downgrade(
        &self,
        _request: GrpcRequest<pb::DowngradeRequest>,
    ) -> Answer<pb::DowngradeResponse> {
        Err(Status::unimplemented("revkv: Downgrade is not implemented"))
    }
}
