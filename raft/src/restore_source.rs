//! The two kinds of backup a restore takes: revkv's own stream (`revkv ctl snapshot save`, also
//! inside etcd's envelope when `etcdctl snapshot save` took it from a revkv member), and etcd's
//! own bbolt file (`etcdctl snapshot save` from etcd 3.4 or 3.5, or a member's `db`), told apart
//! by bbolt's magic number. Both are checked whole before anything is written, and both import
//! in one transaction through the same frame checks (`revkv_storage::snapshot_frames`).

use std::path::{Path, PathBuf};

use revkv_etcd_snapshot::{is_bolt_file, EtcdSnapshot, EtcdSnapshotError};
use revkv_storage::codec::SnapshotFrame;
use revkv_storage::{
    inspect_foreign, inspect_snapshot_counted, open_backup_file, FrameFeed, ImportProgress,
    MvccStore, RestoreTarget, SnapshotSummary,
};

use crate::restore_error::RestoreError;

/// What kind of file a backup is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupFormat {
    /// revkv's snapshot stream.
    Revkv,
    /// An etcd snapshot with etcdctl's SHA-256 trailer.
    EtcdSnapshot,
    /// An etcd member's `db` file, without a trailer.
    EtcdDb,
}

impl BackupFormat {
    pub fn name(self) -> &'static str {
        match self {
            BackupFormat::Revkv => "revkv",
            BackupFormat::EtcdSnapshot => "etcd snapshot",
            BackupFormat::EtcdDb => "etcd db",
        }
    }
}

/// An opened backup of either kind.
pub(crate) enum BackupSource {
    Revkv(PathBuf),
    Etcd(PathBuf, Box<EtcdSnapshot>),
}

impl BackupSource {
    pub(crate) fn open(path: &Path) -> Result<BackupSource, RestoreError> {
        let bolt = is_bolt_file(path).map_err(|source| RestoreError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        if !bolt {
            return Ok(BackupSource::Revkv(path.to_path_buf()));
        }
        let snapshot = EtcdSnapshot::open(path).map_err(etcd_error(path))?;
        Ok(BackupSource::Etcd(path.to_path_buf(), Box::new(snapshot)))
    }

    pub(crate) fn format(&self) -> BackupFormat {
        match self {
            BackupSource::Revkv(_) => BackupFormat::Revkv,
            BackupSource::Etcd(_, snapshot) if snapshot.had_trailer => BackupFormat::EtcdSnapshot,
            BackupSource::Etcd(..) => BackupFormat::EtcdDb,
        }
    }

    /// Reads the whole backup and checks it, writing nothing; counts each record into
    /// `progress`.
    pub(crate) fn inspect(
        &self,
        progress: &ImportProgress,
    ) -> Result<SnapshotSummary, RestoreError> {
        match self {
            BackupSource::Revkv(path) => {
                let mut reader = open_revkv_backup(path)?;
                inspect_snapshot_counted(&mut reader, progress).map_err(|source| {
                    RestoreError::BadBackup {
                        file: path.clone(),
                        source,
                    }
                })
            }
            BackupSource::Etcd(path, snapshot) => {
                let history = snapshot.history().map_err(etcd_error(path))?;
                let mut summary = inspect_foreign(history, |emit| {
                    snapshot.feed(&mut |frame| emit(counted(frame, progress)))
                })
                .map_err(etcd_error(path))?;
                summary.checksum = snapshot.content_hash;
                Ok(summary)
            }
        }
    }

    /// Replaces `store`'s state with the backup's, for the new cluster `target` describes;
    /// counts each record into `progress` as it is written.
    pub(crate) fn import(
        &self,
        store: &MvccStore,
        target: &RestoreTarget,
        progress: &ImportProgress,
    ) -> Result<SnapshotSummary, RestoreError> {
        match self {
            BackupSource::Revkv(path) => {
                let mut reader = open_revkv_backup(path)?;
                store
                    .import_for_restore(&mut reader, target, progress)
                    .map_err(|source| RestoreError::BadBackup {
                        file: path.clone(),
                        source,
                    })
            }
            BackupSource::Etcd(path, snapshot) => {
                let history = snapshot.history().map_err(etcd_error(path))?;
                let feed = |emit: &mut FrameFeed<'_>| {
                    snapshot.feed(&mut |frame| emit(counted(frame, progress)))
                };
                store
                    .import_foreign_for_restore(history, feed, target)
                    .map_err(etcd_error(path))
            }
        }
    }
}

/// Counts a record frame into `progress` on its way through.
fn counted(frame: SnapshotFrame, progress: &ImportProgress) -> SnapshotFrame {
    if let SnapshotFrame::Record { record, .. } = &frame {
        progress.count_record(record);
    }
    frame
}

/// Checks the backup at `path`, of either kind, whole; answers its kind and what it holds.
pub fn inspect_backup(path: &Path) -> Result<(BackupFormat, SnapshotSummary), RestoreError> {
    let source = BackupSource::open(path)?;
    let summary = source.inspect(&ImportProgress::default())?;
    Ok((source.format(), summary))
}

fn open_revkv_backup(path: &Path) -> Result<impl std::io::Read, RestoreError> {
    open_backup_file(path).map_err(|source| RestoreError::Io {
        file: path.to_path_buf(),
        source,
    })
}

fn etcd_error(path: &Path) -> impl Fn(EtcdSnapshotError) -> RestoreError + '_ {
    move |source| RestoreError::BadEtcdSnapshot {
        file: path.to_path_buf(),
        source,
    }
}
