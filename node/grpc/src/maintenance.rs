//! etcd's Maintenance service: Status, Hash and HashKV over revkv's replica hash, Alarm (list,
//! raise and clear the NOSPACE alarm through raft), Defragment (this member's state file) and
//! MoveLeader over `transfer_leader`, and Snapshot: the member's store as an etcd snapshot (a bolt
//! file with etcdctl's SHA-256 trailer, which etcd's `snapshot status` and `snapshot restore`
//! take, and `revkv snapshot restore` too), or, for a store with auth records, revkv's backup
//! stream inside etcd's envelope. Downgrade answers `Unimplemented`.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use revkv_node::space_quota::DEFAULT_QUOTA_BACKEND_BYTES;
use revkv_node::KvBackend;
use revkv_raft::etcd_snapshot_stream::{etcd_format_refusal, etcd_snapshot_chunks};
use revkv_raft::snapshot_stream::{ChunkLimits, ChunkedExport};
use revkv_storage::codec::etcd_envelope::Enveloper;
use revkv_storage::{Alarm, AlarmAction, AlarmKind, MvccStore, Request};
use tokio::sync::Semaphore;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::auth;
use crate::convert::{self, to_i64};
use crate::error::{self, status};
use crate::etcd_version::EtcdVersion;
use crate::proto::etcdserverpb as pb;

pub struct MaintenanceService<B> {
    pub backend: Arc<B>,
    /// Backups streaming at once through this service (`GrpcLimits::max_snapshot_streams`).
    pub snapshot_streams: Arc<Semaphore>,
    /// The version `Status` reports (`etcd_version.rs` says which and why).
    pub etcd_version: EtcdVersion,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

/// etcd's hashes are 32 bits; revkv's replica hash is 64: both halves are folded in.
fn fold_hash(hash: u64) -> u32 {
    // The truncation is the point: the two halves xor-ed together.
    (hash ^ (hash >> 32)) as u32
}

impl<B: KvBackend> MaintenanceService<B> {
    /// The storage version `Status` and `Snapshot` name: the reported release's, empty before
    /// 3.6 (`etcd_version.rs` says why).
    fn storage_version(&self) -> String {
        self.etcd_version
            .storage_version()
            .map(|version| version.to_string())
            .unwrap_or_default()
    }

    fn header(&self) -> Result<Option<pb::ResponseHeader>, Status> {
        Ok(convert::header(
            self.backend.header().map_err(status)?,
            self.backend.cluster_id(),
        ))
    }
}

#[tonic::async_trait]
impl<B: KvBackend> pb::maintenance_server::Maintenance for MaintenanceService<B> {
    /// etcd's Alarm: GET lists the raised alarms (any user may, as from etcd 3.6 on);
    /// ACTIVATE and DEACTIVATE, root only, raise or clear one member's alarm through raft and
    /// answer it (what `etcdctl alarm disarm` sends per alarm).
    async fn alarm(&self, request: GrpcRequest<pb::AlarmRequest>) -> Answer<pb::AlarmResponse> {
        let lists = request.get_ref().action == pb::alarm_request::AlarmAction::Get as i32;
        if !lists {
            auth::require_root(&self.backend, &request)?;
        }
        let request = request.into_inner();
        let action = match pb::alarm_request::AlarmAction::try_from(request.action) {
            Ok(pb::alarm_request::AlarmAction::Get) => None,
            Ok(pb::alarm_request::AlarmAction::Activate) => Some(AlarmAction::Activate),
            Ok(pb::alarm_request::AlarmAction::Deactivate) => Some(AlarmAction::Deactivate),
            Err(_) => return Err(Status::invalid_argument("unknown alarm action")),
        };
        let Some(action) = action else {
            let alarms = self.backend.alarms().map_err(status)?;
            return Ok(GrpcResponse::new(pb::AlarmResponse {
                header: self.header()?,
                alarms: alarms.iter().map(alarm_member).collect(),
            }));
        };
        let kind = match pb::AlarmType::try_from(request.alarm) {
            Ok(pb::AlarmType::Nospace) => AlarmKind::NoSpace,
            Ok(pb::AlarmType::Corrupt) => AlarmKind::Corrupt,
            _ => {
                return Err(Status::invalid_argument(
                    "revkv knows only the NOSPACE and CORRUPT alarms",
                ))
            }
        };
        let alarm = Alarm {
            member_id: request.member_id,
            kind,
        };
        let written = self
            .backend
            .write(Request::Alarm { action, alarm })
            .await
            .map_err(status)?;
        Ok(GrpcResponse::new(pb::AlarmResponse {
            header: convert::header(written.header, self.backend.cluster_id()),
            alarms: vec![alarm_member(&alarm)],
        }))
    }

    async fn status(&self, _request: GrpcRequest<pb::StatusRequest>) -> Answer<pb::StatusResponse> {
        let member = self.backend.status().await.map_err(status)?;
        let header = pb::ResponseHeader {
            cluster_id: self.backend.cluster_id(),
            member_id: member.member_id,
            revision: to_i64(member.revision),
            raft_term: member.raft_term,
        };
        let db_size = to_i64(member.state_db_bytes);
        Ok(GrpcResponse::new(pb::StatusResponse {
            header: Some(header),
            version: self.etcd_version.to_string(),
            db_size,
            leader: member.leader_id.unwrap_or(0),
            raft_index: member.commit_index,
            raft_term: member.raft_term,
            raft_applied_index: member.applied_index,
            // etcd lists "no leader" here when the member knows none (then each raised alarm in
            // Go's text form, which revkv does not write yet).
            errors: match member.leader_id {
                None => vec![error::NO_LEADER.to_string()],
                Some(_) => Vec::new(),
            },
            db_size_in_use: to_i64(member.state_db_bytes_in_use),
            is_learner: member.role == "learner",
            // etcd 3.6's additions: the quota (etcd reports its default when none is set), the
            // storage version of the release reported (`etcd_version.rs`), and no downgrade in
            // progress, which etcd reports as an empty `DowngradeInfo` rather than none.
            db_size_quota: to_i64(
                self.backend
                    .quota_backend_bytes()
                    .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES),
            ),
            storage_version: self.storage_version(),
            downgrade_info: Some(pb::DowngradeInfo::default()),
        }))
    }

    /// Defragments this member's state file (etcd's Defragment is per member too).
    async fn defragment(
        &self,
        _request: GrpcRequest<pb::DefragmentRequest>,
    ) -> Answer<pb::DefragmentResponse> {
        self.backend.defragment().await.map_err(status)?;
        Ok(GrpcResponse::new(pb::DefragmentResponse {
            header: self.header()?,
        }))
    }

    async fn hash(&self, _request: GrpcRequest<pb::HashRequest>) -> Answer<pb::HashResponse> {
        let (header, hash) = self.backend.hash(None).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::HashResponse {
            header: convert::header(header, self.backend.cluster_id()),
            hash: fold_hash(hash.hash),
        }))
    }

    async fn hash_kv(&self, request: GrpcRequest<pb::HashKvRequest>) -> Answer<pb::HashKvResponse> {
        let revision = u64::try_from(request.into_inner().revision)
            .ok()
            .filter(|revision| *revision > 0);
        let (header, hash) = self.backend.hash(revision).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::HashKvResponse {
            header: convert::header(header, self.backend.cluster_id()),
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

    /// Streams this member's backup in the chunks the export cuts (256 KiB), each answer saying
    /// nothing of the bytes still to come (`remaining_bytes` 0: the size is known only at the
    /// end; etcdctl does not read it).
    async fn snapshot(
        &self,
        _request: GrpcRequest<pb::SnapshotRequest>,
    ) -> Answer<Self::SnapshotStream> {
        let permit = self
            .snapshot_streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| Status::resource_exhausted(error::TOO_MANY_REQUESTS))?;
        let header = self.header()?;
        let version = self.storage_version();
        let source = self.backend.backup_source();
        let chunks = snapshot_chunks(source.store, source.member_id);
        let answers = chunks.map(move |chunk| {
            // The permit is held until the stream ends or the client goes away.
            let _held = &permit;
            chunk
                .map(|blob| pb::SnapshotResponse {
                    header,
                    remaining_bytes: 0,
                    blob,
                    // What etcd 3.6's `etcdctl snapshot save` prints as "Server version".
                    version: version.clone(),
                })
                .map_err(|failure| Status::internal(format!("backup failed: {failure}")))
        });
        Ok(GrpcResponse::new(Box::pin(answers)))
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

/// A raised alarm in etcd's shape.
fn alarm_member(alarm: &Alarm) -> pb::AlarmMember {
    let kind = match alarm.kind {
        AlarmKind::NoSpace => pb::AlarmType::Nospace,
        AlarmKind::Corrupt => pb::AlarmType::Corrupt,
    };
    pb::AlarmMember {
        member_id: alarm.member_id,
        alarm: kind as i32,
    }
}

/// The member's store as an etcd snapshot (`etcd_snapshot_stream.rs`), which etcd's own
/// `snapshot status` and `snapshot restore` take. A store whose users have argon2 password
/// hashes, which etcd cannot check, is sent in revkv's format inside etcd's envelope instead:
/// `etcdctl snapshot save` still makes a backup, which `revkv snapshot restore` takes, and the
/// member says why in its log.
fn snapshot_chunks(
    store: Arc<MvccStore>,
    member_id: u64,
) -> Pin<Box<dyn Stream<Item = std::io::Result<Vec<u8>>> + Send>> {
    if let Some(refusal) = etcd_format_refusal(&store) {
        tracing::warn!(
            "the snapshot goes out in revkv's format, not etcd's: {refusal}; etcd's tools \
             cannot read it, revkv snapshot restore can"
        );
        let export = ChunkedExport::start(store, Some(member_id), ChunkLimits::default());
        return Box::pin(enveloped(export));
    }
    Box::pin(etcd_snapshot_chunks(store, ChunkLimits::default()))
}

/// The export's chunks inside etcd's snapshot envelope (`codec::etcd_envelope`): the same bytes,
/// then zero padding and a SHA-256, so `etcdctl snapshot save` accepts the stream.
fn enveloped(
    export: ChunkedExport,
) -> impl Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static {
    let start = Some((Box::pin(export.into_stream()), Enveloper::default()));
    futures_util::stream::unfold(start, |state| async move {
        let (mut chunks, mut enveloper) = state?;
        match chunks.next().await {
            Some(Ok(blob)) => {
                enveloper.feed(&blob);
                Some((Ok(blob), Some((chunks, enveloper))))
            }
            Some(Err(failure)) => Some((Err(failure), None)),
            None => Some((Ok(enveloper.finish()), None)),
        }
    })
}
