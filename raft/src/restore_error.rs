//! Why a restore (`restore.rs`) was refused or failed, in its own module so that the backup's
//! reader (`restore_source.rs`) and the restore both use it without importing each other.

use std::path::PathBuf;

/// Why a restore was refused or failed. Every variant names the file it is about.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{file}: not a usable backup: {source}")]
    BadBackup {
        file: PathBuf,
        source: revkv_storage::SnapshotError,
    },
    #[error("{file}: not a usable etcd snapshot: {source}")]
    BadEtcdSnapshot {
        file: PathBuf,
        source: revkv_etcd_snapshot::EtcdSnapshotError,
    },
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Storage(#[from] revkv_storage::Error),
}

crate::error::storage_errors_into!(RestoreError);
