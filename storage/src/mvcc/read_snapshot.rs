//! The newest committed snapshot, shared by the reads that come before the next commit.
//!
//! Beginning a redb read transaction, opening the history and meta tables in it and decoding the
//! state record cost a read about as much as finding its key (9.6 % of a leader's CPU under 64
//! clients' serializable reads, docs/BENCHMARKS.md). Between two commits every read would open the
//! same snapshot, so the first one opens it and the others share it, as etcd's backend shares one
//! read transaction between the commits of its batch.
//!
//! A shared snapshot is exactly as fresh as one of its own: every commit of the store ends with
//! [`ReadSnapshotCache::invalidate`] (`MvccStore::record_commit`), before whatever the commit
//! answers (an applied entry's client, a watcher) can start another read. A read that began its
//! transaction before a commit must not leave that older snapshot behind for later reads, so
//! each snapshot is stored only if no commit happened since its reader looked at the cache (the
//! generation check in [`ReadSnapshotCache::shared_or_fresh`]). The cache holds the snapshot
//! only until the next commit, so it never keeps redb from reusing pages for longer than a read
//! of its own would.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::mvcc::shared_history::SharedHistory;
use crate::mvcc::tables::StoreState;

/// One committed snapshot as a read needs it: the history table and the state record, both
/// from the same read transaction, each behind a reference count so that sharing them copies
/// nothing (the state record holds the membership's bytes).
#[derive(Clone)]
pub(crate) struct ReadSnapshot {
    pub history: SharedHistory,
    pub state: Arc<StoreState>,
}

/// The cache's one slot, and how many commits it has seen (so a snapshot begun before a commit
/// is recognised as older than it).
#[derive(Default)]
struct Slot {
    commits_seen: u64,
    snapshot: Option<ReadSnapshot>,
}

/// The newest committed snapshot, while no commit has followed it.
#[derive(Default)]
pub(crate) struct ReadSnapshotCache {
    slot: Mutex<Slot>,
}

impl ReadSnapshotCache {
    /// The shared snapshot if there is one, else `open()`'s, which is then shared unless a commit
    /// happened while it was opened. The caller holds the database's read lock throughout, so a
    /// defragmentation (which takes the write lock, and commits first) never finds a snapshot
    /// stored after its commit.
    pub fn shared_or_fresh<E>(
        &self,
        open: impl FnOnce() -> Result<ReadSnapshot, E>,
    ) -> Result<ReadSnapshot, E> {
        let commits_seen = {
            let slot = self.lock();
            if let Some(snapshot) = &slot.snapshot {
                return Ok(snapshot.clone());
            }
            slot.commits_seen
        };
        let fresh = open()?;
        let mut slot = self.lock();
        if slot.commits_seen == commits_seen && slot.snapshot.is_none() {
            slot.snapshot = Some(fresh.clone());
        }
        Ok(fresh)
    }

    /// Forgets the shared snapshot: called after every commit, before anything it answers can
    /// read again. The snapshot itself ends when its last read lets go of it.
    pub fn invalidate(&self) {
        let dropped = {
            let mut slot = self.lock();
            slot.commits_seen += 1;
            slot.snapshot.take()
        };
        // Ending a read transaction takes redb's own lock; not under this one.
        drop(dropped);
    }

    /// Whether a snapshot is being shared (for tests).
    #[cfg(test)]
    pub fn holds_a_snapshot(&self) -> bool {
        self.lock().snapshot.is_some()
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        // The slot is one counter and one option, each replaced whole: a panic elsewhere cannot
        // leave it half-written.
        self.slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
