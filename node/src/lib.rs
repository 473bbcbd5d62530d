//! The revkv member as a library: the embeddable node, the HTTP client API (axum 0.8),
//! the linearizable and serializable read paths, write forwarding, and the watch hub.
//! Only this crate knows HTTP status codes, and it decides them in one place (`http::error`).

pub mod auth;
pub mod backend;
pub mod compaction;
pub mod compaction_cleaner;
pub mod conflict_rates;
pub mod corruption_check;
pub mod error;
pub mod hot_keys;
pub mod http;
pub mod member_backend;
mod metrics_feed;
pub mod node;
#[cfg(feature = "planted-bugs")]
pub use revkv_raft::planted_bugs;
pub mod range_view;
pub mod runtime;
pub mod space_quota;
pub mod three_way_merge;
pub mod watch;
pub mod writes;

pub use backend::{
    AddedMemberRole, BackupSource, GrantedLease, KvBackend, LearnerJoin, LeaseTimeToLive,
    MemberInfo, MemberStatus, ReadAnswer, ReadConsistency, ResponseHeader, TxnAnswer, Written,
};
pub use error::{Missing, NodeError};
pub use member_backend::MemberBackend;
pub use node::{Node, NodeConfig};
pub use revkv_metrics::{Metrics, PrefixLabelConfig};
