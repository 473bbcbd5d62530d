//! The raft log in a directory of its own: append-only segment files and a small metadata file.
//!
//! Entries are opaque bytes (the raft layer encodes them through the codec module, so each carries
//! the format-version byte). They go into segment files (`segment.rs`): an append of many entries
//! is one `pwrite` and one `fdatasync` (group commit), and a new segment starts once the current
//! one passes `LogOptions::segment_bytes`. The vote, the committed id and the last purged id live
//! in the metadata file (`meta.rs`). Every append, vote, truncation and purge is durable when it
//! returns; only the committed id is saved without an fsync, because losing it merely makes a
//! restarted member re-apply fewer entries before it hears from the leader again.
//!
//! Invariants, checked on every call: the log is contiguous, appends continue it exactly (or, on an
//! empty log, continue the last purged id), the purged id never moves backwards, and after a failed
//! write or fsync the store refuses every further change (fail-stop: the file's state is unknown).

mod meta;
mod segment;

use std::fs::{self, File};
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::codec::{self, LogMeta, SEGMENT_HEADER_BYTES};
use crate::disk_faults::DiskFaults;
use crate::error::{io_error, AppendError, OpenError, StorageFailure};
use crate::types::LogId;
use meta::MetaFile;
use segment::{ScanEnd, Segment};

const META_FILE_NAME: &str = "meta";

/// Settings of the raft log.
#[derive(Clone, Copy, Debug)]
pub struct LogOptions {
    /// A new segment file starts once the current one holds this many bytes.
    pub segment_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The raft log store. See the module documentation.
pub struct RaftLogStore {
    directory: PathBuf,
    options: LogOptions,
    files: Mutex<LogFiles>,
    /// What the open cut from the end of the newest segment (a write torn by a crash), if anything.
    repaired_tail: Option<String>,
    /// Fault switches for every write and fsync of a change to the log (disarmed unless a test
    /// arms them).
    disk_faults: DiskFaults,
}

/// Everything that changes, under one lock.
struct LogFiles {
    meta: MetaFile,
    /// In index order, contiguous, none empty.
    segments: Vec<Segment>,
    /// Why the store stopped accepting changes, after a failed write or fsync.
    failed: Option<String>,
}

impl RaftLogStore {
    /// Opens the log directory at `path`, creating it when it does not exist.
    pub fn open(path: impl AsRef<Path>, options: LogOptions) -> Result<Self, OpenError> {
        Self::open_with_faults(path, options, DiskFaults::default())
    }

    /// Opens the log directory with every file operation going through `disk_faults` (for tests
    /// and simulations that fail, fill or crash the disk).
    pub fn open_with_faults(
        path: impl AsRef<Path>,
        options: LogOptions,
        disk_faults: DiskFaults,
    ) -> Result<Self, OpenError> {
        let directory = path.as_ref().to_path_buf();
        if directory.exists() && !directory.is_dir() {
            return Err(foreign(
                &directory,
                "it is a file, not a raft log directory",
            ));
        }
        fs::create_dir_all(&directory).map_err(io_error(&directory))?;
        let meta_path = directory.join(META_FILE_NAME);
        let meta = if meta_path.exists() {
            MetaFile::open(&meta_path, &disk_faults)?
        } else {
            refuse_foreign_contents(&directory)?;
            let meta = MetaFile::create(&meta_path, &disk_faults)?;
            sync_directory(&directory)?;
            meta
        };
        lock_exclusively(meta.file(), &meta_path)?;
        let (segments, repaired_tail) = open_segments(&directory, &disk_faults)?;
        Ok(RaftLogStore {
            directory,
            options,
            files: Mutex::new(LogFiles {
                meta,
                segments,
                failed: None,
            }),
            repaired_tail,
            disk_faults,
        })
    }

    /// The log's fault switches, for tests of what a failing disk does (see `disk_faults`).
    pub fn disk_faults(&self) -> &DiskFaults {
        &self.disk_faults
    }

    /// What opening the log cut from the end of its newest segment, if anything: a write torn by
    /// a crash, never acknowledged. The caller logs it, so an operator can see it happened.
    pub fn repaired_tail(&self) -> Option<&str> {
        self.repaired_tail.as_deref()
    }

    /// The log's directory.
    pub fn path(&self) -> &Path {
        &self.directory
    }

    /// Bytes the log's files hold (segments and metadata).
    pub fn size_bytes(&self) -> u64 {
        let files = self.lock();
        let segments: u64 = files.segments.iter().map(Segment::byte_len).sum();
        segments + meta::FILE_BYTES
    }

    /// Appends entries (index, encoded entry) durably, with one write and one fsync.
    ///
    /// Panics when an entry does not continue the log exactly (the raft layer's append is
    /// contiguous with the last index, and a truncation comes first when it is not): a log with a
    /// gap or a repeated index would replay wrong, so the member stops before writing anything.
    pub fn append<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, &'a [u8])>,
    ) -> Result<(), AppendError> {
        let mut files = self.lock();
        files.refuse_if_failed()?;
        let mut expected = files.next_index();
        let mut first_index = None;
        let mut records = Vec::new();
        let mut record_lengths = Vec::new();
        for (index, bytes) in entries {
            assert!(
                expected.is_none_or(|expected| index == expected),
                "the raft log is contiguous: an append at index {index}, but the log continues \
                 at {expected:?}"
            );
            let before = records.len();
            codec::encode_log_record(&mut records, index, bytes).map_err(|error| {
                AppendError::EntryTooLarge {
                    index,
                    detail: error.to_string(),
                }
            })?;
            record_lengths.push(records.len() - before);
            first_index.get_or_insert(index);
            expected = Some(index + 1);
        }
        let Some(first_index) = first_index else {
            // Nothing to make durable: skip the write and its fsync.
            return Ok(());
        };
        let result = self.write_records(&mut files, first_index, &records, &record_lengths);
        Ok(files.stop_on_failure(result)?)
    }

    fn write_records(
        &self,
        files: &mut LogFiles,
        first_index: u64,
        records: &[u8],
        record_lengths: &[usize],
    ) -> Result<(), StorageFailure> {
        let rotate = files
            .segments
            .last()
            .is_none_or(|active| active.byte_len() >= self.options.segment_bytes);
        if rotate {
            // Only the newest segment keeps preallocated space: a scan of an older one that meets
            // zeros reports damage.
            if let Some(active) = files.segments.last_mut() {
                active.cut_after_last_record()?;
            }
            files.segments.push(Segment::create(
                &self.directory,
                first_index,
                &self.disk_faults,
            )?);
            sync_directory(&self.directory)?;
        }
        let active = files.segments.last_mut().expect("a segment to append to");
        active.append_durably(records, record_lengths)
    }

    /// Entries with index in `range`, in order (purged entries are not returned).
    pub fn entries(&self, range: Range<u64>) -> Result<Vec<(u64, Vec<u8>)>, StorageFailure> {
        let files = self.lock();
        let start = range.start.max(files.first_readable_index());
        let mut entries = Vec::new();
        for segment in &files.segments {
            if segment.next_index() <= start || segment.first_index >= range.end {
                continue;
            }
            entries.extend(segment.read(start, range.end)?);
        }
        Ok(entries)
    }

    /// The last entry, if the log holds any.
    pub fn last_entry(&self) -> Result<Option<(u64, Vec<u8>)>, StorageFailure> {
        let files = self.lock();
        let Some(last) = files.segments.last().and_then(Segment::last_index) else {
            return Ok(None);
        };
        if last < files.first_readable_index() {
            return Ok(None);
        }
        let segment = files.segments.last().expect("checked above");
        Ok(segment.read(last, last + 1)?.pop())
    }

    /// The first index the log holds, if any.
    pub fn first_index(&self) -> Result<Option<u64>, StorageFailure> {
        let files = self.lock();
        let Some(first_segment) = files.segments.first() else {
            return Ok(None);
        };
        let first = first_segment.first_index.max(files.first_readable_index());
        let last = files.segments.last().and_then(Segment::last_index);
        Ok(last.filter(|last| *last >= first).map(|_| first))
    }

    /// Deletes every entry after `index` (every entry, when `None`), durably.
    pub fn truncate_after(&self, index: Option<u64>) -> Result<(), StorageFailure> {
        let mut files = self.lock();
        files.refuse_if_failed()?;
        let result = self.truncate_segments(&mut files, index);
        files.stop_on_failure(result)
    }

    fn truncate_segments(
        &self,
        files: &mut LogFiles,
        index: Option<u64>,
    ) -> Result<(), StorageFailure> {
        let mut removed_any = false;
        while let Some(last) = files.segments.last_mut() {
            match index {
                Some(index) if last.first_index <= index => {
                    last.truncate_after(index)?;
                    break;
                }
                _ => {
                    let segment = files.segments.pop().expect("checked above");
                    self.disk_faults
                        .remove_file(segment.path())
                        .map_err(io_error(segment.path()))?;
                    removed_any = true;
                }
            }
        }
        if removed_any {
            sync_directory(&self.directory)?;
        }
        Ok(())
    }

    /// Deletes every entry up to and including `upto.index` and records `upto` as the last purged
    /// id, durably. Purging never moves backwards.
    pub fn purge_through(&self, upto: LogId) -> Result<(), StorageFailure> {
        let mut files = self.lock();
        files.refuse_if_failed()?;
        let previous = files.meta.current().last_purged;
        if previous.is_some_and(|previous| previous.index > upto.index) {
            return Err(StorageFailure::Invariant(format!(
                "purge through {} after purging through {}",
                upto.index,
                previous.map_or(0, |previous| previous.index)
            )));
        }
        let result = self.purge_segments(&mut files, upto);
        files.stop_on_failure(result)
    }

    fn purge_segments(&self, files: &mut LogFiles, upto: LogId) -> Result<(), StorageFailure> {
        let meta = LogMeta {
            last_purged: Some(upto),
            ..files.meta.current().clone()
        };
        files.meta.write(meta, true)?;
        // A segment goes once every entry in it is purged; entries purged from the segment that
        // stays are skipped by reads (`first_readable_index`).
        let mut removed_any = false;
        while files
            .segments
            .first()
            .is_some_and(|first| first.last_index().is_some_and(|last| last <= upto.index))
        {
            let segment = files.segments.remove(0);
            self.disk_faults
                .remove_file(segment.path())
                .map_err(io_error(segment.path()))?;
            removed_any = true;
        }
        if removed_any {
            sync_directory(&self.directory)?;
        }
        Ok(())
    }

    /// The last purged log id, if any purge happened.
    pub fn last_purged(&self) -> Result<Option<LogId>, StorageFailure> {
        Ok(self.lock().meta.current().last_purged)
    }

    /// Saves the vote (opaque, encoded by the raft layer) durably.
    pub fn save_vote(&self, vote: &[u8]) -> Result<(), StorageFailure> {
        let mut files = self.lock();
        files.refuse_if_failed()?;
        let meta = LogMeta {
            vote: Some(vote.to_vec()),
            ..files.meta.current().clone()
        };
        let result = files.meta.write(meta, true);
        files.stop_on_failure(result)
    }

    /// The saved vote, if any.
    pub fn vote(&self) -> Result<Option<Vec<u8>>, StorageFailure> {
        Ok(self.lock().meta.current().vote.clone())
    }

    /// Saves the committed log id without an fsync (see the module documentation).
    pub fn save_committed(&self, committed: Option<LogId>) -> Result<(), StorageFailure> {
        let mut files = self.lock();
        files.refuse_if_failed()?;
        let meta = LogMeta {
            committed,
            ..files.meta.current().clone()
        };
        let result = files.meta.write(meta, false);
        files.stop_on_failure(result)
    }

    /// Like [`save_committed`](Self::save_committed), but only if no other thread holds the log
    /// files right now (the writer thread in an fsync, say): `None` then, and nothing is written.
    /// So an async task can save the committed id without ever waiting for a disk.
    pub fn try_save_committed(
        &self,
        committed: Option<LogId>,
    ) -> Option<Result<(), StorageFailure>> {
        let mut files = match self.files.try_lock() {
            Ok(files) => files,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        if let Err(error) = files.refuse_if_failed() {
            return Some(Err(error));
        }
        let meta = LogMeta {
            committed,
            ..files.meta.current().clone()
        };
        let result = files.meta.write(meta, false);
        Some(files.stop_on_failure(result))
    }

    /// The saved committed log id, if any.
    pub fn committed(&self) -> Result<Option<LogId>, StorageFailure> {
        Ok(self.lock().meta.current().committed)
    }

    fn lock(&self) -> MutexGuard<'_, LogFiles> {
        // A panic while holding the lock is a bug; the files stay as the last write left them.
        self.files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl LogFiles {
    /// The index the next append must use, or `None` when any index may start the log.
    fn next_index(&self) -> Option<u64> {
        if let Some(last) = self.segments.last() {
            return Some(last.next_index());
        }
        self.meta
            .current()
            .last_purged
            .map(|purged| purged.index + 1)
    }

    /// The lowest index a read may return: purged entries may linger in the first segment.
    fn first_readable_index(&self) -> u64 {
        self.meta
            .current()
            .last_purged
            .map_or(0, |purged| purged.index + 1)
    }

    fn refuse_if_failed(&self) -> Result<(), StorageFailure> {
        match &self.failed {
            Some(reason) => Err(StorageFailure::Invariant(format!(
                "the raft log stopped accepting changes after a failed write: {reason}"
            ))),
            None => Ok(()),
        }
    }

    /// Remembers an I/O failure: after a failed write or fsync nobody knows what the file holds,
    /// so the store refuses every later change instead of building on it.
    fn stop_on_failure(
        &mut self,
        result: Result<(), StorageFailure>,
    ) -> Result<(), StorageFailure> {
        if let Err(error @ StorageFailure::FileIo { .. }) = &result {
            self.failed = Some(error.to_string());
        }
        result
    }
}

/// Opens every segment in the directory, in index order, and checks they continue each other.
/// A damaged end of the newest segment (a torn write) is cut off; damage anywhere else is an error.
fn open_segments(
    directory: &Path,
    faults: &DiskFaults,
) -> Result<(Vec<Segment>, Option<String>), OpenError> {
    let first_indexes = segment_first_indexes(directory)?;
    let mut segments: Vec<Segment> = Vec::with_capacity(first_indexes.len());
    let newest = first_indexes.last().copied();
    let mut repaired_tail = None;
    for first_index in first_indexes {
        let path = directory.join(Segment::file_name(first_index));
        let is_newest = Some(first_index) == newest;
        if is_newest && header_never_became_durable(&path)? {
            // Created just before a crash: its header's fsync never finished, and no entry is
            // appended to a segment before that fsync, so it held nothing acknowledged.
            faults.remove_file(&path).map_err(io_error(&path))?;
            repaired_tail = Some(format!(
                "{}: removed a segment whose header was never written whole",
                path.display()
            ));
            continue;
        }
        let (mut segment, scan_end) = Segment::open(&path, first_index, faults)?;
        if let Some(repaired) = cut_torn_end(&mut segment, &path, scan_end, is_newest)? {
            repaired_tail = Some(repaired);
        }
        if let Some(previous) = segments.last() {
            check_continues(previous, first_index, &path)?;
        }
        if segment.entry_count() == 0 {
            // A segment created just before a crash, before its first entry was durable.
            faults.remove_file(&path).map_err(io_error(&path))?;
            continue;
        }
        segments.push(segment);
    }
    Ok((segments, repaired_tail))
}

/// Whether the segment file at `path` is shorter than a header or holds nothing but zeros: what a
/// crash leaves of a segment created just before it (the file's creation reached the disk, its
/// header did not, and nothing is written after the header before the header's fsync). A zeroed
/// header with anything after it is damage, not that, and opening the segment names it.
fn header_never_became_durable(path: &Path) -> Result<bool, StorageFailure> {
    let mut file = fs::File::open(path).map_err(io_error(path))?;
    let length = file.metadata().map_err(io_error(path))?.len();
    if length < SEGMENT_HEADER_BYTES as u64 {
        return Ok(true);
    }
    // A real segment ends the scan at its header's first byte; only a remnant is read whole.
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let read = file.read(&mut buffer).map_err(io_error(path))?;
        if read == 0 {
            return Ok(true);
        }
        if buffer[..read].iter().any(|byte| *byte != 0) {
            return Ok(false);
        }
    }
}

/// The first indexes of the directory's segments, in order. Any file but segments and the meta
/// file is refused: the directory is the log's alone.
fn segment_first_indexes(directory: &Path) -> Result<Vec<u64>, OpenError> {
    let mut first_indexes = Vec::new();
    for entry in fs::read_dir(directory).map_err(io_error(directory))? {
        let entry = entry.map_err(io_error(directory))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(first_index) = Segment::parse_file_name(&name) {
            first_indexes.push(first_index);
        } else if name != META_FILE_NAME {
            return Err(foreign(
                &entry.path(),
                "an unknown file in the raft log directory",
            ));
        }
    }
    first_indexes.sort_unstable();
    Ok(first_indexes)
}

/// Cuts the newest segment back to its last whole record when its scan ended in preallocated
/// zeros or in damage (a torn write), and returns what was repaired when it was damage. The same
/// in a segment that later segments follow cannot be a torn write, so it is an error.
fn cut_torn_end(
    segment: &mut Segment,
    path: &Path,
    scan_end: ScanEnd,
    is_newest: bool,
) -> Result<Option<String>, StorageFailure> {
    const REPAIR: &str = "in a segment that later segments follow; restore the member from a \
                          snapshot or remove it from the cluster and add it again";
    match scan_end {
        ScanEnd::Preallocated if !is_newest => Err(StorageFailure::Corrupt {
            file: path.to_path_buf(),
            detail: format!("zeros after the last record, {REPAIR}"),
        }),
        ScanEnd::Damaged { detail } if !is_newest => Err(StorageFailure::Corrupt {
            file: path.to_path_buf(),
            detail: format!("{detail}, {REPAIR}"),
        }),
        ScanEnd::Preallocated => {
            // Dropped so that the space after the last record is known to hold nothing at all.
            segment.cut_after_last_record()?;
            Ok(None)
        }
        ScanEnd::Damaged { detail } => {
            segment.cut_after_last_record()?;
            Ok(Some(format!("{}: {detail}", path.display())))
        }
        ScanEnd::Clean => Ok(None),
    }
}

/// A segment must start exactly where the one before it ends.
fn check_continues(
    previous: &Segment,
    first_index: u64,
    path: &Path,
) -> Result<(), StorageFailure> {
    if previous.next_index() == first_index {
        return Ok(());
    }
    Err(StorageFailure::Corrupt {
        file: path.to_path_buf(),
        detail: format!(
            "the segment starts at {first_index}, but the one before ends before {}",
            previous.next_index()
        ),
    })
}

/// A new log directory must be empty (or hold only what this store writes).
fn refuse_foreign_contents(directory: &Path) -> Result<(), OpenError> {
    let mut entries = fs::read_dir(directory).map_err(io_error(directory))?;
    match entries.next() {
        None => Ok(()),
        Some(_) => Err(foreign(
            directory,
            "the directory is not empty and holds no raft log metadata",
        )),
    }
}

fn lock_exclusively(file: &File, path: &Path) -> Result<(), StorageFailure> {
    file.try_lock().map_err(|error| StorageFailure::FileIo {
        file: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!("the raft log is in use by another process or store: {error}"),
        ),
    })
}

/// Makes a file's creation or removal in `directory` durable.
fn sync_directory(directory: &Path) -> Result<(), StorageFailure> {
    File::open(directory)
        .and_then(|handle| handle.sync_all())
        .map_err(io_error(directory))
}

fn foreign(path: &Path, detail: &str) -> OpenError {
    OpenError::ForeignFile {
        file: path.to_path_buf(),
        expected: "raft-log",
        detail: detail.to_string(),
    }
}
