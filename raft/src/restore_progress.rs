//! How far a restore is, for a progress display on another thread (`revkv snapshot restore` draws
//! one on a terminal): which pass it is in (checking the whole backup, then writing it), the
//! records and their key and value bytes so far, and, once the check has counted them, the
//! totals the write pass goes towards.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use revkv_storage::ImportProgress;

/// The two passes over a backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePhase {
    /// Reading the whole backup through every check, writing nothing.
    Checking,
    /// Writing the checked backup into the new data directory.
    Writing,
}

/// Counters a restore bumps as it goes (relaxed atomics: a display needs no ordering).
#[derive(Debug, Default)]
pub struct RestoreProgress {
    writing: AtomicU8,
    counts: ImportProgress,
    checked_records: AtomicU64,
    checked_bytes: AtomicU64,
}

impl RestoreProgress {
    pub fn phase(&self) -> RestorePhase {
        match self.writing.load(Ordering::Relaxed) {
            0 => RestorePhase::Checking,
            _ => RestorePhase::Writing,
        }
    }

    /// Records and their bytes so far in this pass.
    pub fn records(&self) -> u64 {
        self.counts.records()
    }

    pub fn bytes(&self) -> u64 {
        self.counts.bytes()
    }

    /// The records and bytes the check counted: what the write pass goes towards.
    pub fn checked_totals(&self) -> (u64, u64) {
        (
            self.checked_records.load(Ordering::Relaxed),
            self.checked_bytes.load(Ordering::Relaxed),
        )
    }

    /// Where the pass in progress counts.
    pub(crate) fn counts(&self) -> &ImportProgress {
        &self.counts
    }

    /// The check is done: its counts become the totals, and the write pass starts from zero.
    pub(crate) fn start_writing(&self) {
        self.checked_records
            .store(self.counts.records(), Ordering::Relaxed);
        self.checked_bytes
            .store(self.counts.bytes(), Ordering::Relaxed);
        self.counts.reset();
        self.writing.store(1, Ordering::Relaxed);
    }
}
