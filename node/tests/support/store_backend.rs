//! `StoreBackend`: a `KvBackend` that applies every write straight to a real `MvccStore` in a
//! temporary directory, as the next log entry (no raft), so the HTTP API is tested against the real
//! storage semantics. Membership is an in-memory list so the membership routes can be exercised.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use revkv_node::watch::{WatchHub, WatchLimits};
use revkv_node::{
    BackupSource, GrantedLease, KvBackend, LeaseTimeToLive, MemberInfo, MemberStatus, Missing,
    NodeError, ReadAnswer, ReadConsistency, ResponseHeader, TxnAnswer, Written,
};
use revkv_storage::{
    ApplyEntry, EntryPayload, KeyHistory, LogId, MvccStore, RangeRequest, Request, Response,
    StateHash, StoreOptions, TxnRequest,
};
use tokio::sync::watch;

pub const MEMBER_ID: u64 = 1;
pub const RAFT_TERM: u64 = 3;

/// A single-member backend over a real store: writes are applied as consecutive log entries.
pub struct StoreBackend {
    store: Arc<MvccStore>,
    watch_hub: Arc<WatchHub>,
    /// The log index the next write takes; the lock also serialises writes, as raft's log does.
    next_index: Mutex<u64>,
    /// The store revision after the latest write, so `min_revision` reads can wait for it.
    applied_revision: watch::Sender<u64>,
    members: Mutex<Vec<MemberInfo>>,
    ready: AtomicBool,
    request_timeout: Duration,
    _dir: tempfile::TempDir,
}

impl StoreBackend {
    /// A backend with the default watch limits. Must be called inside a tokio runtime (the watch
    /// hub starts a task).
    pub fn new(request_timeout: Duration) -> Self {
        Self::with_watch_limits(request_timeout, WatchLimits::default())
    }

    pub fn with_watch_limits(request_timeout: Duration, watch_limits: WatchLimits) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = MvccStore::open(dir.path().join("state.redb"), StoreOptions::default())
            .expect("open the store");
        let store = Arc::new(store);
        let revision = store.current_revision().expect("current revision");
        let applied_revision = watch::Sender::new(revision);
        let watch_hub = WatchHub::start(
            store.clone(),
            applied_revision.subscribe(),
            watch_limits,
            None,
        )
        .expect("start the watch hub");
        StoreBackend {
            store,
            watch_hub,
            next_index: Mutex::new(1),
            applied_revision,
            members: Mutex::new(vec![member(MEMBER_ID, false)]),
            ready: AtomicBool::new(true),
            request_timeout,
            _dir: dir,
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// How many reads are waiting for a `min_revision` right now (the watch hub's own
    /// subscription is not one).
    pub fn waiting_readers(&self) -> usize {
        self.applied_revision.receiver_count() - 1
    }

    fn header(&self, revision: u64) -> ResponseHeader {
        ResponseHeader {
            revision,
            member_id: MEMBER_ID,
            raft_term: RAFT_TERM,
        }
    }

    /// Waits (bounded by the request timeout) until the store has applied `revision`.
    async fn wait_for_revision(&self, revision: u64) -> Result<(), NodeError> {
        let mut applied = self.applied_revision.subscribe();
        let reached = applied.wait_for(|applied| *applied >= revision);
        // Drop the borrow of `applied` (the `watch::Ref`) before leaving the function.
        let outcome = tokio::time::timeout(self.request_timeout, reached)
            .await
            .map(|waited| waited.is_ok());
        match outcome {
            Ok(true) => Ok(()),
            _ => Err(NodeError::Timeout(format!(
                "revision {revision} was not applied within {:?}",
                self.request_timeout
            ))),
        }
    }

    fn find_member<T>(
        &self,
        id: u64,
        change: impl FnOnce(&mut Vec<MemberInfo>, usize) -> Result<T, NodeError>,
    ) -> Result<T, NodeError> {
        let mut members = self.members.lock().unwrap();
        match members.iter().position(|member| member.id == id) {
            Some(index) => change(&mut members, index),
            None => Err(NodeError::NotFound(Missing::Member(id))),
        }
    }
}

pub fn member(id: u64, is_learner: bool) -> MemberInfo {
    MemberInfo {
        auto_promote_max_lag: None,
        id,
        peer_url: format!("http://127.0.0.{id}:2380"),
        client_url: format!("http://127.0.0.{id}:2379"),
        grpc_url: None,
        is_learner,
    }
}

impl KvBackend for StoreBackend {
    fn member_id(&self) -> u64 {
        MEMBER_ID
    }

    fn cluster_id(&self) -> u64 {
        self.store.known_cluster_id()
    }

    async fn write(&self, request: Request) -> Result<Written, NodeError> {
        let outcome = {
            let mut next_index = self.next_index.lock().unwrap();
            let entry = ApplyEntry {
                log_id: LogId {
                    term: RAFT_TERM,
                    node_id: MEMBER_ID,
                    index: *next_index,
                },
                payload: EntryPayload::Request(request),
            };
            let outcome = self
                .store
                .apply_batch(&[entry])?
                .pop()
                .expect("one outcome");
            *next_index += 1;
            outcome
        };
        self.applied_revision.send_replace(outcome.revision);
        Ok(Written {
            header: self.header(outcome.revision),
            response: outcome.result?,
        })
    }

    async fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<ReadAnswer, NodeError> {
        if let ReadConsistency::Serializable {
            min_revision: Some(revision),
        } = consistency
        {
            self.wait_for_revision(revision).await?;
        }
        let result = self.store.range(&request)?;
        Ok(ReadAnswer {
            header: self.header(result.revision),
            response: result.response,
        })
    }

    async fn read_txn(
        &self,
        txn: TxnRequest,
        consistency: ReadConsistency,
    ) -> Result<TxnAnswer, NodeError> {
        if let ReadConsistency::Serializable {
            min_revision: Some(revision),
        } = consistency
        {
            self.wait_for_revision(revision).await?;
        }
        let result = self.store.read_txn(&txn)?;
        Ok(TxnAnswer {
            header: self.header(result.revision),
            response: result.response,
        })
    }

    async fn key_history(
        &self,
        key: Vec<u8>,
        from_revision: Option<u64>,
        limit: u64,
        consistency: ReadConsistency,
    ) -> Result<(ResponseHeader, KeyHistory), NodeError> {
        if let ReadConsistency::Serializable {
            min_revision: Some(revision),
        } = consistency
        {
            self.wait_for_revision(revision).await?;
        }
        let history = self.store.key_history(&key, from_revision, limit)?;
        Ok((self.header(history.revision), history))
    }

    /// Grants with the given id or the next free one from 1000; no minimum TTL and no clock: the
    /// expiry itself is tested on real members (`node/bin/tests/leases.rs`).
    async fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> Result<GrantedLease, NodeError> {
        let id = match id {
            Some(id) => id,
            None => (1000..)
                .find(|id| self.store.lease(*id).ok().flatten().is_none())
                .unwrap(),
        };
        let written = self.write(Request::LeaseGrant { id, ttl_seconds }).await?;
        let Response::LeaseGrant(granted) = written.response else {
            return Err(NodeError::Internal(
                "a grant answered something else".into(),
            ));
        };
        Ok(GrantedLease {
            header: written.header,
            id: granted.id,
            ttl_seconds: granted.ttl_seconds,
        })
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<(ResponseHeader, i64), NodeError> {
        let lease = self.store.lease(id)?;
        let lease = lease.ok_or_else(|| NodeError::NotFound(Missing::Lease(id)))?;
        Ok((KvBackend::header(self)?, lease.granted_ttl_seconds))
    }

    async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLive, NodeError> {
        let lease = self.store.lease(id)?;
        let lease = lease.ok_or_else(|| NodeError::NotFound(Missing::Lease(id)))?;
        let keys = if with_keys {
            self.store.lease_keys(id)?
        } else {
            Vec::new()
        };
        Ok(LeaseTimeToLive {
            header: KvBackend::header(self)?,
            id,
            granted_ttl_seconds: lease.granted_ttl_seconds,
            remaining_ttl_seconds: lease.granted_ttl_seconds,
            keys,
        })
    }

    async fn lease_ids(&self) -> Result<(ResponseHeader, Vec<i64>), NodeError> {
        let ids = self
            .store
            .leases()?
            .into_iter()
            .map(|lease| lease.id)
            .collect();
        Ok((KvBackend::header(self)?, ids))
    }

    async fn hash(&self, revision: Option<u64>) -> Result<(ResponseHeader, StateHash), NodeError> {
        let hash = self.store.hash(revision)?;
        let header = self.header(self.store.current_revision()?);
        Ok((header, hash))
    }

    fn header(&self) -> Result<ResponseHeader, NodeError> {
        Ok(ResponseHeader {
            revision: self.store.current_revision()?,
            member_id: MEMBER_ID,
            raft_term: RAFT_TERM,
        })
    }

    async fn status(&self) -> Result<MemberStatus, NodeError> {
        let stats = self.store.stats()?;
        let applied = *self.next_index.lock().unwrap() - 1;
        Ok(MemberStatus {
            member_id: MEMBER_ID,
            leader_id: Some(MEMBER_ID),
            raft_term: RAFT_TERM,
            commit_index: applied,
            applied_index: applied,
            revision: stats.current_revision,
            compact_revision: stats.compact_revision,
            state_db_bytes: stats.file_bytes,
            state_db_bytes_in_use: stats.bytes_in_use,
            log_db_bytes: 0,
            version: "test".into(),
            role: "leader".into(),
            client_urls_published: true,
        })
    }

    async fn members(&self) -> Result<Vec<MemberInfo>, NodeError> {
        Ok(self.members.lock().unwrap().clone())
    }

    async fn add_member_at(
        &self,
        peer_url: String,
        _role: revkv_node::AddedMemberRole,
    ) -> Result<(MemberInfo, Vec<MemberInfo>), NodeError> {
        Err(NodeError::Invalid(format!(
            "this single-store test backend has no peers to reach at {peer_url}"
        )))
    }

    async fn add_learner(
        &self,
        new: MemberInfo,
        _join: revkv_node::LearnerJoin,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        let mut members = self.members.lock().unwrap();
        if members.iter().any(|member| member.id == new.id) {
            return Err(NodeError::Invalid(format!(
                "member {} already exists",
                new.id
            )));
        }
        members.push(new);
        Ok(members.clone())
    }

    async fn promote(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.find_member(id, |members, index| {
            members[index].is_learner = false;
            Ok(members.clone())
        })
    }

    async fn update_member_peer_url(
        &self,
        id: u64,
        peer_url: String,
    ) -> Result<Vec<MemberInfo>, NodeError> {
        self.find_member(id, |members, index| {
            members[index].peer_url = peer_url;
            Ok(members.clone())
        })
    }

    async fn remove_member(&self, id: u64) -> Result<Vec<MemberInfo>, NodeError> {
        self.find_member(id, |members, index| {
            members.remove(index);
            Ok(members.clone())
        })
    }

    async fn transfer_leader(&self, to: u64) -> Result<(), NodeError> {
        self.find_member(to, |members, index| match members[index].is_learner {
            true => Err(NodeError::Invalid(format!("member {to} is a learner"))),
            false => Ok(()),
        })
    }

    async fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.watch_hub
    }

    fn auth_records(&self) -> std::sync::Arc<revkv_storage::auth::AuthState> {
        self.store.auth()
    }

    fn alarms(&self) -> Result<Vec<revkv_storage::Alarm>, NodeError> {
        Ok(self.store.alarms()?)
    }

    async fn defragment(&self) -> Result<revkv_storage::Defragmented, NodeError> {
        revkv_node::space_quota::defragment_store(self.store.clone()).await
    }

    fn backup_source(&self) -> BackupSource {
        BackupSource {
            store: self.store.clone(),
            member_id: MEMBER_ID,
        }
    }
}
