//! Disk faults on command, so tests can show what a member does when its disk fails.
//!
//! Every revkv file goes through a switchboard (`DiskFaults`) that is disarmed from birth: the state
//! file through `FaultableFile`, a redb storage backend wrapping redb's own file backend, and every
//! write, length change, fsync and removal of the raft log's segment and metadata files through
//! `DiskFaults::write_at`, `set_len`, `sync` and `remove_file`. A test arms a switch (fail
//! every write, every fsync, or every read from now on) through `MvccStore::disk_faults` or
//! `RaftLogStore::disk_faults`, and the next such operation fails with an I/O error, as a failing
//! disk's would, or fill the disk (`fill`: every write fails with "no space left"). A test may also
//! slow every fsync down (`delay_syncs`), as a saturated or failing disk does before it fails
//! outright. A simulation may keep every change made since each file's last fsync
//! (`keep_unsynced_writes`) and lose them as a power cut would (`crash`; `unsynced_writes.rs`).
//! Nothing outside the library can arm them: there is no flag, variable or endpoint. Disarmed,
//! the cost is one or two relaxed atomic loads per file operation.

use std::fmt;
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use crate::unsynced_writes::{CrashLoss, UnsyncedWrites};

/// The kind of file operation a fault can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOperation {
    Read,
    Write,
    Sync,
}

/// The switches of one file (or one group of files, such as the raft log's). Clones share them.
#[derive(Clone, Default)]
pub struct DiskFaults {
    switches: Arc<Switches>,
}

#[derive(Default)]
struct Switches {
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    fail_syncs: AtomicBool,
    /// Every write fails with "no space left on device".
    full: AtomicBool,
    /// Whether `unsynced` records changes (read without the lock, so production pays one load).
    keeping_unsynced_writes: AtomicBool,
    unsynced: Mutex<UnsyncedWrites>,
    /// Every fsync takes at least this many more milliseconds (0: none).
    sync_delay_millis: AtomicU64,
    /// How many fsyncs were slowed down.
    delayed_syncs: AtomicU64,
    /// How many operations failed because a switch was on.
    injected: AtomicU64,
}

impl DiskFaults {
    /// Turns the failure of one kind of operation on or off, from the next operation on.
    pub fn fail(&self, operation: DiskOperation, on: bool) {
        self.switch(operation).store(on, Ordering::SeqCst);
    }

    /// Fills the disk (or makes room again): from the next write on, every write fails with
    /// "no space left on device", as a full disk's does.
    pub fn fill(&self, full: bool) {
        self.switches.full.store(full, Ordering::SeqCst);
    }

    /// From now on, keeps every change made to the files since each one's last fsync, so that
    /// [`DiskFaults::crash`] can lose them. For simulations: it costs a read of the replaced bytes
    /// per write.
    pub fn keep_unsynced_writes(&self) {
        self.switches
            .keeping_unsynced_writes
            .store(true, Ordering::SeqCst);
    }

    /// Loses what a power cut would (`unsynced_writes.rs`): per file, every change after a drawn
    /// number of kept ones since its last fsync, the first lost write possibly torn. `draw(n)`
    /// answers a number in `0..n`. Whoever had the files open must have stopped writing (arm
    /// `fail(Write)` first, or wait until they are closed).
    pub fn crash(&self, draw: &mut dyn FnMut(u64) -> u64) -> io::Result<Vec<CrashLoss>> {
        self.unsynced().crash(draw)
    }

    /// Makes every fsync from now on take `delay` longer (zero turns it off). The operations that
    /// sync run on the storage's own threads, never on an async runtime's workers, so the delay
    /// blocks only the file's writer, as a slow disk does.
    pub fn delay_syncs(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.switches
            .sync_delay_millis
            .store(millis, Ordering::SeqCst);
    }

    /// How many fsyncs `delay_syncs` has slowed down.
    pub fn delayed_syncs(&self) -> u64 {
        self.switches.delayed_syncs.load(Ordering::SeqCst)
    }

    /// How many operations have failed because a switch was on.
    pub fn injected(&self) -> u64 {
        self.switches.injected.load(Ordering::SeqCst)
    }

    /// Fails with the error a failing disk would give when `operation`'s switch is on.
    pub fn check(&self, operation: DiskOperation) -> io::Result<()> {
        if operation == DiskOperation::Sync {
            let delay = self.switches.sync_delay_millis.load(Ordering::Relaxed);
            if delay > 0 {
                std::thread::sleep(Duration::from_millis(delay));
                self.switches.delayed_syncs.fetch_add(1, Ordering::SeqCst);
            }
        }
        if operation == DiskOperation::Write && self.switches.full.load(Ordering::Relaxed) {
            self.switches.injected.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "injected disk fault: no space left on device",
            ));
        }
        if !self.switch(operation).load(Ordering::Relaxed) {
            return Ok(());
        }
        self.switches.injected.fetch_add(1, Ordering::SeqCst);
        Err(io::Error::other(format!(
            "injected disk fault: {operation:?} failed (an input/output error)"
        )))
    }

    /// Writes `data` at `offset` of the file at `path`, through the switches.
    pub(crate) fn write_at(
        &self,
        file: &File,
        path: &Path,
        data: &[u8],
        offset: u64,
    ) -> io::Result<()> {
        self.check(DiskOperation::Write)?;
        if self.keeps_unsynced_writes() {
            self.unsynced().before_write(path, file, offset, data)?;
        }
        file.write_all_at(data, offset)
    }

    /// Sets the length of the file at `path`, through the switches.
    pub(crate) fn set_len(&self, file: &File, path: &Path, length: u64) -> io::Result<()> {
        self.check(DiskOperation::Write)?;
        if self.keeps_unsynced_writes() {
            self.unsynced().before_set_length(path, file, length)?;
        }
        file.set_len(length)
    }

    /// Makes the data of the file at `path` durable (`fdatasync`), through the switches.
    pub(crate) fn sync(&self, file: &File, path: &Path) -> io::Result<()> {
        self.check(DiskOperation::Sync)?;
        file.sync_data()?;
        if self.keeps_unsynced_writes() {
            self.unsynced().forget(path);
        }
        Ok(())
    }

    /// Removes the file at `path`; nothing of it can be lost by a crash any more.
    pub(crate) fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)?;
        if self.keeps_unsynced_writes() {
            self.unsynced().forget(path);
        }
        Ok(())
    }

    fn keeps_unsynced_writes(&self) -> bool {
        self.switches
            .keeping_unsynced_writes
            .load(Ordering::Relaxed)
    }

    fn unsynced(&self) -> MutexGuard<'_, UnsyncedWrites> {
        // A panic while recording leaves at worst one change unrecorded, and the simulation that
        // recorded it has failed already.
        self.switches
            .unsynced
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn switch(&self, operation: DiskOperation) -> &AtomicBool {
        match operation {
            DiskOperation::Read => &self.switches.fail_reads,
            DiskOperation::Write => &self.switches.fail_writes,
            DiskOperation::Sync => &self.switches.fail_syncs,
        }
    }
}

impl fmt::Debug for DiskFaults {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |operation| self.switch(operation).load(Ordering::Relaxed);
        formatter
            .debug_struct("DiskFaults")
            .field("fail_reads", &on(DiskOperation::Read))
            .field("fail_writes", &on(DiskOperation::Write))
            .field("fail_syncs", &on(DiskOperation::Sync))
            .field("full", &self.switches.full.load(Ordering::Relaxed))
            .finish()
    }
}

/// redb's file backend behind a `DiskFaults` switchboard. Locks pass straight through.
#[derive(Debug)]
pub(crate) struct FaultableFile {
    file: FileBackend,
    path: PathBuf,
    faults: DiskFaults,
}

impl FaultableFile {
    pub(crate) fn new(file: FileBackend, path: &Path, faults: DiskFaults) -> Self {
        FaultableFile {
            file,
            path: path.to_path_buf(),
            faults,
        }
    }
}

impl StorageBackend for FaultableFile {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.faults.check(DiskOperation::Read)?;
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.faults.check(DiskOperation::Write)?;
        if self.faults.keeps_unsynced_writes() {
            self.faults
                .unsynced()
                .before_set_length(&self.path, &self.file, len)?;
        }
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.faults.check(DiskOperation::Sync)?;
        self.file.sync_data()?;
        if self.faults.keeps_unsynced_writes() {
            self.faults.unsynced().forget(&self.path);
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.faults.check(DiskOperation::Write)?;
        if self.faults.keeps_unsynced_writes() {
            self.faults
                .unsynced()
                .before_write(&self.path, &self.file, offset, data)?;
        }
        self.file.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}
