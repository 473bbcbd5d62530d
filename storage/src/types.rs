//! The request, response and record types of the MVCC store, shared by every layer above it.
//!
//! These types are plain data with serde derives: the raft layer replicates `Request`s through the
//! codec module, and the node layer turns responses into JSON. Byte strings are marked
//! `serde_bytes`, so the codec copies them whole instead of element by element (the encoding is the
//! same bytes either way; `codec.rs` has the test).

use serde::{Deserialize, Serialize};

pub use crate::key_range::{key_successor, prefix_end, KeyRange, RangeEnd};

/// One live key and its metadata, as etcd v3 reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    /// Revision of the key's latest creation.
    pub create_revision: u64,
    /// Revision of the key's latest change.
    pub mod_revision: u64,
    /// Changes since creation: 1 after create, reset by delete.
    pub version: u64,
    /// Lease id, 0 for none.
    pub lease: i64,
}

/// Store a value under a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub lease: i64,
    /// Return the key-value as it was before this put.
    pub prev_kv: bool,
}

/// Delete every key in a range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    pub range: KeyRange,
    /// Return the deleted key-values.
    pub prev_kv: bool,
}

/// Read a range of keys, now or at a past revision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    pub range: Option<KeyRange>,
    /// Read the state after this revision; `None` reads the current state.
    pub revision: Option<u64>,
    /// Most key-values to return; `None` means up to `Limits::max_range_keys`.
    pub limit: Option<u64>,
    pub keys_only: bool,
    pub count_only: bool,
    /// A token from an earlier page's `continue_token`: resume after that page, at its revision.
    pub continue_token: Option<String>,
}

impl RangeRequest {
    /// A read of the current state of `range` with no options.
    pub fn of(range: KeyRange) -> Self {
        RangeRequest {
            range: Some(range),
            ..RangeRequest::default()
        }
    }
}

/// What a compare looks at, with the value it is compared to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    Value(#[serde(with = "serde_bytes")] Vec<u8>),
    Version(u64),
    CreateRevision(u64),
    ModRevision(u64),
    Lease(i64),
}

/// How a compare relates the key's field to the given value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Less,
    Greater,
}

/// One condition of a txn, evaluated against the state before the txn (before the outermost txn,
/// for the compares of a nested one).
///
/// It looks at `key` alone, or, with a `range_end`, at every key of `[key, range_end)` (etcd's
/// `Compare.range_end`): then it holds when it holds for every key live in the range, and a range
/// with no live key compares as one missing key does (etcd's `applyCompare`). Its serde
/// implementations are in `codec/txn_records.rs`, which keeps the bytes compares had before
/// ranges existed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    pub key: Vec<u8>,
    pub range_end: RangeEnd,
    pub target: CompareTarget,
    pub op: CompareOp,
}

impl Compare {
    /// A compare of one key.
    pub fn of_key(key: impl Into<Vec<u8>>, target: CompareTarget, op: CompareOp) -> Self {
        Compare {
            key: key.into(),
            range_end: RangeEnd::Single,
            target,
            op,
        }
    }

    /// The keys the compare looks at.
    pub fn keys(&self) -> KeyRange {
        KeyRange {
            start: self.key.clone(),
            end: self.range_end.clone(),
        }
    }
}

/// Which of a key's current fields a put keeps instead of the ones it carries (etcd's
/// `ignore_value` and `ignore_lease`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepCurrent {
    pub value: bool,
    pub lease: bool,
}

/// One operation inside a txn branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    /// Reads the state as changed by the earlier ops of the txn, or, with a revision, the state
    /// at that revision (at most the revision before the txn).
    Get(RangeRequest),
    // The two below come after the first three (issue 63, item 8): the codec writes a variant's
    // position, so entries written before them still decode. A member of an older build cannot
    // decode them (`docs/design/txn-extensions.md`).
    /// A txn inside a branch (etcd's nested txn): its compares read the state before the
    /// outermost txn, like every compare of the tree, and the ops of its chosen branch run here,
    /// in the order of the enclosing branch, at the outermost txn's revision.
    Txn(TxnRequest),
    /// A put that keeps the key's current value, lease, or both. The key must be live before the
    /// txn (etcd's "key not found" otherwise).
    PutKeeping {
        put: PutRequest,
        keep: KeepCurrent,
    },
}

/// Compare-and-swap: if every compare holds run `success`, otherwise run `failure`, at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

impl TxnRequest {
    /// True when every op of both branches is a get: the txn changes nothing, so it can be
    /// answered from a read snapshot (`MvccStore::read_txn`) instead of through the raft log, as
    /// etcd answers it. A txn with no ops at all only compares, and counts as reading. A nested
    /// txn counts as writing even when it only gets, as in etcd's `IsTxnReadonly`, which looks at
    /// the top level only: such a txn goes through the log (taking no revision when nothing
    /// writes) and the alarms refuse it as they refuse a write.
    pub fn reads_only(&self) -> bool {
        let is_get = |op: &TxnOp| matches!(op, TxnOp::Get(_));
        self.success.iter().all(is_get) && self.failure.iter().all(is_get)
    }

    /// The ops that run when the compares hold (`succeeded`) or not.
    pub fn branch(&self, succeeded: bool) -> &[TxnOp] {
        if succeeded {
            &self.success
        } else {
            &self.failure
        }
    }
}

/// A change to the store, replicated through the raft log and applied by every member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    /// Discard history superseded at or before this revision.
    Compact {
        revision: u64,
    },
    // Lease requests come after every older variant: the codec writes a variant's position, so
    // appending keeps log entries written before leases existed decodable.
    /// Grant lease `id` (chosen by the proposer, never 0) with a time-to-live. Does not change the
    /// revision; a duplicate id is rejected.
    LeaseGrant {
        id: i64,
        ttl_seconds: i64,
    },
    /// Revoke lease `id`: delete every key attached to it in one revision (none: no new revision).
    /// Expiry is a revoke proposed by the leader.
    LeaseRevoke {
        id: i64,
    },
    // Checkpoints come after the lease requests, for the same reason.
    /// The leader's remaining TTL of some leases (etcd's lease checkpoint), so that a member that
    /// starts leading does not restart them at their full TTL. Takes no revision. A lease whose
    /// grant or last checkpoint clear is at a log index above `computed_at_index` (the leader's
    /// applied index when it read its deadlines) is skipped: the checkpoint may predate a renewal
    /// and must not undo it. Unknown leases are skipped too.
    LeaseCheckpoint {
        computed_at_index: u64,
        leases: Vec<CheckpointedLease>,
    },
    /// A keep-alive renewed lease `id`, which has (or may soon have) a checkpoint: forget it, so a
    /// new leader gives the lease its full TTL again. Takes no revision; an unknown lease is
    /// `LeaseNotFound`.
    LeaseCheckpointClear {
        id: i64,
    },
    // Alarms come after the checkpoints, for the same reason.
    /// Raises or clears an alarm (etcd's Alarm request). Takes no revision. While a `NoSpace`
    /// alarm is raised, a request that would grow the store (a put, a txn with a put in either
    /// branch, a lease grant) is rejected with `NoSpace` on every member; while a `Corrupt` alarm
    /// is raised, every request that changes keys or leases is rejected with `CorruptCluster`.
    Alarm {
        action: AlarmAction,
        alarm: Alarm,
    },
    // Auth comes after the alarms, for the same reason.
    /// Changes the auth records (users, roles, permissions, enabled). Takes no revision; bumps the
    /// auth revision.
    Auth(crate::auth::AuthRequest),
    // Learner promotions come after auth, for the same reason; an older build refuses the entry
    // as undecodable, so the leader asks every member for the feature first.
    /// Records or forgets the intent to promote a learner to a voter once it has caught up
    /// (`member add --auto-promote`, `mvcc/learner_promotions.rs`). Takes no revision.
    LearnerPromotion(LearnerPromotionChange),
}

/// A change to the learners waiting to be promoted once they catch up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LearnerPromotionChange {
    /// Promote this learner once it has caught up; replaces an earlier intent for the same id.
    Intend(LearnerPromotion),
    /// Forget the intent for this member, if any (it was promoted, removed, or added again
    /// without one).
    Forget { member_id: u64 },
}

/// The intent to promote one learner: the leader promotes the member `member_id` while it is a
/// learner at `peer_url` and its log is at most `max_lag_entries` behind the leader's. The peer
/// URL keeps an intent from applying to a different process that later joins under the same id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LearnerPromotion {
    pub member_id: u64,
    pub peer_url: String,
    pub max_lag_entries: u64,
}

/// What an `Alarm` request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AlarmAction {
    Activate,
    Deactivate,
}

/// An alarm one member raised (etcd's `AlarmMember`); it stays raised until it is cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Alarm {
    pub member_id: u64,
    pub kind: AlarmKind,
}

/// The kinds of alarm (etcd's `AlarmType`, without `NONE`). Stored in the state file and in log
/// entries by variant index, so a new kind is appended, never inserted: files and logs written
/// before it still decode (`codec.rs` tests the old bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AlarmKind {
    /// The member's state file passed `--quota-backend-bytes`.
    NoSpace,
    /// The member's replica hash differs from the majority's at the same revision (the
    /// consistency check, `revkv serve --initial-corrupt-check` / `--corrupt-check-time`).
    Corrupt,
}

impl AlarmKind {
    /// etcd's name of the kind, as `etcdctl alarm list` prints it.
    pub fn name(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        }
    }
}

/// One lease's remaining TTL in a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointedLease {
    pub id: i64,
    pub remaining_ttl_ms: u64,
}

/// The answer to a put.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResponse {
    pub prev_kv: Option<KeyValue>,
}

/// The answer to a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeResponse {
    pub deleted: u64,
    /// Filled only when the request asked for `prev_kv`.
    pub prev_kvs: Vec<KeyValue>,
}

/// The answer to a range read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// How many keys the range holds at the read revision (from the resume point, when paging).
    pub count: u64,
    /// True when the range holds more keys than were returned.
    pub more: bool,
    /// Present when `more` is true on a top-level read: pass it as `continue_token` for the next page.
    pub continue_token: Option<String>,
}

/// The answer to one op of a txn branch, in the order the ops ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOpResponse {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Get(RangeResponse),
    // Appended after the first three, as `TxnOp::Txn` was.
    /// The answer of a nested txn.
    Txn(TxnResponse),
}

/// The answer to a txn.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    pub succeeded: bool,
    pub responses: Vec<TxnOpResponse>,
}

/// The answer to one applied log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compact,
    /// The entry carried no client request (a blank or membership entry).
    Empty,
    LeaseGrant(LeaseGrantResponse),
    /// The keys the revoke deleted (their tombstones share one revision).
    LeaseRevoke(DeleteRangeResponse),
    /// The leases of a checkpoint that were recorded (the others were skipped), in its order.
    LeaseCheckpoint {
        recorded: Vec<i64>,
    },
    LeaseCheckpointClear,
    /// Every alarm raised after an `Alarm` request, in order.
    Alarms(Vec<Alarm>),
    /// The auth revision after an `Auth` request.
    Auth {
        auth_revision: u64,
    },
    /// Every learner waiting to be promoted after a `LearnerPromotion` request, by member id.
    LearnerPromotions(Vec<LearnerPromotion>),
}

/// The answer to a lease grant: the lease as granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantResponse {
    pub id: i64,
    pub ttl_seconds: i64,
}

/// A lease as the replicated state holds it. Its deadline is not replicated: only the leader keeps
/// deadlines, in memory (see the raft crate's lessor).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub id: i64,
    pub granted_ttl_seconds: i64,
    /// How many keys are attached to the lease now.
    pub attached_keys: u64,
    /// The remaining TTL of the lease's last checkpoint, unless a keep-alive cleared it since.
    pub checkpointed_remaining_ms: Option<u64>,
}

/// A raft log position, kept free of openraft's types so this crate does not depend on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogId {
    pub term: u64,
    pub node_id: u64,
    pub index: u64,
}

/// What one raft log entry asks the state machine to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryPayload {
    /// A leader's first entry; changes nothing but the applied position.
    Blank,
    Request(Request),
    /// A membership change, stored opaquely (encoded by the raft layer through the codec module).
    Membership(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// One committed log entry handed to `MvccStore::apply_batch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyEntry {
    pub log_id: LogId,
    pub payload: EntryPayload,
}

/// The result of applying one entry: the store revision after it, and the answer or a rejection.
#[derive(Debug)]
pub struct ApplyOutcome {
    pub revision: u64,
    pub result: Result<Response, crate::error::Rejection>,
}

/// Where the state machine stands in the raft log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedState {
    pub last_applied: Option<LogId>,
    /// The last membership entry applied, as the raft layer encoded it.
    #[serde(with = "serde_bytes")]
    pub membership: Option<Vec<u8>>,
}

/// Whether an event created/changed a key or deleted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change of one key, as a watch reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    /// For a delete: the key, with `mod_revision` = the delete's revision and every other field zero.
    pub kv: KeyValue,
    /// The key-value before this change, when asked for and it existed.
    pub prev_kv: Option<KeyValue>,
}

/// A slice of the change history, in revision order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventBatch {
    /// Whole revisions only: a revision's events are never split across batches.
    pub events: Vec<Event>,
    /// The first revision not covered by this batch; pass it as `from_revision` to continue.
    pub next_revision: u64,
    /// The store's revision when the batch was read.
    pub current_revision: u64,
    pub compact_revision: u64,
}

/// A replica-consistency hash of the MVCC state up to a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateHash {
    pub hash: u64,
    pub revision: u64,
    pub compact_revision: u64,
}

/// A read's answer with the revision it reflects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResult {
    /// The revision the answer reflects (the header revision).
    pub revision: u64,
    pub response: RangeResponse,
}

/// A read-only txn's answer (`MvccStore::read_txn`) and the revision it read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadTxnResult {
    /// The revision the compares and gets saw (the header revision).
    pub revision: u64,
    pub response: TxnResponse,
}

/// Sizes of the store, for status and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    pub current_revision: u64,
    pub compact_revision: u64,
    /// Keys live at the current revision.
    pub live_keys: u64,
    /// Versions and tombstones kept in the history (shrinks on compaction).
    pub history_entries: u64,
    /// Size of the state file on disk.
    pub file_bytes: u64,
    /// The stored size of every history record (each uncompacted version and tombstone): the
    /// bytes of data the state file holds, without the B-tree's own pages. `file_bytes` less this
    /// is at most what defragmentation can give back. (etcd's "db size in use" counts pages.)
    pub bytes_in_use: u64,
    /// Leases granted now.
    pub leases: u64,
    /// About how much memory the in-memory key index takes (`KeyIndex::estimated_bytes`).
    pub key_index_bytes: u64,
    /// The state file's page cache: bytes held now, and the limit it is bounded by
    /// (`--state-cache-bytes`).
    pub state_cache_bytes: u64,
    pub state_cache_limit_bytes: u64,
}

/// One version of a key in its history: the key-value as that revision left it, or a tombstone
/// (`deleted`, with only `key` and `mod_revision` set) where a delete removed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyVersion {
    pub kv: KeyValue,
    pub deleted: bool,
}

/// A page of one key's history, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyHistory {
    /// The store revision the page was read at.
    pub revision: u64,
    pub versions: Vec<KeyVersion>,
    /// The revision to ask from for the next page, when there is one.
    pub next_from_revision: Option<u64>,
    /// Key-index entries the read visited: at most one more than the versions returned, whatever
    /// the size of the store (tests check the read never scans).
    pub index_entries_visited: usize,
}
