//! revkv's storage layer: the revisioned MVCC key-value store (a redb file) and the raft log (a
//! directory of append-only segment files). Synchronous, with no networking; the raft crate drives it.
//!
//! - [`MvccStore`]: etcd v3 semantics (revisions, create/mod revision, version, txn compares,
//!   history, compaction), applied in batches of committed log entries, with the applied log id
//!   stored in the same transaction as the changes it covers.
//! - [`RaftLogStore`]: entries in checksummed segment files, and the vote, committed and purged
//!   ids in a two-slot metadata file; group-committed appends, one write and one fsync each.
//! - [`codec`]: every persisted or transmitted byte encoding, each record with a format-version byte.
//! - [`DiskFaults`]: fault switches on every file, disarmed unless a test arms them, and the
//!   record of unsynced changes a simulated power cut loses.

pub mod auth;
pub mod codec;
mod disk_faults;
mod error;
mod file;
mod key_range;
mod limits;
mod log_store;
mod mvcc;
#[cfg(feature = "planted-bugs")]
pub mod planted_bugs;
pub mod required_access;
mod types;
mod unsynced_writes;

pub use disk_faults::{DiskFaults, DiskOperation};
pub use error::{
    AppendError, DefragmentError, Error, Malformed, OpenError, ReadError, Rejection, Result,
    SnapshotError, StorageFailure, TxnBranch,
};
pub use limits::Limits;
pub use log_store::{LogOptions, RaftLogStore};
pub use mvcc::{
    inspect_foreign, inspect_snapshot, inspect_snapshot_counted, open_backup_file,
    read_snapshot_frames, validate_range, validate_request, validate_txn, Defragmented,
    ForeignHistory, FrameFeed, ImportProgress, MvccStore, RestoreTarget, SnapshotSummary,
    StoreOptions, DEFAULT_COMPACTION_INLINE_ENTRIES, DEFAULT_STATE_CACHE_BYTES,
    FOREIGN_STREAM_VERSION,
};
pub use types::*;
pub use unsynced_writes::CrashLoss;
