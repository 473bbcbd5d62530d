//! Disk faults on command, so tests can show what a member does when its disk fails.
//!
//! Every revkv file goes through a switchboard (`DiskFaults`) that is disarmed from birth: the state
//! file through `FaultableFile`, a redb storage backend wrapping redb's own file backend, and the
//! raft log's segment and metadata writes through `DiskFaults::check`. A test arms a switch (fail
//! every write, every fsync, or every read from now on) through `MvccStore::disk_faults` or
//! `RaftLogStore::disk_faults`, and the next such operation fails with an I/O error, as a failing
//! disk's would. A test may also slow every fsync down (`delay_syncs`), as a saturated or failing
//! disk does before it fails outright. Nothing outside the library can arm them: there is no flag,
//! variable or endpoint. Disarmed, the cost is one or two relaxed atomic loads per file operation.

use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

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
        if !self.switch(operation).load(Ordering::Relaxed) {
            return Ok(());
        }
        self.switches.injected.fetch_add(1, Ordering::SeqCst);
        Err(io::Error::other(format!(
            "injected disk fault: {operation:?} failed (an input/output error)"
        )))
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
            .finish()
    }
}

/// redb's file backend behind a `DiskFaults` switchboard. Locks pass straight through.
#[derive(Debug)]
pub(crate) struct FaultableFile {
    file: FileBackend,
    faults: DiskFaults,
}

impl FaultableFile {
    pub(crate) fn new(file: FileBackend, faults: DiskFaults) -> Self {
        FaultableFile { file, faults }
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
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.faults.check(DiskOperation::Sync)?;
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.faults.check(DiskOperation::Write)?;
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
