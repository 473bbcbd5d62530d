//! Raft snapshots as files (issue 14): a snapshot a leader sends is the store's export stream
//! written to a file under `DATA_DIR/snapshots/`, and a snapshot a follower receives is written
//! to a file there before it is imported, so neither side holds a snapshot in memory: memory is
//! bounded by the stream's frames and buffers, whatever the store's size. A file is removed when
//! its `SnapshotFile` is dropped (sent, installed, or abandoned by openraft), and leftovers of a
//! crash are removed when the member starts; an interrupted transfer is simply sent again whole
//! by openraft, into a new file.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use revkv_storage::{MvccStore, SnapshotError, SnapshotSummary};

/// Buffer of the readers and writers of snapshot files: large enough for few system calls,
/// small enough not to matter next to the store's page cache.
pub const SNAPSHOT_FILE_BUFFER_BYTES: usize = 1024 * 1024;

/// The files of one member's snapshots: where they live and how new ones are named.
#[derive(Debug)]
pub struct SnapshotFiles {
    directory: PathBuf,
    next_number: AtomicU64,
}

impl SnapshotFiles {
    /// The member's snapshot directory, created if missing and emptied of files a crash left.
    pub fn open(directory: PathBuf) -> io::Result<Arc<SnapshotFiles>> {
        std::fs::create_dir_all(&directory)?;
        for entry in std::fs::read_dir(&directory)? {
            let path = entry?.path();
            if path
                .extension()
                .is_some_and(|extension| extension == "snapshot")
            {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(Arc::new(SnapshotFiles {
            directory,
            next_number: AtomicU64::new(0),
        }))
    }

    /// A new, empty file for a snapshot, removed again when the answer is dropped.
    pub fn create(self: &Arc<Self>, purpose: &str) -> io::Result<(SnapshotFile, File)> {
        let number = self.next_number.fetch_add(1, Ordering::Relaxed);
        let path = self.directory.join(format!("{purpose}-{number}.snapshot"));
        let file = File::create(&path)?;
        Ok((SnapshotFile { path: Some(path) }, file))
    }

    /// Exports `store` into a new file (one consistent read transaction, streamed frame by frame).
    pub fn export(
        self: &Arc<Self>,
        store: &MvccStore,
    ) -> Result<(SnapshotFile, SnapshotSummary), SnapshotError> {
        let (snapshot, file) = self.create("outgoing")?;
        let mut writer = BufWriter::with_capacity(SNAPSHOT_FILE_BUFFER_BYTES, file);
        let summary = store.export_snapshot(&mut writer)?;
        writer.flush()?;
        Ok((snapshot, summary))
    }
}

/// One snapshot's data: a file (removed when this is dropped), or nothing (the meta-only
/// snapshot the builder returns, see `state_machine::SnapshotBuilder`).
#[derive(Debug, Default)]
pub struct SnapshotFile {
    path: Option<PathBuf>,
}

impl SnapshotFile {
    /// A snapshot with no data.
    pub fn empty() -> SnapshotFile {
        SnapshotFile { path: None }
    }

    /// The file, if there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A buffered reader of the data.
    pub fn reader(&self) -> io::Result<BufReader<File>> {
        let path = self.path.as_deref().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "the snapshot has no data")
        })?;
        Ok(BufReader::with_capacity(
            SNAPSHOT_FILE_BUFFER_BYTES,
            File::open(path)?,
        ))
    }

    /// The size of the data in bytes.
    pub fn len(&self) -> io::Result<u64> {
        match &self.path {
            Some(path) => Ok(std::fs::metadata(path)?.len()),
            None => Ok(0),
        }
    }

    /// True when there is no data.
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl Drop for SnapshotFile {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            // A file that cannot be removed now is removed at the next start.
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_removed_when_dropped_and_leftovers_at_open() {
        let directory = tempfile::tempdir().unwrap();
        let snapshots = directory.path().join("snapshots");
        let files = SnapshotFiles::open(snapshots.clone()).unwrap();
        let (snapshot, mut file) = files.create("incoming").unwrap();
        file.write_all(b"data").unwrap();
        let path = snapshot.path().unwrap().to_path_buf();
        assert_eq!(snapshot.len().unwrap(), 4);
        drop(snapshot);
        assert!(!path.exists());

        let (left, _) = files.create("outgoing").unwrap();
        let left_path = left.path().unwrap().to_path_buf();
        std::mem::forget(left); // as a crash would leave it
        std::fs::write(snapshots.join("keep.txt"), b"not ours").unwrap();
        SnapshotFiles::open(snapshots.clone()).unwrap();
        assert!(!left_path.exists());
        assert!(snapshots.join("keep.txt").exists());
    }
}
