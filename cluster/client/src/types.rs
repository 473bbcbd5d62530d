//! The JSON shapes of revkv's answers (`docs/API.md` section 4) as typed Rust values.
//!
//! Keys and values are UTF-8 text, as the API writes them without `encoding=base64`. An answer
//! object may carry fields this client does not know; they are ignored, so a newer member's answers
//! still parse.

use serde::{Deserialize, Serialize};

/// The `header` every answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResponseHeader {
    /// The store revision the answer reflects.
    pub revision: u64,
    pub member_id: u64,
    pub raft_term: u64,
}

/// One key-value with its revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    /// Empty in a watch's DELETE event.
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub create_revision: u64,
    pub mod_revision: u64,
    #[serde(default)]
    pub version: u64,
    #[serde(default)]
    pub lease: i64,
}

/// `GET /v1/kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetResponse {
    pub header: ResponseHeader,
    pub kv: KeyValue,
}

/// One page of `GET /v1/kv?...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeResponse {
    pub header: ResponseHeader,
    #[serde(default)]
    pub kvs: Vec<KeyValue>,
    pub count: u64,
    pub more: bool,
    /// The token of the next page, when `more`.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// `PUT /v1/kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResponse {
    pub header: ResponseHeader,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_kv: Option<KeyValue>,
}

/// `DELETE /v1/kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteResponse {
    pub header: ResponseHeader,
    pub deleted: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_kvs: Option<Vec<KeyValue>>,
}

/// `PATCH /v1/kv/{key}`: the key after the patch, and how many read-patch-write attempts the member
/// needed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchResponse {
    pub header: ResponseHeader,
    pub kv: KeyValue,
    #[serde(default)]
    pub attempts: u64,
}

/// `POST /v1/txn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    pub header: ResponseHeader,
    pub succeeded: bool,
    #[serde(default)]
    pub responses: Vec<TxnOpResponse>,
}

/// The answer of one txn op, in the order the ops ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TxnOpResponse {
    Put {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prev_kv: Option<KeyValue>,
    },
    Delete {
        deleted: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prev_kvs: Option<Vec<KeyValue>>,
    },
    Get {
        #[serde(default)]
        kvs: Vec<KeyValue>,
        count: u64,
        more: bool,
    },
}

/// `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResponse {
    pub header: ResponseHeader,
    pub member_id: u64,
    pub leader_id: Option<u64>,
    pub raft_term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub revision: u64,
    pub compact_revision: u64,
    #[serde(default)]
    pub state_db_bytes: u64,
    /// Bytes of records the state file holds; its size less this is at most what defragmenting
    /// gives back (0 from a member too old to report it).
    #[serde(default)]
    pub state_db_bytes_in_use: u64,
    #[serde(default)]
    pub log_db_bytes: u64,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub role: String,
    /// Whether the membership holds this member's client URLs yet (false from a member too old
    /// to report it).
    #[serde(default)]
    pub client_urls_published: bool,
}

/// One member of the cluster, as `GET /v1/members` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    pub peer_url: String,
    pub client_url: String,
    /// The member's etcd gRPC URL, if it serves etcd's API.
    #[serde(default)]
    pub grpc_url: Option<String>,
    pub is_learner: bool,
    /// For a learner that promotes itself once caught up, the most entries it may be behind
    /// (`add_learner_to_promote`); `None` for every other member.
    #[serde(default)]
    pub auto_promote_max_lag: Option<u64>,
}

/// `GET /v1/members` and the answers of membership changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembersResponse {
    pub header: ResponseHeader,
    #[serde(default)]
    pub members: Vec<Member>,
}

/// An answer whose only content is its header (compact, leader transfer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderResponse {
    pub header: ResponseHeader,
}

/// `GET /v1/hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashResponse {
    pub header: ResponseHeader,
    pub hash: u64,
    pub revision: u64,
    pub compact_revision: u64,
}

/// `POST /v1/leases` (grant) and `POST /v1/leases/{id}/keepalive`: the lease and its TTL in
/// seconds (the granted TTL, after the member's minimum was applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseResponse {
    pub header: ResponseHeader,
    pub id: i64,
    pub ttl: i64,
}

/// `GET /v1/leases/{id}`: the remaining TTL (`ttl`), the granted TTL, and the attached keys when
/// asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimeToLiveResponse {
    pub header: ResponseHeader,
    pub id: i64,
    /// Seconds left before the leader expires it.
    pub ttl: i64,
    pub granted_ttl: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
}

/// One lease of `GET /v1/leases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseId {
    pub id: i64,
}

/// `GET /v1/leases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseListResponse {
    pub header: ResponseHeader,
    #[serde(default)]
    pub leases: Vec<LeaseId>,
}

/// `PUT /v1/kv/{key}?merge=three-way`: the key as written, whether the member merged the client's
/// changes into a newer value, and the JSON Pointers of those changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergePutResponse {
    pub header: ResponseHeader,
    pub kv: KeyValue,
    pub merged: bool,
    #[serde(default)]
    pub merged_fields: Vec<String>,
}

/// One version in a key's history: `"PUT"` (the key as that revision left it) or `"DELETE"` (a
/// tombstone: only `key` and `mod_revision` are set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryVersion {
    #[serde(rename = "type")]
    pub kind: String,
    pub kv: KeyValue,
}

impl HistoryVersion {
    pub fn is_delete(&self) -> bool {
        self.kind == "DELETE"
    }
}

/// `GET /v1/kv/{key}?history=true`: a page of a key's versions, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryResponse {
    pub header: ResponseHeader,
    pub versions: Vec<HistoryVersion>,
    pub more: bool,
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// One member's hot key: conflicts and client retries on it over the member's window, and the
/// store revision when it last conflicted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKey {
    pub key: String,
    pub conflicts: u64,
    pub retries: u64,
    pub last_revision: u64,
}

/// `GET /v1/conflicts?top=N`: one member's hottest conflicting keys, hottest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKeysResponse {
    pub header: ResponseHeader,
    pub window_seconds: u64,
    pub keys: Vec<HotKey>,
}
