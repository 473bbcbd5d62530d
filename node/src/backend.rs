//! The operations the HTTP API needs from a member, as a trait, so the API can be tested against a
//! plain store and served by the replicated member without knowing which it talks to.
//!
//! `Node` (the replicated member) implements this trait; tests use a backend that applies requests
//! straight to an `MvccStore`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use revkv_storage::auth::AuthState;
use revkv_storage::{
    Alarm, Defragmented, KeyHistory, KeyRange, RangeRequest, RangeResponse, Request, Response,
    StateHash, TxnRequest, TxnResponse,
};
use serde::{Deserialize, Serialize};

use crate::error::NodeError;
use crate::watch::WatchHub;

/// How a read may be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadConsistency {
    /// Strict serializable with writes: a ReadIndex round through the leader, then a local read.
    Linearizable,
    /// The member's local state, possibly stale but never going backwards; with `min_revision`, waits
    /// (bounded) until the member has applied at least that revision.
    Serializable { min_revision: Option<u64> },
}

/// The header every answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResponseHeader {
    /// The store revision the answer reflects.
    pub revision: u64,
    pub member_id: u64,
    pub raft_term: u64,
}

/// A write that was applied (it may still have been a failed txn compare; that is a `Response`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub header: ResponseHeader,
    pub response: Response,
}

/// A range read's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadAnswer {
    pub header: ResponseHeader,
    pub response: RangeResponse,
}

/// A read-only txn's answer and the header of the revision it read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnAnswer {
    pub header: ResponseHeader,
    pub response: TxnResponse,
}

/// A granted lease as the grant answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantedLease {
    pub header: ResponseHeader,
    pub id: i64,
    /// The TTL granted, after the minimum TTL was applied.
    pub ttl_seconds: i64,
}

/// A lease's time-to-live, as the leader reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseTimeToLive {
    pub header: ResponseHeader,
    pub id: i64,
    pub granted_ttl_seconds: i64,
    /// Whole seconds before the leader expires it, rounded up.
    pub remaining_ttl_seconds: i64,
    /// The attached keys, when asked for.
    pub keys: Vec<Vec<u8>>,
}

/// How a new learner joins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LearnerJoin {
    /// The answer waits until the learner has caught up (bounded); it stays a learner until
    /// promoted by hand.
    #[default]
    StayLearner,
    /// The answer comes once the learner is in the membership; the leader promotes it once its
    /// log is at most `max_lag_entries` behind (`None`: the leader's default,
    /// `--auto-promote-max-lag`).
    PromoteWhenCaughtUp { max_lag_entries: Option<u64> },
}

impl LearnerJoin {
    /// The join a request asks for, its two settings named as the request's API names them (so a
    /// refusal points at the field or header to fix): the lag bound means something only with
    /// auto-promotion, and a bound of 0 entries could never be met while writes go on.
    pub fn asked(
        auto_promote: bool,
        max_lag_entries: Option<u64>,
        (auto_promote_name, max_lag_name): (&str, &str),
    ) -> Result<LearnerJoin, NodeError> {
        match (auto_promote, max_lag_entries) {
            (false, None) => Ok(LearnerJoin::StayLearner),
            (false, Some(_)) => Err(NodeError::Invalid(format!(
                "{max_lag_name} applies with {auto_promote_name} only"
            ))),
            (true, Some(0)) => Err(NodeError::Invalid(format!(
                "{max_lag_name} must be at least 1 entry"
            ))),
            (true, max_lag_entries) => Ok(LearnerJoin::PromoteWhenCaughtUp { max_lag_entries }),
        }
    }
}

/// What a member added by its peer URL alone (etcd's `MemberAdd`) becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddedMemberRole {
    /// A voter, once it has caught up as a learner (etcd's `member add` without `--learner`).
    Voter,
    /// A learner that joins as the `LearnerJoin` says.
    Learner(LearnerJoin),
}

/// One member of the cluster as the membership API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberInfo {
    pub id: u64,
    pub peer_url: String,
    pub client_url: String,
    /// The URL of the member's etcd gRPC API (`revkv serve --listen-grpc`), if it serves one:
    /// what etcd clients see as its client URL in `MemberList`.
    pub grpc_url: Option<String>,
    /// A learner receives the log but does not vote.
    pub is_learner: bool,
    /// For a learner that promotes itself (`auto_promote`), the most entries its log may be
    /// behind the leader's for the leader to promote it; absent for every other member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promote_max_lag: Option<u64>,
}

/// What `GET /v1/status` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberStatus {
    pub member_id: u64,
    pub leader_id: Option<u64>,
    pub raft_term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub revision: u64,
    pub compact_revision: u64,
    pub state_db_bytes: u64,
    /// The bytes of records the state file holds (`StoreStats::bytes_in_use`); `state_db_bytes`
    /// less this is at most what `POST /v1/defragment` can give back.
    pub state_db_bytes_in_use: u64,
    pub log_db_bytes: u64,
    pub version: String,
    /// "leader", "follower", "candidate", "learner" or "shutdown".
    pub role: String,
    /// True once the membership holds this member's client URLs as it advertises them. A
    /// founding member publishes them after a leader is known and keeps trying until it has;
    /// until then `GET /v1/members` shows its entry without them.
    pub client_urls_published: bool,
}

/// One member's entry in the cluster-wide status (`GET /v1/cluster/status`): its status as it
/// reported it, or why it gave none (down, cut off, too slow).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMemberStatus {
    pub member_id: u64,
    pub status: Result<MemberStatus, String>,
}

/// How long the cluster-wide status waits for each member's report: long enough for a loaded
/// member, short enough that a console refreshing every few seconds never piles requests up.
pub const CLUSTER_STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// The member operations behind the HTTP API. Every method is bounded in time by the member.
pub trait KvBackend: Send + Sync + 'static {
    /// This member's id.
    fn member_id(&self) -> u64;

    /// The id of the cluster this member belongs to, 0 while it knows none (etcd's headers carry
    /// it; revkv's HTTP answers do not). Cheap: no read transaction.
    fn cluster_id(&self) -> u64;

    /// The header for an answer that reflects no particular read: this member's current revision
    /// and term. Cheap (no file statistics), unlike `status`.
    fn header(&self) -> Result<ResponseHeader, NodeError>;

    /// The header of an answer about `revision` (a watch's events, say): this member and its term
    /// with that revision. A backend that knows its term without reading the store overrides it,
    /// because watch streams build one per watch per event.
    fn header_for_revision(&self, revision: u64) -> Result<ResponseHeader, NodeError> {
        let mut header = self.header()?;
        header.revision = revision;
        Ok(header)
    }

    /// Replicates a change and answers once this member has applied it. A request the store rejects
    /// (invalid, too large, compacted, future revision) is an `Err` carrying the storage error.
    fn write(&self, request: Request) -> impl Future<Output = Result<Written, NodeError>> + Send;

    /// Reads a range (or one key) with the given consistency.
    fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> impl Future<Output = Result<ReadAnswer, NodeError>> + Send;

    /// Answers a txn that only reads (`TxnRequest::reads_only`) without the raft log, as etcd
    /// does: after the barrier `consistency` asks for, from the member's store at its current
    /// revision. A txn that writes is refused as invalid: it goes through `write`.
    fn read_txn(
        &self,
        txn: TxnRequest,
        consistency: ReadConsistency,
    ) -> impl Future<Output = Result<TxnAnswer, NodeError>> + Send;

    /// A page of one key's history (every version and tombstone from `from_revision` on, oldest
    /// first; from the oldest kept revision without it), read with the given consistency.
    fn key_history(
        &self,
        key: Vec<u8>,
        from_revision: Option<u64>,
        limit: u64,
        consistency: ReadConsistency,
    ) -> impl Future<Output = Result<(ResponseHeader, KeyHistory), NodeError>> + Send;

    /// Grants a lease: with `id` (must be unused) or one the cluster picks, for at least
    /// `ttl_seconds` (raised to the minimum TTL). Revoking is a `write` of `Request::LeaseRevoke`.
    fn lease_grant(
        &self,
        id: Option<i64>,
        ttl_seconds: i64,
    ) -> impl Future<Output = Result<GrantedLease, NodeError>> + Send;

    /// Renews lease `id` to its granted TTL; answers the header and the granted TTL in seconds.
    /// A lease that is gone is `not_found`.
    fn lease_keep_alive(
        &self,
        id: i64,
    ) -> impl Future<Output = Result<(ResponseHeader, i64), NodeError>> + Send;

    /// Lease `id`'s granted and remaining TTL, and its keys when `with_keys`.
    fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> impl Future<Output = Result<LeaseTimeToLive, NodeError>> + Send;

    /// Every granted lease's id (linearizable).
    fn lease_ids(
        &self,
    ) -> impl Future<Output = Result<(ResponseHeader, Vec<i64>), NodeError>> + Send;

    /// The replica-consistency hash at a revision (default: current), with the answer's header.
    fn hash(
        &self,
        revision: Option<u64>,
    ) -> impl Future<Output = Result<(ResponseHeader, StateHash), NodeError>> + Send;

    fn status(&self) -> impl Future<Output = Result<MemberStatus, NodeError>> + Send;

    fn members(&self) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send;

    /// Every member's status, asked at once, each within [`CLUSTER_STATUS_TIMEOUT`], in member id
    /// order. A backend without peers (a plain store) has only its own.
    fn cluster_status(
        &self,
    ) -> impl Future<Output = Result<Vec<ClusterMemberStatus>, NodeError>> + Send {
        async move {
            Ok(vec![ClusterMemberStatus {
                member_id: self.member_id(),
                status: Ok(self.status().await?),
            }])
        }
    }

    /// The state file's size past which this member raises the NOSPACE alarm
    /// (`--quota-backend-bytes`), if it has one.
    fn quota_backend_bytes(&self) -> Option<u64> {
        None
    }

    /// Adds a learner: as `join` says, the answer waits until it has caught up (bounded), or
    /// comes once it is in the membership and the leader promotes it when it has caught up.
    fn add_learner(
        &self,
        member: MemberInfo,
        join: LearnerJoin,
    ) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send;

    /// Adds the member already running (`revkv serve --join`) at `peer_url`, which says its own
    /// id: as a learner that has caught up, then as a voter, or as the learner `role` says.
    /// Answers the added member and the membership after the change (etcd's `MemberAdd`).
    fn add_member_at(
        &self,
        peer_url: String,
        role: AddedMemberRole,
    ) -> impl Future<Output = Result<(MemberInfo, Vec<MemberInfo>), NodeError>> + Send;

    /// Points the cluster at a member's new peer URL (etcd's `MemberUpdate`): replicated as a
    /// membership change, after which every member sends that member's raft traffic there. The
    /// member itself is then (re)started listening there, as with etcd. Answers the membership.
    fn update_member_peer_url(
        &self,
        id: u64,
        peer_url: String,
    ) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send;

    /// Makes a learner a voter.
    fn promote(&self, id: u64) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send;

    /// Removes a member (voter or learner).
    fn remove_member(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Vec<MemberInfo>, NodeError>> + Send;

    /// Asks the leader to hand leadership to `to`.
    fn transfer_leader(&self, to: u64) -> impl Future<Output = Result<(), NodeError>> + Send;

    /// True when the member has a leader and has applied everything it knows to be committed.
    fn is_ready(&self) -> impl Future<Output = bool> + Send;

    /// How long `min_revision` waits and writes wait before answering `timeout`.
    fn request_timeout(&self) -> Duration;

    /// The member's watch hub, which serves `GET /v1/watch`.
    fn watch_hub(&self) -> &Arc<WatchHub>;

    /// The alarms raised, as this member has applied them (raised and cleared through `write`).
    fn alarms(&self) -> Result<Vec<Alarm>, NodeError>;

    /// Gives the space compaction freed in this member's state file back to the filesystem.
    /// Writes wait meanwhile (on this member only).
    fn defragment(&self) -> impl Future<Output = Result<Defragmented, NodeError>> + Send;

    /// The auth records as this member has applied them (changed through `write` of
    /// `Request::Auth`).
    fn auth_records(&self) -> Arc<AuthState>;

    /// Refuses a watch on `keys` that the caller this backend acts for may not read. A plain
    /// backend acts for no one in particular and allows every watch; `auth::CheckedBackend`
    /// checks.
    fn authorize_watch(&self, keys: &KeyRange) -> Result<(), NodeError> {
        let _ = keys;
        Ok(())
    }

    /// What a backup (`GET /v1/snapshot`) is read from: this member's own store (a serializable
    /// view: whatever this member has applied) and its id, which the stream's header names.
    fn backup_source(&self) -> BackupSource;
}

/// The store a backup streams from, and the member that holds it.
#[derive(Clone)]
pub struct BackupSource {
    pub store: Arc<revkv_storage::MvccStore>,
    pub member_id: u64,
}
