//! `MemberBackend`: the API's operations answered through the raft member. Writes go through raft
//! and wait for their own entry to be applied; reads wait for the consistency they ask for; every
//! raft-layer error becomes a node-layer error in one place (`node_error`).

use std::sync::Arc;
use std::time::Duration;

use revkv_metrics::Metrics;
use revkv_raft::{AdminRequest, MemberError, MemberNode, MemberReport, RaftMember};
use revkv_storage::{
    validate_range, validate_request, validate_txn, Alarm, Defragmented, DeleteRangeRequest,
    KeyHistory, KeyRange, KeyValue, PutRequest, RangeEnd, RangeRequest, Request, Response,
    StateHash, TxnRequest,
};

use crate::backend::{
    AddedMemberRole, BackupSource, ClusterMemberStatus, GrantedLease, KvBackend, LearnerJoin,
    LeaseTimeToLive, MemberInfo, MemberStatus, ReadAnswer, ReadConsistency, ResponseHeader,
    TxnAnswer, Written, CLUSTER_STATUS_TIMEOUT,
};
use crate::error::{Missing, NodeError};
use crate::watch::WatchHub;

/// The API's operations, answered through the raft member.
pub struct MemberBackend {
    pub(crate) member: RaftMember,
    pub(crate) request_timeout: Duration,
    pub(crate) watch_hub: Arc<WatchHub>,
    pub(crate) metrics: Arc<Metrics>,
    /// `--quota-backend-bytes`, which the cluster-wide status shows beside the file sizes.
    pub(crate) quota_backend_bytes: u64,
}

/// A member's report of itself (the raft crate's) as the HTTP API's status.
fn member_status(report: MemberReport) -> MemberStatus {
    MemberStatus {
        member_id: report.member_id,
        leader_id: report.leader_id,
        raft_term: report.raft_term,
        commit_index: report.commit_index,
        applied_index: report.applied_index,
        revision: report.revision,
        compact_revision: report.compact_revision,
        state_db_bytes: report.state_db_bytes,
        state_db_bytes_in_use: report.state_db_bytes_in_use,
        log_db_bytes: report.log_db_bytes,
        version: report.version,
        role: report.role,
        client_urls_published: report.client_urls_published,
    }
}

/// A member as the API lists it; a learner the store holds an intent for (by its id and peer URL,
/// as the leader's task matches them) shows the intent's bound.
fn member_info(
    member: revkv_raft::Membership,
    promotions: &[revkv_storage::LearnerPromotion],
) -> MemberInfo {
    let auto_promote_max_lag = promotions
        .iter()
        .find(|intent| intent.member_id == member.id && intent.peer_url == member.node.peer_url)
        .filter(|_| member.is_learner)
        .map(|intent| intent.max_lag_entries);
    MemberInfo {
        auto_promote_max_lag,
        id: member.id,
        peer_url: member.node.peer_url,
        client_url: member.node.client_url,
        grpc_url: member.node.grpc_url,
        is_learner: member.is_learner,
    }
}

/// The one place a raft-layer error becomes a node-layer error.
pub(crate) fn node_error(error: MemberError) -> NodeError {
    let retry_after = Duration::from_secs(1);
    match error {
        MemberError::NoLeader(reason) => NodeError::Unavailable {
            reason,
            retry_after,
        },
        MemberError::Stopping(reason) => NodeError::Unavailable {
            reason,
            retry_after,
        },
        MemberError::Timeout(message) => NodeError::Timeout(message),
        MemberError::Refused(message) => NodeError::Invalid(message),
        MemberError::UnknownMember(id) => NodeError::NotFound(Missing::Member(id)),
        MemberError::LeaseNotFound(id) => NodeError::NotFound(Missing::Lease(id)),
        MemberError::LearnerNotReady(why) => NodeError::LearnerNotReady(why),
        MemberError::Storage(error) => NodeError::Storage(error),
        MemberError::Startup(message) => NodeError::Internal(message),
    }
}

impl MemberBackend {
    /// Waits until this member may serve a read of the given consistency: a ReadIndex round for a
    /// linearizable read, the asked revision applied for a serializable one with `min_revision`.
    async fn wait_for_consistency(&self, consistency: ReadConsistency) -> Result<(), NodeError> {
        #[cfg(feature = "planted-bugs")]
        if consistency == ReadConsistency::Linearizable
            && crate::planted_bugs::linearizable_reads_are_served_locally()
        {
            return Ok(());
        }
        match consistency {
            ReadConsistency::Linearizable => self
                .member
                .linearizable_read_barrier()
                .await
                .map_err(node_error),
            ReadConsistency::Serializable {
                min_revision: Some(revision),
            } => self
                .member
                .wait_for_revision(revision, self.request_timeout)
                .await
                .map_err(node_error),
            ReadConsistency::Serializable { min_revision: None } => Ok(()),
        }
    }

    /// The raft member, for metrics and tests.
    pub fn member(&self) -> &RaftMember {
        &self.member
    }

    /// This member's metrics (what `GET /metrics` serves).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn header_at(&self, revision: u64) -> ResponseHeader {
        ResponseHeader {
            revision,
            member_id: self.member.id(),
            raft_term: self.member.term(),
        }
    }

    /// Stores `value` under `key`.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<Written, NodeError> {
        let put = PutRequest {
            key: key.into(),
            value: value.into(),
            lease: 0,
            prev_kv: false,
        };
        self.write(Request::Put(put)).await
    }

    /// Reads one key linearizably.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<KeyValue>, NodeError> {
        let request = RangeRequest::of(KeyRange::single(key));
        let answer = self.read(request, ReadConsistency::Linearizable).await?;
        Ok(answer.response.kvs.into_iter().next())
    }

    /// Deletes one key; answers how many keys were deleted (0 or 1).
    pub async fn delete(&self, key: impl Into<Vec<u8>>) -> Result<u64, NodeError> {
        let delete = DeleteRangeRequest {
            range: KeyRange::single(key),
            prev_kv: false,
        };
        match self.write(Request::DeleteRange(delete)).await?.response {
            Response::DeleteRange(deleted) => Ok(deleted.deleted),
            other => Err(NodeError::Internal(format!("delete answered {other:?}"))),
        }
    }

    /// The members of the last committed configuration.
    fn member_infos(&self) -> Vec<MemberInfo> {
        let promotions = self.learner_promotions();
        let members = self.member.members().into_iter();
        members
            .map(|member| member_info(member, &promotions))
            .collect()
    }

    /// The members of the latest configuration in this member's log, committed or not: what may
    /// yet take effect (the simulator follows it after a change that timed out), where
    /// `KvBackend::members` lists only what has.
    pub fn members_including_pending_change(&self) -> Vec<MemberInfo> {
        let members = self.member.members_including_pending_change();
        let promotions = self.learner_promotions();
        members
            .into_iter()
            .map(|member| member_info(member, &promotions))
            .collect()
    }

    /// The learners the store holds to promote; none if they cannot be read (the listing of the
    /// members does not fail for it, and the fault is logged).
    fn learner_promotions(&self) -> Vec<revkv_storage::LearnerPromotion> {
        self.member
            .store()
            .learner_promotions()
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "reading the learners to promote failed");
                Vec::new()
            })
    }

    async fn admin(&self, request: AdminRequest) -> Result<Vec<MemberInfo>, NodeError> {
        self.member.admin(request).await.map_err(node_error)?;
        Ok(self.member_infos())
    }
}

impl KvBackend for MemberBackend {
    fn member_id(&self) -> u64 {
        self.member.id()
    }

    fn cluster_id(&self) -> u64 {
        self.member.store().known_cluster_id()
    }

    fn backup_source(&self) -> BackupSource {
        BackupSource {
            store: self.member.store().clone(),
            member_id: self.member.id(),
        }
    }

    fn header(&self) -> Result<ResponseHeader, NodeError> {
        let revision = self.member.store().current_revision()?;
        Ok(self.header_at(revision))
    }

    fn header_for_revision(&self, revision: u64) -> Result<ResponseHeader, NodeError> {
        Ok(MemberBackend::header_at(self, revision))
    }

    async fn write(&self, request: Request) -> Result<Written, NodeError> {
        // Refuse bad input here, before it costs a raft round (the state machine checks again).
        validate_request(&request, self.member.store().limits())?;
        let written = self.member.write(request).await.map_err(|error| {
            self.metrics.raft.record_proposal_failed();
            node_error(error)
        })?;
        let response = written
            .outcome
            .map_err(|rejection| rejection.into_storage())?;
        Ok(Written {
            header: self.header_at(written.revision),
            response,
        })
    }

    async fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<ReadAnswer, NodeError> {
        validate_range(&request, self.member.store().limits())?;
        self.wait_for_consistency(consistency).await?;
        let read = if reads_one_key(&request) {
            // One key is a seek in the key index and one history lookup: microseconds, less than
            // the thread hop to the blocking pool and back would cost, so it runs right here.
            self.member.store().range(&request)?
        } else {
            let store = self.member.store().clone();
            revkv_raft::runtime::offload(move || store.range(&request))
                .await
                .map_err(|error| NodeError::Internal(error.to_string()))??
        };
        Ok(ReadAnswer {
            header: self.header_at(read.revision),
            response: read.response,
        })
    }

    async fn read_txn(
        &self,
        txn: TxnRequest,
        consistency: ReadConsistency,
    ) -> Result<TxnAnswer, NodeError> {
        validate_txn(&txn, self.member.store().limits())?;
        self.wait_for_consistency(consistency).await?;
        // Its gets may read many values, so it runs off the async threads, as a range does.
        let store = self.member.store().clone();
        let read = revkv_raft::runtime::offload(move || store.read_txn(&txn))
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))??;
        Ok(TxnAnswer {
            header: self.header_at(read.revision),
            response: read.response,
        })
    }

    async fn key_history(
        &self,
        key: Vec<u8>,
        from_revision: Option<u64>,
        limit: u64,
        consistency: ReadConsistency,
    ) -> Result<(ResponseHeader, KeyHistory), NodeError> {
        self.wait_for_consistency(consistency).await?;
        // A page reads up to `limit` values, so it runs off the async threads.
        let store = self.member.store().clone();
        let history =
            revkv_raft::runtime::offload(move || store.key_history(&key, from_revision, limit))
                .await
                .map_err(|error| NodeError::Internal(error.to_string()))??;
        Ok((self.header_at(history.revision), history))
    }

    async fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> Result<GrantedLease, NodeError> {
        let written = self
            .member
            .lease_grant(id, ttl_seconds)
            .await
            .map_err(node_error)?;
        match written
            .outcome
            .map_err(|rejection| rejection.into_storage())?
        {
            Response::LeaseGrant(granted) => Ok(GrantedLease {
                header: self.header_at(written.revision),
                id: granted.id,
                ttl_seconds: granted.ttl_seconds,
            }),
            other => Err(NodeError::Internal(format!(
                "lease grant answered {other:?}"
            ))),
        }
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<(ResponseHeader, i64), NodeError> {
        let ttl = self.member.lease_keep_alive(id).await.map_err(node_error)?;
        Ok((self.header()?, ttl))
    }

    async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLive, NodeError> {
        let reading = self
            .member
            .lease_time_to_live(id, with_keys)
            .await
            .map_err(node_error)?;
        Ok(LeaseTimeToLive {
            header: self.header()?,
            id: reading.id,
            granted_ttl_seconds: reading.granted_ttl_seconds,
            remaining_ttl_seconds: reading.remaining_ttl_seconds,
            keys: reading.keys,
        })
    }

    async fn lease_ids(&self) -> Result<(ResponseHeader, Vec<i64>), NodeError> {
        self.member
            .linearizable_read_barrier()
            .await
            .map_err(node_error)?;
        let store = self.member.store().clone();
        let leases = revkv_raft::runtime::offload(move || store.leases())
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))??;
        let ids = leases.into_iter().map(|lease| lease.id).collect();
        Ok((self.header()?, ids))
    }

    async fn hash(&self, revision: Option<u64>) -> Result<(ResponseHeader, StateHash), NodeError> {
        let store = self.member.store().clone();
        let hash = revkv_raft::runtime::offload(move || store.hash(revision))
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))??;
        let current = self.member.store().current_revision()?;
        Ok((self.header_at(current), hash))
    }

    async fn status(&self) -> Result<MemberStatus, NodeError> {
        let report = self.member.member_report().map_err(node_error)?;
        Ok(member_status(report))
    }

    async fn cluster_status(&self) -> Result<Vec<ClusterMemberStatus>, NodeError> {
        let answers = self.member.member_reports(CLUSTER_STATUS_TIMEOUT).await;
        Ok(answers
            .into_iter()
            .map(|answer| ClusterMemberStatus {
                member_id: answer.member_id,
                status: answer.report.map(member_status),
            })
            .collect())
    }

    fn quota_backend_bytes(&self) -> Option<u64> {
        Some(self.quota_backend_bytes)
    }

    async fn members(&self) -> Result<Vec<MemberInfo>, NodeError> {
        Ok(self.member_infos())
    }

    async fn add_learner(
        &self,
        member: MemberInfo,
        join: LearnerJoin,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        let node = MemberNode {
            peer_url: member.peer_url,
            client_url: member.client_url,
            grpc_url: member.grpc_url,
        };
        let id = member.id;
        let request = match join {
            LearnerJoin::StayLearner => AdminRequest::AddLearner { id, node },
            LearnerJoin::PromoteWhenCaughtUp { max_lag_entries } => {
                AdminRequest::AddLearnerToPromote {
                    id,
                    node,
                    max_lag_entries,
                }
            }
        };
        self.admin(request).await
    }

    async fn add_member_at(
        &self,
        peer_url: String,
        role: AddedMemberRole,
    ) -> Result<(MemberInfo, Vec<MemberInfo>), NodeError> {
        let identity = self
            .member
            .identify_new_member(&peer_url)
            .await
            .map_err(node_error)?;
        let added = MemberInfo {
            id: identity.id,
            peer_url,
            client_url: identity.node.client_url,
            grpc_url: identity.node.grpc_url,
            is_learner: role != AddedMemberRole::Voter,
            auto_promote_max_lag: None,
        };
        let join = match role {
            AddedMemberRole::Voter => LearnerJoin::StayLearner,
            AddedMemberRole::Learner(join) => join,
        };
        let mut members = self.add_learner(added.clone(), join).await?;
        if role == AddedMemberRole::Voter {
            members = self.promote(added.id).await?;
        }
        Ok((added, members))
    }

    async fn update_member_peer_url(
        &self,
        id: u64,
        peer_url: String,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        let url: axum::http::Uri = peer_url
            .parse()
            .map_err(|error| NodeError::Invalid(format!("peer URL {peer_url:?}: {error}")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(NodeError::Invalid(format!(
                "peer URL {peer_url:?} is not an http:// or https:// URL with a host"
            )));
        }
        let current = self
            .member_infos()
            .into_iter()
            .find(|member| member.id == id);
        let Some(current) = current else {
            return Err(NodeError::NotFound(Missing::Member(id)));
        };
        // The client URLs stay as the member published them; only the peer URL moves.
        let node = MemberNode {
            peer_url,
            client_url: current.client_url,
            grpc_url: current.grpc_url,
        };
        self.admin(AdminRequest::UpdateNode { id, node }).await
    }

    async fn promote(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.admin(AdminRequest::Promote { id }).await
    }

    async fn remove_member(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.admin(AdminRequest::Remove { id }).await
    }

    async fn transfer_leader(&self, to: u64) -> Result<(), NodeError> {
        self.admin(AdminRequest::TransferLeader { to })
            .await
            .map(|_| ())
    }

    async fn is_ready(&self) -> bool {
        self.member.is_ready()
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.watch_hub
    }

    fn auth_records(&self) -> std::sync::Arc<revkv_storage::auth::AuthState> {
        self.member.store().auth()
    }

    fn alarms(&self) -> Result<Vec<Alarm>, NodeError> {
        Ok(self.member.store().alarms()?)
    }

    async fn defragment(&self) -> Result<Defragmented, NodeError> {
        crate::space_quota::defragment_store(self.member.store().clone()).await
    }
}

/// True for a read of a single key at any revision: bounded work, whatever the store's size.
fn reads_one_key(request: &RangeRequest) -> bool {
    request
        .range
        .as_ref()
        .is_some_and(|range| range.end == RangeEnd::Single)
}
