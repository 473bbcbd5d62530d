//! The storage layer's one error enum.
//!
//! Request rejections (`Invalid`, `TooLarge`, `FutureRevision`, `Compacted`, `LeaseNotFound`,
//! `LeaseExists`) are deterministic: every
//! member applying the same request rejects it the same way, so they travel back to the client as
//! answers. Every other variant is a fault of the files or the machine and aborts the whole operation
//! without committing anything. The node layer maps these variants to HTTP status codes in one place.

use std::path::PathBuf;

/// Everything that can go wrong in the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A malformed request or one over a limit (op count, key size, bad token).
    #[error("invalid request: {0}")]
    Invalid(String),
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
    /// An auth change the records refuse: a user or role that already exists, a grant that is
    /// not there, or a change that would lock root out while auth is enabled.
    #[error("auth: {0}")]
    AuthRecord(String),
    /// An auth change named a user or role that does not exist.
    #[error("auth: {0}")]
    AuthRecordNotFound(String),
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
    /// The file is a readable database but not the kind of revkv file that was expected.
    #[error("{file} is not a revkv {expected} file: {detail}")]
    ForeignFile {
        file: PathBuf,
        expected: &'static str,
        detail: String,
    },
    /// The file is damaged: a record does not decode, or a checksum does not match. The message
    /// names the next step, because the member cannot go on with this file.
    #[error(
        "{file} is damaged: {detail}. Restore this member's data from a backup (revkv snapshot \
         restore), or remove the member from the cluster and add it again with an empty data \
         directory"
    )]
    Corrupt { file: PathBuf, detail: String },
    /// A snapshot stream was malformed, truncated, or failed its checksum.
    #[error("bad snapshot stream: {0}")]
    BadSnapshot(String),
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
    /// The operation needs the store to itself for a moment, and other work kept it busy past the
    /// bounded wait (a defragmentation under long reads). Try again later.
    #[error("busy: {0}")]
    Busy(String),
    /// Reading or writing a snapshot stream failed.
    #[error("snapshot stream i/o: {0}")]
    SnapshotIo(#[from] std::io::Error),
    /// The caller broke an invariant the store relies on (for example, applying a log entry twice).
    /// This is a bug in the caller; the operation was refused and nothing was written.
    #[error("invariant violated: {0}")]
    Invariant(String),
}

impl Error {
    /// True for deterministic request rejections, which are answers rather than faults.
    pub fn is_request_rejection(&self) -> bool {
        matches!(
            self,
            Error::Invalid(_)
                | Error::TooLarge(_)
                | Error::FutureRevision { .. }
                | Error::Compacted { .. }
                | Error::LeaseNotFound { .. }
                | Error::LeaseExists { .. }
                | Error::NoSpace
                | Error::CorruptCluster
        )
    }
}

/// A short alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches the file name to any redb error: `.map_err(db_error(&path))`.
pub(crate) fn db_error<E: Into<redb::Error>>(file: &std::path::Path) -> impl Fn(E) -> Error + '_ {
    move |source| Error::Database {
        file: file.to_path_buf(),
        source: Box::new(source.into()),
    }
}

/// Attaches the file name to a decoding failure of a stored record.
pub(crate) fn corrupt(file: &std::path::Path) -> impl Fn(crate::codec::CodecError) -> Error + '_ {
    move |error| Error::Corrupt {
        file: file.to_path_buf(),
        detail: error.to_string(),
    }
}

/// Attaches the file name to an I/O error of one of revkv's own files: `.map_err(io_error(&path))`.
pub(crate) fn io_error(file: &std::path::Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::FileIo {
        file: file.to_path_buf(),
        source,
    }
}
