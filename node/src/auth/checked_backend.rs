//! A backend that acts for one caller: every request a handler makes through it is checked
//! against what the caller may do before it reaches the member. Handlers of key-touching routes
//! get their backend through this wrapper (`http::auth_gate::CheckedState`), so a code path
//! added later cannot forget the check: a write is checked by what its request needs
//! (`revkv_storage::required_access::requirement_of`: txns per compare and op of both branches), a read and a
//! key's history by read access to their keys, a watch by read access to its range, a lease
//! revoke by write access to every key the lease holds, and a lease's key list by read access to
//! those keys. Administration is gated per route instead (`http::auth_gate`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use revkv_storage::auth::{Access, AuthState};
use revkv_storage::required_access::{requirement_of, requirement_of_txn};
use revkv_storage::{
    Alarm, Defragmented, KeyHistory, KeyRange, RangeRequest, Request, StateHash, TxnRequest,
};

use super::caller::Caller;
use crate::backend::{
    BackupSource, ClusterMemberStatus, GrantedLease, KvBackend, LeaseTimeToLive, MemberInfo,
    MemberStatus, ReadAnswer, ReadConsistency, ResponseHeader, TxnAnswer, Written,
};
use crate::error::NodeError;
use crate::watch::WatchHub;

/// `inner`, acting for `caller`.
pub struct CheckedBackend<B> {
    inner: Arc<B>,
    caller: Caller,
}

impl<B: KvBackend> CheckedBackend<B> {
    pub fn new(inner: Arc<B>, caller: Caller) -> Self {
        CheckedBackend { inner, caller }
    }

    /// A revoke deletes every key of the lease, so it needs write access to each (etcd's rule).
    async fn check_revoke(&self, id: i64) -> Result<(), NodeError> {
        if self.caller.is_unrestricted() {
            return Ok(());
        }
        let lease = self.inner.lease_time_to_live(id, true).await?;
        self.require_each_key(Access::Write, &lease.keys)
    }

    fn require_each_key(&self, access: Access, keys: &[Vec<u8>]) -> Result<(), NodeError> {
        keys.iter().try_for_each(|key| {
            self.caller
                .require_keys(access, &KeyRange::single(key.clone()))
        })
    }
}

impl<B: KvBackend> KvBackend for CheckedBackend<B> {
    fn member_id(&self) -> u64 {
        self.inner.member_id()
    }

    fn cluster_id(&self) -> u64 {
        self.inner.cluster_id()
    }

    fn header(&self) -> Result<ResponseHeader, NodeError> {
        self.inner.header()
    }

    fn header_for_revision(&self, revision: u64) -> Result<ResponseHeader, NodeError> {
        self.inner.header_for_revision(revision)
    }

    async fn write(&self, request: Request) -> Result<Written, NodeError> {
        match &request {
            Request::LeaseRevoke { id } => self.check_revoke(*id).await?,
            other => self.caller.require(&requirement_of(other))?,
        }
        self.inner.write(request).await
    }

    async fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<ReadAnswer, NodeError> {
        if let Some(keys) = &request.range {
            self.caller.require_keys(Access::Read, keys)?;
        }
        self.inner.read(request, consistency).await
    }

    async fn read_txn(
        &self,
        txn: TxnRequest,
        consistency: ReadConsistency,
    ) -> Result<TxnAnswer, NodeError> {
        // The same rule as for a txn that writes: read access to every compare's key and every
        // get's range, of both branches (`requirement_of`).
        self.caller.require(&requirement_of_txn(&txn))?;
        self.inner.read_txn(txn, consistency).await
    }

    async fn key_history(
        &self,
        key: Vec<u8>,
        from_revision: Option<u64>,
        limit: u64,
        consistency: ReadConsistency,
    ) -> Result<(ResponseHeader, KeyHistory), NodeError> {
        self.caller
            .require_keys(Access::Read, &KeyRange::single(key.clone()))?;
        self.inner
            .key_history(key, from_revision, limit, consistency)
            .await
    }

    fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> impl Future<Output = Result<GrantedLease, NodeError>> + Send {
        self.inner.lease_grant(id, ttl_seconds)
    }

    fn lease_keep_alive(
        &self,
        id: i64,
    ) -> impl Future<Output = Result<(ResponseHeader, i64), NodeError>> + Send {
        self.inner.lease_keep_alive(id)
    }

    async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLive, NodeError> {
        let answer = self.inner.lease_time_to_live(id, with_keys).await?;
        self.require_each_key(Access::Read, &answer.keys)?;
        Ok(answer)
    }

    fn lease_ids(
        &self,
    ) -> impl Future<Output = Result<(ResponseHeader, Vec<i64>), NodeError>> + Send {
        self.inner.lease_ids()
    }

    fn hash(
        &self,
        revision: Option<u64>,
    ) -> impl Future<Output = Result<(ResponseHeader, StateHash), NodeError>> + Send {
        self.inner.hash(revision)
    }

    fn status(&self) -> impl Future<Output = Result<MemberStatus, NodeError>> + Send {
        self.inner.status()
    }

    fn members(&self) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send {
        self.inner.members()
    }

    fn cluster_status(
        &self,
    ) -> impl Future<Output = Result<Vec<ClusterMemberStatus>, NodeError>> + Send {
        self.inner.cluster_status()
    }

    fn quota_backend_bytes(&self) -> Option<u64> {
        self.inner.quota_backend_bytes()
    }

    fn add_learner(
        &self,
        member: MemberInfo,
        join: crate::backend::LearnerJoin,
    ) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send {
        self.inner.add_learner(member, join)
    }

    fn add_member_at(
        &self,
        peer_url: String,
        role: crate::backend::AddedMemberRole,
    ) -> impl Future<Output = Result<(MemberInfo, Vec<MemberInfo>), NodeError>> + Send {
        self.inner.add_member_at(peer_url, role)
    }

    fn update_member_peer_url(
        &self,
        id: u64,
        peer_url: String,
    ) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send {
        self.inner.update_member_peer_url(id, peer_url)
    }

    fn promote(&self, id: u64) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send {
        self.inner.promote(id)
    }

    fn remove_member(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send {
        self.inner.remove_member(id)
    }

    fn transfer_leader(&self, to: u64) -> impl Future<Output = Result<(), NodeError>> + Send {
        self.inner.transfer_leader(to)
    }

    fn is_ready(&self) -> impl Future<Output = bool> + Send {
        self.inner.is_ready()
    }

    fn request_timeout(&self) -> Duration {
        self.inner.request_timeout()
    }

    fn watch_hub(&self) -> &Arc<WatchHub> {
        self.inner.watch_hub()
    }

    fn authorize_watch(&self, keys: &KeyRange) -> Result<(), NodeError> {
        self.caller.require_keys(Access::Read, keys)
    }

    fn alarms(&self) -> Result<Vec<Alarm>, NodeError> {
        self.inner.alarms()
    }

    fn defragment(&self) -> impl Future<Output = Result<Defragmented, NodeError>> + Send {
        self.inner.defragment()
    }

    fn backup_source(&self) -> BackupSource {
        self.inner.backup_source()
    }

    fn auth_records(&self) -> Arc<AuthState> {
        self.inner.auth_records()
    }
}
