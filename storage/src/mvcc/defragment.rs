//! Defragmentation: give the file space freed by compaction back to the filesystem (etcd's
//! `defrag`), with redb's own in-place compaction.
//!
//! redb compacts only when no transaction is alive, so the store takes the write side of its
//! database lock: no transaction begins until it is done, and applying waits (as etcd's defrag
//! blocks its member). A read that was already running (a long range scan, a backup stream) makes
//! redb refuse; the lock is then let go and the attempt repeated after a pause, a bounded number
//! of times, after which the caller hears `Busy` and may try again later.

use std::time::{Duration, Instant};

use redb::{CompactionError, Database, Durability};

use crate::error::{db_error, io_error, DefragmentError, StorageFailure};
use crate::mvcc::MvccStore;

/// Attempts to find no transaction alive, and the pause between two.
const MAX_ATTEMPTS: u32 = 200;
const PAUSE_BETWEEN_ATTEMPTS: Duration = Duration::from_millis(25);

/// redb compaction passes in one defragmentation, at most (each moves what it can; a few suffice).
const MAX_COMPACTION_PASSES: u32 = 64;

/// What a defragmentation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defragmented {
    pub file_bytes_before: u64,
    pub file_bytes_after: u64,
    pub elapsed: Duration,
}

impl MvccStore {
    /// Compacts the state file in place, so it shrinks to about the data it holds. A pending
    /// compaction is cleaned first, and every applied change is made durable. `Busy` when transactions kept running throughout the bounded
    /// wait for them.
    pub fn defragment(&self) -> Result<Defragmented, DefragmentError> {
        let started = Instant::now();
        let file_bytes_before = self.file_bytes()?;
        // What compaction freed is only free once its window is cleaned; finish it first, in
        // the usual bounded steps (applies go on between them).
        self.finish_compaction(crate::mvcc::DEFAULT_COMPACTION_INLINE_ENTRIES)?;
        for _ in 0..MAX_ATTEMPTS {
            let mut database = self
                .database
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.commit_durably(&database)?;
            match compact(&mut database) {
                Ok(()) => {
                    drop(database);
                    return Ok(Defragmented {
                        file_bytes_before,
                        file_bytes_after: self.file_bytes()?,
                        elapsed: started.elapsed(),
                    });
                }
                Err(CompactionError::TransactionInProgress) => {
                    drop(database);
                    std::thread::sleep(PAUSE_BETWEEN_ATTEMPTS);
                }
                Err(other) => return Err(db_error(&self.file)(redb::Error::from(other)).into()),
            }
        }
        Err(DefragmentError::Busy(format!(
            "reads kept running on {} for {:?}; try the defragmentation again",
            self.file.display(),
            PAUSE_BETWEEN_ATTEMPTS * MAX_ATTEMPTS
        )))
    }

    /// Size of the state file on disk.
    pub fn file_bytes(&self) -> Result<u64, StorageFailure> {
        Ok(std::fs::metadata(&self.file)
            .map_err(io_error(&self.file))?
            .len())
    }

    /// An empty durable commit, so everything applied before it survives a crash (the compaction
    /// itself commits durably too).
    fn commit_durably(&self, database: &Database) -> Result<(), StorageFailure> {
        let file = self.file.as_path();
        let mut write = database.begin_write().map_err(db_error(file))?;
        write
            .set_durability(Durability::Immediate)
            .map_err(db_error(file))?;
        write.commit().map_err(db_error(file))?;
        let applied = self.tracker().applied;
        self.record_commit(Durability::Immediate, applied);
        Ok(())
    }
}

/// Runs redb's compaction until it finds nothing more to move (bounded).
fn compact(database: &mut Database) -> std::result::Result<(), CompactionError> {
    for _ in 0..MAX_COMPACTION_PASSES {
        if !database.compact()? {
            return Ok(());
        }
    }
    Ok(())
}
