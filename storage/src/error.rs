//! The storage layer's errors: one enum per kind of operation, and their union.
//!
//! Each operation names the error it can produce, so a caller's compiler shows what can fail:
//! - [`StorageFailure`]: a fault of the files or the machine (redb, I/O, a damaged record, a broken
//!   invariant of the files). Every operation that touches the disk can fail with it, and it aborts
//!   the operation without committing anything. Applying entries, compaction, flushing and the raft
//!   log's reads, truncation, purge, vote and committed id fail with nothing else.
//! - [`Rejection`]: a deterministic refusal of a request (what `validate_request` and an applied
//!   entry's outcome answer). Every member applying the same request rejects it the same way, so it
//!   travels back to the client as an answer.
//! - [`OpenError`] (opening the state file or the raft log), [`AppendError`] (the raft log's
//!   append), [`ReadError`] (ranges, a key's history, events, hashes), [`SnapshotError`] (writing,
//!   checking and importing a snapshot stream) and [`DefragmentError`]: the few refusals the
//!   operation has, and `Storage` for the faults.
//!
//! The invariants whose breaking would corrupt the member (an entry applied twice, a revision that
//! jumps, an append that leaves a gap in the raft log) are no errors: they are asserted, and stop
//! the member with a panic before anything is written, because only a bug reaches them.
//!
//! [`Error`] is their union, as `redb::Error` is redb's: for a caller that gathers every storage
//! error in one place (the node maps its variants to HTTP status codes in one place). Each narrow
//! error converts into it with the same variant and the same message.

use std::path::PathBuf;

/// A fault of the files or the machine: nothing the operation would have written was committed.
#[derive(Debug, thiserror::Error)]
pub enum StorageFailure {
    /// redb reported an error on this file.
    #[error("database {file}: {source}")]
    Database {
        file: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    /// Reading or writing one of revkv's own files (the raft log) failed.
    #[error("file {file}: {source}")]
    FileIo {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is damaged: a record does not decode, or a checksum does not match. The message
    /// names the next step, because the member cannot go on with this file.
    #[error(
        "{file} is damaged: {detail}. Restore this member's data from a backup (revkv snapshot \
         restore), or remove the member from the cluster and add it again with an empty data \
         directory"
    )]
    Corrupt { file: PathBuf, detail: String },
    /// The files or the caller broke an invariant the store relies on (the raft log refusing
    /// changes after a failed write, a lease that lists a key not attached to it). The operation
    /// was refused and nothing was written.
    #[error("invariant violated: {0}")]
    Invariant(String),
}

/// The malformed requests a client tells apart: etcd answers each with a message of its own
/// (`etcdserver: key is not provided`, `... too many operations in txn request`, `... duplicate key
/// given in txn request`), which clientv3 users match on. Every other malformation is an
/// `Invalid` in words. Carried as a value, so the gRPC layer picks etcd's answer by kind and a
/// reworded message can never change it. It travels between members (a forwarded write's answer),
/// hence serde.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Malformed {
    /// An empty key: a put's, a compare's, or a single-key range's (an empty start of a prefix or
    /// bounded range is allowed).
    #[error("key must not be empty")]
    EmptyKey,
    /// A txn branch (or its compares) with more entries than `Limits::max_txn_ops`.
    #[error("txn has {count} {branch} entries; the limit is {limit}")]
    TooManyTxnOps {
        branch: TxnBranch,
        count: u64,
        limit: u64,
    },
    /// Two puts of one txn branch name the same key, or a put falls in a delete range of the same
    /// branch (etcd's rule).
    #[error("duplicate key given in txn request: {key}")]
    DuplicateTxnKey { key: String },
    // Appended after the older kinds: an older member decoding a forwarded answer still reads them.
    /// A put that keeps the current value or lease (etcd's `ignore_value`, `ignore_lease`) names a
    /// key that is not live (etcd's `key not found`).
    #[error("key not found: {key} (a put that keeps the current value or lease needs the key)")]
    KeyNotFound { key: String },
}

/// The part of a txn a [`Malformed::TooManyTxnOps`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TxnBranch {
    Compare,
    Success,
    Failure,
}

impl std::fmt::Display for TxnBranch {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            TxnBranch::Compare => "compare",
            TxnBranch::Success => "success",
            TxnBranch::Failure => "failure",
        })
    }
}

/// A deterministic refusal of a request: an answer, not a fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A malformed request or one over a limit (key size, bad token), in words.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A malformed request of a kind clients tell apart (see [`Malformed`]).
    #[error("invalid request: {0}")]
    Malformed(Malformed),
    /// A value or key larger than the configured limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A compaction asked for a revision the store has not reached.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision { requested: u64, current: u64 },
    /// A compaction asked for a revision that compaction has already passed.
    #[error("revision {requested} has been compacted (compact revision is {compact_revision})")]
    Compacted {
        requested: u64,
        compact_revision: u64,
    },
    /// A put or revoke named a lease that does not exist (never granted, revoked or expired).
    #[error("lease {id} not found")]
    LeaseNotFound { id: i64 },
    /// A grant named a lease id that is already granted.
    #[error("lease {id} already exists")]
    LeaseExists { id: i64 },
    /// An auth change the records refuse: a user or role that already exists, a grant that is
    /// not there, or a change that would lock root out while auth is enabled.
    #[error("auth: {0}")]
    AuthRecord(String),
    /// An auth change named a user or role that does not exist.
    #[error("auth: {0}")]
    AuthRecordNotFound(String),
    /// A NOSPACE alarm is raised, and the request would grow the store.
    #[error(
        "the NOSPACE alarm is raised (a member's state file passed its quota): writes that grow \
         the store are refused until it is cleared; compact, defragment, then disarm it"
    )]
    NoSpace,
    /// A CORRUPT alarm is raised (a member's data differs from the others'), and the request would
    /// change keys or leases. etcd's "etcdserver: corrupt cluster".
    #[error(
        "the CORRUPT alarm is raised (a member's data differs from the rest of the cluster's): \
         writes are refused until an operator has repaired or replaced that member and disarmed \
         the alarm"
    )]
    CorruptCluster,
}

/// Why a store or a raft log did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file is a readable database but not the kind of revkv file that was expected.
    #[error("{file} is not a revkv {expected} file: {detail}")]
    ForeignFile {
        file: PathBuf,
        expected: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Storage(#[from] StorageFailure),
}

/// Why a read (a range, a key's history, events, a hash) answered nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A malformed read (a revision or limit of 0, a continue token of another read).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// See [`Rejection::Malformed`] (a read of a single, empty key).
    #[error("invalid request: {0}")]
    Malformed(Malformed),
    /// A key or range bound larger than the configured limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The read asked for a revision the store has not reached.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision { requested: u64, current: u64 },
    /// The read asked for a revision that compaction has discarded.
    #[error("revision {requested} has been compacted (compact revision is {compact_revision})")]
    Compacted {
        requested: u64,
        compact_revision: u64,
    },
    /// A hash needs the store to itself for a moment, and applies kept it busy past the bounded
    /// wait. Try again later.
    #[error("busy: {0}")]
    Busy(String),
    #[error(transparent)]
    Storage(#[from] StorageFailure),
}

/// Why writing, checking or importing a snapshot stream failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A snapshot stream was malformed, truncated, or failed its checksum.
    #[error("bad snapshot stream: {0}")]
    BadSnapshot(String),
    /// Reading or writing the stream itself failed.
    #[error("snapshot stream i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Storage(#[from] StorageFailure),
}

/// Why a defragmentation did not run.
#[derive(Debug, thiserror::Error)]
pub enum DefragmentError {
    /// Reads kept the store busy past the bounded wait. Try again later.
    #[error("busy: {0}")]
    Busy(String),
    #[error(transparent)]
    Storage(#[from] StorageFailure),
}

/// Why the raft log refused an append.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// An entry over the log's record limit (`codec::MAX_RECORD_BYTES`).
    #[error("too large: log entry {index}: {detail}")]
    EntryTooLarge { index: u64, detail: String },
    #[error(transparent)]
    Storage(#[from] StorageFailure),
}

/// Every storage error: the union of the errors above, for a caller that gathers them in one place.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A malformed request or one over a limit (key size, bad token), in words.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// See [`Rejection::Malformed`].
    #[error("invalid request: {0}")]
    Malformed(Malformed),
    /// A value or key larger than the configured limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A read or compaction asked for a revision the store has not reached.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision { requested: u64, current: u64 },
    /// A read, watch or compaction asked for a revision that compaction has discarded.
    #[error("revision {requested} has been compacted (compact revision is {compact_revision})")]
    Compacted {
        requested: u64,
        compact_revision: u64,
    },
    /// A put or revoke named a lease that does not exist (never granted, revoked or expired).
    #[error("lease {id} not found")]
    LeaseNotFound { id: i64 },
    /// A grant named a lease id that is already granted.
    #[error("lease {id} already exists")]
    LeaseExists { id: i64 },
    /// See [`Rejection::AuthRecord`].
    #[error("auth: {0}")]
    AuthRecord(String),
    /// See [`Rejection::AuthRecordNotFound`].
    #[error("auth: {0}")]
    AuthRecordNotFound(String),
    /// See [`StorageFailure::Database`].
    #[error("database {file}: {source}")]
    Database {
        file: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    /// See [`StorageFailure::FileIo`].
    #[error("file {file}: {source}")]
    FileIo {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// See [`OpenError::ForeignFile`].
    #[error("{file} is not a revkv {expected} file: {detail}")]
    ForeignFile {
        file: PathBuf,
        expected: &'static str,
        detail: String,
    },
    /// See [`StorageFailure::Corrupt`].
    #[error(
        "{file} is damaged: {detail}. Restore this member's data from a backup (revkv snapshot \
         restore), or remove the member from the cluster and add it again with an empty data \
         directory"
    )]
    Corrupt { file: PathBuf, detail: String },
    /// See [`SnapshotError::BadSnapshot`].
    #[error("bad snapshot stream: {0}")]
    BadSnapshot(String),
    /// See [`Rejection::NoSpace`].
    #[error(
        "the NOSPACE alarm is raised (a member's state file passed its quota): writes that grow \
         the store are refused until it is cleared; compact, defragment, then disarm it"
    )]
    NoSpace,
    /// See [`Rejection::CorruptCluster`].
    #[error(
        "the CORRUPT alarm is raised (a member's data differs from the rest of the cluster's): \
         writes are refused until an operator has repaired or replaced that member and disarmed \
         the alarm"
    )]
    CorruptCluster,
    /// The operation needs the store to itself for a moment, and other work kept it busy past the
    /// bounded wait (a defragmentation under long reads). Try again later.
    #[error("busy: {0}")]
    Busy(String),
    /// See [`SnapshotError::Io`].
    #[error("snapshot stream i/o: {0}")]
    SnapshotIo(std::io::Error),
    /// See [`StorageFailure::Invariant`].
    #[error("invariant violated: {0}")]
    Invariant(String),
}

impl From<StorageFailure> for Error {
    fn from(failure: StorageFailure) -> Self {
        match failure {
            StorageFailure::Database { file, source } => Error::Database { file, source },
            StorageFailure::FileIo { file, source } => Error::FileIo { file, source },
            StorageFailure::Corrupt { file, detail } => Error::Corrupt { file, detail },
            StorageFailure::Invariant(detail) => Error::Invariant(detail),
        }
    }
}

impl From<Rejection> for Error {
    fn from(rejection: Rejection) -> Self {
        match rejection {
            Rejection::Invalid(message) => Error::Invalid(message),
            Rejection::Malformed(malformed) => Error::Malformed(malformed),
            Rejection::TooLarge(message) => Error::TooLarge(message),
            Rejection::FutureRevision { requested, current } => {
                Error::FutureRevision { requested, current }
            }
            Rejection::Compacted {
                requested,
                compact_revision,
            } => Error::Compacted {
                requested,
                compact_revision,
            },
            Rejection::LeaseNotFound { id } => Error::LeaseNotFound { id },
            Rejection::LeaseExists { id } => Error::LeaseExists { id },
            Rejection::AuthRecord(message) => Error::AuthRecord(message),
            Rejection::AuthRecordNotFound(message) => Error::AuthRecordNotFound(message),
            Rejection::NoSpace => Error::NoSpace,
            Rejection::CorruptCluster => Error::CorruptCluster,
        }
    }
}

impl From<OpenError> for Error {
    fn from(error: OpenError) -> Self {
        match error {
            OpenError::ForeignFile {
                file,
                expected,
                detail,
            } => Error::ForeignFile {
                file,
                expected,
                detail,
            },
            OpenError::Storage(failure) => failure.into(),
        }
    }
}

impl From<ReadError> for Error {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Invalid(message) => Error::Invalid(message),
            ReadError::Malformed(malformed) => Error::Malformed(malformed),
            ReadError::TooLarge(message) => Error::TooLarge(message),
            ReadError::FutureRevision { requested, current } => {
                Error::FutureRevision { requested, current }
            }
            ReadError::Compacted {
                requested,
                compact_revision,
            } => Error::Compacted {
                requested,
                compact_revision,
            },
            ReadError::Busy(reason) => Error::Busy(reason),
            ReadError::Storage(failure) => failure.into(),
        }
    }
}

impl From<SnapshotError> for Error {
    fn from(error: SnapshotError) -> Self {
        match error {
            SnapshotError::BadSnapshot(detail) => Error::BadSnapshot(detail),
            SnapshotError::Io(source) => Error::SnapshotIo(source),
            SnapshotError::Storage(failure) => failure.into(),
        }
    }
}

impl From<DefragmentError> for Error {
    fn from(error: DefragmentError) -> Self {
        match error {
            DefragmentError::Busy(reason) => Error::Busy(reason),
            DefragmentError::Storage(failure) => failure.into(),
        }
    }
}

impl From<AppendError> for Error {
    fn from(error: AppendError) -> Self {
        match error {
            AppendError::EntryTooLarge { index, detail } => {
                Error::TooLarge(format!("log entry {index}: {detail}"))
            }
            AppendError::Storage(failure) => failure.into(),
        }
    }
}

/// A read's request was refused the way an applied request would be: the same words.
impl From<Rejection> for ReadError {
    fn from(rejection: Rejection) -> Self {
        match rejection {
            Rejection::Invalid(message) => ReadError::Invalid(message),
            Rejection::Malformed(malformed) => ReadError::Malformed(malformed),
            Rejection::TooLarge(message) => ReadError::TooLarge(message),
            Rejection::FutureRevision { requested, current } => {
                ReadError::FutureRevision { requested, current }
            }
            Rejection::Compacted {
                requested,
                compact_revision,
            } => ReadError::Compacted {
                requested,
                compact_revision,
            },
            other => ReadError::Invalid(other.to_string()),
        }
    }
}

impl ReadError {
    /// A read the store makes on its own behalf, inside a write (the state a txn's branch or a
    /// delete sees): it reads at the writer's revision, which is never compacted or in the future,
    /// so any refusal is a broken invariant.
    pub(crate) fn into_failure(self) -> StorageFailure {
        match self {
            ReadError::Storage(failure) => failure,
            refusal => {
                StorageFailure::Invariant(format!("a read inside a write failed: {refusal}"))
            }
        }
    }
}

/// A short alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches the file name to any redb error: `.map_err(db_error(&path))`.
pub(crate) fn db_error<E: Into<redb::Error>>(
    file: &std::path::Path,
) -> impl Fn(E) -> StorageFailure + '_ {
    move |source| StorageFailure::Database {
        file: file.to_path_buf(),
        source: Box::new(source.into()),
    }
}

/// Attaches the file name to a decoding failure of a stored record (anything displayable, so this
/// file needs no other module of the crate).
pub(crate) fn corrupt<E: std::fmt::Display>(
    file: &std::path::Path,
) -> impl Fn(E) -> StorageFailure + '_ {
    move |error| StorageFailure::Corrupt {
        file: file.to_path_buf(),
        detail: error.to_string(),
    }
}

/// Attaches the file name to an I/O error of one of revkv's own files: `.map_err(io_error(&path))`.
pub(crate) fn io_error(file: &std::path::Path) -> impl Fn(std::io::Error) -> StorageFailure + '_ {
    move |source| StorageFailure::FileIo {
        file: file.to_path_buf(),
        source,
    }
}
