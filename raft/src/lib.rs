//! revkv's replication layer: the openraft (`=0.10.0-alpha.37`) glue over `revkv-storage`.
//!
//! - [`types`]: the type configuration, the replicated request and its result, log-id conversions.
//! - [`log_storage`]: `RaftLogStorage` over the raft log file; `log_tail` keeps recent entries in
//!   memory and `log_writer` makes appends durable on a thread of its own (group commit), so
//!   replication does not wait for the leader's own fsync.
//! - [`state_machine`]: `RaftStateMachine` over the MVCC store (whole committed ranges applied in
//!   bounded chunks, one transaction each), snapshots, and the applied-position watch.
//! - [`timings`]: append and apply durations handed to an observer the embedder supplies.
//! - [`peer`]: the peer protocol (client, server) on the separate peer listener.
//! - [`status`]: the member's raft state (term, leader, role, positions) in this crate's types.
//! - [`lessor`]: every lease's deadline in memory (only the leader's count); `lease_expiry` is the
//!   leader's task that proposes the revoke of each expired lease through raft; [`lease_events`]
//!   tells an observer the embedder supplies of grants, revokes, expiries and renewals.
//! - [`member`]: a running member: writes forwarded to the leader, ReadIndex barriers for
//!   linearizable reads on any member, membership and leadership changes.
//! - [`key_space_hashes`]: every member's hash of its history at one revision, for the
//!   consistency check.
//! - [`snapshot_stream`]: a snapshot stream (backups today) produced in bounded chunks over one
//!   read transaction; [`restore`]: a backup made into a new cluster's member.
//!
//! Only this crate knows openraft. It knows the peer protocol but not the client HTTP API.

mod blocking;
pub mod clock;
pub mod config;
pub mod error;
pub mod etcd_snapshot_stream;
mod feature_gate;
pub mod key_space_hashes;
mod leader;
mod leader_contact;
mod leader_leases;
mod learner_promotion;
pub mod learner_promotion_events;
mod lease_checkpoint;
pub mod lease_events;
mod lease_expiry;
pub mod lessor;
pub mod log_storage;
mod log_tail;
mod log_writer;
pub mod member;
mod member_features;
mod member_inner;
pub mod member_reports;
mod member_start;
pub mod peer;
#[cfg(feature = "planted-bugs")]
pub mod planted_bugs;
mod publish_addresses;
mod read_index_rounds;
pub mod restore;
mod restore_error;
pub mod restore_progress;
pub mod restore_source;
pub mod runtime;
pub mod snapshot_file;
pub mod snapshot_stream;
pub mod state_machine;
pub mod status;
mod storage_fault;
pub mod timings;
pub mod types;
mod write_path_trace;

/// The log filter a member's process starts from when none is given (`RUST_LOG`): info, with
/// openraft's chatter at warn. openraft warns about every failed call to a peer, on every
/// heartbeat and retry, which floods the log while a member is down or cut off; those lines
/// (its replication, replication handler and heartbeat modules) are kept to errors, because the peer connections log
/// the same failures themselves, at most one line per peer per ten seconds
/// (`peer/failure_log.rs`).
pub const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::replication=error,\
    openraft::engine::handler::replication_handler=error,openraft::core::heartbeat=error";

pub use config::{LeaseSettings, MemberConfig, MemberDisks, PeerLimits, RaftTiming};
pub use error::MemberError;
pub use key_space_hashes::MemberKeySpaceHash;
pub use learner_promotion_events::{
    LearnerPromotionEvents, LearnerPromotionObserver, LearnerPromotionSettings,
};
pub use lease_events::{LeaseEvents, LeaseObserver};
pub use log_storage::LogStorage;
pub use log_tail::{LogTailSize, TailLimits};
pub use member::{Membership, RaftMember};
pub use member_reports::{MemberReport, MemberReportAnswer};
pub use peer::append_timeout::PeerAppendTimeout;
pub use peer::{AdminRequest, KeySpaceHashAnswer, LeaseTimeToLive, PeerIdentity};
pub use restore::{restore_member, RestoreError, RestorePlan, DEFAULT_RESTORE_CACHE_BYTES};
pub use restore_progress::{RestorePhase, RestoreProgress};
pub use restore_source::{inspect_backup, BackupFormat};
pub use snapshot_stream::{ChunkLimits, ChunkedExport};
pub use state_machine::{AppliedPosition, StateMachine};
pub use status::{MemberRole, RaftStatus, RaftStatusFeed};
pub use timings::{PeerAppendObserver, PeerAppendTimings, StorageTimingObserver, StorageTimings};
pub use types::{ClientRequest, MemberNode, Rejection, TypeConfig, WriteResult};
