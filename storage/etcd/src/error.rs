//! The crate's errors: `BoltError` for the bbolt file itself, `EtcdSnapshotError` for everything a
//! caller sees (a bolt error, a snapshot file's checksum, etcd's data model). Each message says
//! what is wrong in terms an operator can act on.

/// A bbolt file that cannot be read: damaged, truncated, or not bbolt at all.
#[derive(Debug, thiserror::Error)]
pub enum BoltError {
    #[error("not a bbolt file: neither meta page is valid (wrong magic, version or checksum)")]
    NoValidMeta,
    #[error("bbolt page size {0} is outside what bbolt writes (512 B to 64 KiB)")]
    PageSize(u32),
    #[error("the file is truncated: it holds {held} bytes, its meta page says {needed}")]
    Truncated { held: u64, needed: u64 },
    #[error("page {page}: {what}")]
    BadPage { page: u64, what: String },
    #[error("malformed bbolt data: {0}")]
    Malformed(&'static str),
    #[error("the bucket tree is deeper than {0} levels (a cycle or a damaged page)")]
    TooDeep(usize),
    #[error("a page of {bytes} bytes is larger than the limit of {limit} bytes")]
    PageTooLarge { bytes: u64, limit: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub type BoltResult<T> = std::result::Result<T, BoltError>;

/// Why an etcd snapshot or db file was refused or could not be written. The caller names the
/// file.
#[derive(Debug, thiserror::Error)]
pub enum EtcdSnapshotError {
    #[error("{0}")]
    Bolt(#[from] BoltError),
    #[error("the snapshot's SHA-256 trailer does not match its contents (damaged or cut short)")]
    ChecksumMismatch,
    #[error("bucket {bucket:?}, entry {entry}: {what}")]
    BadEntry {
        bucket: &'static str,
        entry: String,
        what: String,
    },
    #[error("not an etcd snapshot this version of revkv reads: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Storage(#[from] revkv_storage::Error),
}

/// The storage errors a conversion meets (a frame the checks refuse, the store's files) keep the
/// words of the storage layer's union.
impl From<revkv_storage::SnapshotError> for EtcdSnapshotError {
    fn from(error: revkv_storage::SnapshotError) -> Self {
        EtcdSnapshotError::Storage(error.into())
    }
}

impl From<revkv_storage::StorageFailure> for EtcdSnapshotError {
    fn from(failure: revkv_storage::StorageFailure) -> Self {
        EtcdSnapshotError::Storage(failure.into())
    }
}

pub type Result<T> = std::result::Result<T, EtcdSnapshotError>;
