//! One segment file of the raft log: a header, then entries appended one record after another.
//!
//! A record is a length, the entry's index and an xxh3 checksum of both, then the entry's bytes
//! (layouts in `codec.rs`). Appends write a whole batch with one `pwrite` at the end and one
//! `fdatasync`: about one page of I/O for a small entry, where a copy-on-write B-tree writes a
//! dozen. The offsets of the entries live in memory, so a read is one `pread`.
//!
//! Opening scans the file and checks every record. A record that is cut short or fails its
//! checksum ends the valid part: at the end of the newest segment that is a write torn by a crash
//! (never acknowledged, because acknowledgement waits for the fsync), and the file is cut back to
//! the last whole record; anywhere else it is corruption, and the open fails naming the file.
//!
//! Space is preallocated: the file grows by [`PREALLOCATION_BYTES`] of written zeros at a time, so
//! an append overwrites bytes the file already has and its `fdatasync` flushes only data. When an
//! append grows the file instead, the fsync must also write the inode (its size), one more
//! synchronous I/O: on this project's test machine 130 µs against 98 µs per fsync. Zeros after the
//! last record are the preallocated space; the newest segment is cut back to its last record at
//! open (so no stale bytes can ever follow a gap), and a segment is cut back when the next one
//! starts, so only the newest segment ever holds preallocated space.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{self, LOG_RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::disk_faults::{DiskFaults, DiskOperation};
use crate::error::{io_error, StorageFailure};

/// How much the file grows at a time when an append needs room: one write of zeros and its fsync
/// (about 4 ms here) for every 4 MiB of log, instead of an inode write with every append.
pub(super) const PREALLOCATION_BYTES: u64 = 4 * 1024 * 1024;

/// The largest buffer of zeros written at once while preallocating.
const ZERO_WRITE_BYTES: usize = 1024 * 1024;

/// One segment. Entry `first_index + i` starts at `offsets[i]`; `end` is where the next goes.
pub(super) struct Segment {
    pub(super) first_index: u64,
    path: PathBuf,
    file: Arc<File>,
    offsets: Vec<u64>,
    end: u64,
    /// The file's length: `end` plus the preallocated zeros after it.
    allocated: u64,
    /// Every write, length change and fsync goes through these switches.
    faults: DiskFaults,
}

/// Whether the simulator's test planted the bug of acknowledging an append before its fsync
/// (`planted_bugs.rs`; never in the server's build).
fn acknowledged_before_fsync() -> bool {
    #[cfg(feature = "planted-bugs")]
    if crate::planted_bugs::log_appends_are_acknowledged_before_fsync() {
        return true;
    }
    false
}

/// What a scan of an existing segment found after its last whole record.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ScanEnd {
    /// The file ends exactly after a whole record.
    Clean,
    /// Only zeros follow: space preallocated for appends.
    Preallocated,
    /// Bytes follow that are not a whole, intact record (`detail` says why).
    Damaged { detail: String },
}

impl Segment {
    /// The file name of the segment whose first entry is `first_index`.
    pub(super) fn file_name(first_index: u64) -> String {
        format!("{first_index:020}.seg")
    }

    /// The first index a segment file name stands for, if it is one.
    pub(super) fn parse_file_name(name: &str) -> Option<u64> {
        let digits = name.strip_suffix(".seg")?;
        (digits.len() == 20 && digits.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    }

    /// Creates a new, empty segment durably (the caller syncs the directory).
    pub(super) fn create(
        directory: &Path,
        first_index: u64,
        faults: &DiskFaults,
    ) -> Result<Self, StorageFailure> {
        let path = directory.join(Self::file_name(first_index));
        faults
            .check(DiskOperation::Write)
            .map_err(io_error(&path))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_error(&path))?;
        faults
            .write_at(&file, &path, &codec::encode_segment_header(first_index), 0)
            .map_err(io_error(&path))?;
        faults.sync(&file, &path).map_err(io_error(&path))?;
        Ok(Segment {
            first_index,
            path,
            file: Arc::new(file),
            offsets: Vec::new(),
            end: SEGMENT_HEADER_BYTES as u64,
            allocated: SEGMENT_HEADER_BYTES as u64,
            faults: faults.clone(),
        })
    }

    /// Opens an existing segment and checks every record. Returns the segment up to its last
    /// whole record and what followed it; the file itself is not changed.
    pub(super) fn open(
        path: &Path,
        first_index: u64,
        faults: &DiskFaults,
    ) -> Result<(Self, ScanEnd), StorageFailure> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_error(path))?;
        let corrupt = |detail: String| StorageFailure::Corrupt {
            file: path.to_path_buf(),
            detail,
        };
        let mut reader = BufReader::with_capacity(1 << 20, &file);
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        reader
            .read_exact(&mut header)
            .map_err(|error| corrupt(format!("segment header: {error}")))?;
        let named =
            codec::decode_segment_header(&header).map_err(|error| corrupt(error.to_string()))?;
        if named != first_index {
            return Err(corrupt(format!(
                "the header says the segment starts at {named}, its name says {first_index}"
            )));
        }
        let mut segment = Segment {
            first_index,
            path: path.to_path_buf(),
            file: Arc::new(file.try_clone().map_err(io_error(path))?),
            offsets: Vec::new(),
            end: SEGMENT_HEADER_BYTES as u64,
            allocated: file.metadata().map_err(io_error(path))?.len(),
            faults: faults.clone(),
        };
        let scan_end = segment.scan_records(&mut reader)?;
        Ok((segment, scan_end))
    }

    /// Reads records until the file ends or a record is not whole and intact.
    fn scan_records(&mut self, reader: &mut impl Read) -> Result<ScanEnd, StorageFailure> {
        let mut payload = Vec::new();
        loop {
            let mut header = [0u8; LOG_RECORD_HEADER_BYTES];
            let read = read_fully(reader, &mut header).map_err(io_error(&self.path))?;
            if read == 0 {
                return Ok(ScanEnd::Clean);
            }
            if header[..read].iter().all(|byte| *byte == 0) {
                return self.rest_is_zeros(reader);
            }
            if read < header.len() {
                return Ok(damaged(format!(
                    "a record header cut short at byte {}",
                    self.end
                )));
            }
            let record = match codec::decode_log_record_header(&header) {
                Ok(record) => record,
                Err(error) => return Ok(damaged(format!("at byte {}: {error}", self.end))),
            };
            let expected_index = self.next_index();
            if record.index != expected_index {
                return Ok(damaged(format!(
                    "at byte {} a record claims index {} where {expected_index} belongs",
                    self.end, record.index
                )));
            }
            payload.resize(record.payload_bytes, 0);
            let read = read_fully(reader, &mut payload).map_err(io_error(&self.path))?;
            if read < payload.len() {
                return Ok(damaged(format!("entry {} cut short", record.index)));
            }
            if codec::log_record_checksum(record.index, &payload) != record.checksum {
                return Ok(damaged(format!(
                    "entry {} fails its checksum",
                    record.index
                )));
            }
            self.offsets.push(self.end);
            self.end += (LOG_RECORD_HEADER_BYTES + payload.len()) as u64;
        }
    }

    /// After a header of zeros: preallocated space if only zeros follow, damage otherwise.
    fn rest_is_zeros(&self, reader: &mut impl Read) -> Result<ScanEnd, StorageFailure> {
        let mut buffer = vec![0u8; ZERO_WRITE_BYTES];
        loop {
            let read = read_fully(reader, &mut buffer).map_err(io_error(&self.path))?;
            if buffer[..read].iter().any(|byte| *byte != 0) {
                return Ok(damaged(format!(
                    "bytes other than zeros after a gap of zeros at byte {}",
                    self.end
                )));
            }
            if read < buffer.len() {
                return Ok(ScanEnd::Preallocated);
            }
        }
    }

    /// Cuts the file back to its last whole record, durably: after a torn write, to drop the
    /// preallocated space of the newest segment at open, and when the next segment starts.
    pub(super) fn cut_after_last_record(&mut self) -> Result<(), StorageFailure> {
        if self.allocated == self.end {
            return Ok(());
        }
        self.faults
            .set_len(&self.file, &self.path, self.end)
            .map_err(io_error(&self.path))?;
        self.faults
            .sync(&self.file, &self.path)
            .map_err(io_error(&self.path))?;
        self.allocated = self.end;
        Ok(())
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn entry_count(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// The index the next entry appended here must have.
    pub(super) fn next_index(&self) -> u64 {
        self.first_index + self.entry_count()
    }

    /// The index of the last entry, if the segment holds any.
    pub(super) fn last_index(&self) -> Option<u64> {
        (self.entry_count() > 0).then(|| self.next_index() - 1)
    }

    /// Bytes in use, header included.
    pub(super) fn byte_len(&self) -> u64 {
        self.end
    }

    /// Writes encoded records (built by `codec::encode_log_record`, continuing this segment)
    /// and makes them durable. `record_lengths` says where each record ends.
    pub(super) fn append_durably(
        &mut self,
        records: &[u8],
        record_lengths: &[usize],
    ) -> Result<(), StorageFailure> {
        // Every write below passes the fault switches itself; the first one that fails ends the
        // append before anything after it is written.
        let new_end = self.end + records.len() as u64;
        if new_end > self.allocated {
            // The append's own fsync below makes the zeros and the new length durable too.
            self.preallocate_through(new_end)?;
        }
        if acknowledged_before_fsync() {
            // The planted bug: the earlier batches are synced only now, and this one is answered
            // durable without its fsync.
            self.faults
                .sync(&self.file, &self.path)
                .map_err(io_error(&self.path))?;
            self.faults
                .write_at(&self.file, &self.path, records, self.end)
                .map_err(io_error(&self.path))?;
        } else {
            self.faults
                .write_at(&self.file, &self.path, records, self.end)
                .map_err(io_error(&self.path))?;
            self.faults
                .sync(&self.file, &self.path)
                .map_err(io_error(&self.path))?;
        }
        let mut offset = self.end;
        for length in record_lengths {
            self.offsets.push(offset);
            offset += *length as u64;
        }
        assert_eq!(
            offset,
            self.end + records.len() as u64,
            "record lengths cover the batch"
        );
        self.end = offset;
        Ok(())
    }

    /// Grows the file with written zeros to the next multiple of [`PREALLOCATION_BYTES`] at or
    /// past `needed`.
    fn preallocate_through(&mut self, needed: u64) -> Result<(), StorageFailure> {
        let target = needed.div_ceil(PREALLOCATION_BYTES) * PREALLOCATION_BYTES;
        let zeros = vec![0u8; ZERO_WRITE_BYTES];
        let mut offset = self.allocated;
        while offset < target {
            let length = (target - offset).min(ZERO_WRITE_BYTES as u64) as usize;
            self.faults
                .write_at(&self.file, &self.path, &zeros[..length], offset)
                .map_err(io_error(&self.path))?;
            offset += length as u64;
        }
        self.allocated = target;
        Ok(())
    }

    /// The payloads of the entries with index in `start..end` (clamped to this segment), each
    /// checked against its record's checksum and index.
    pub(super) fn read(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>, StorageFailure> {
        let start = start.max(self.first_index);
        let end = end.min(self.next_index());
        if start >= end {
            return Ok(Vec::new());
        }
        let first_position = (start - self.first_index) as usize;
        let end_position = (end - self.first_index) as usize;
        let span_start = self.offsets[first_position];
        let span_end = self.offsets.get(end_position).copied().unwrap_or(self.end);
        let mut span = vec![0u8; (span_end - span_start) as usize];
        self.file
            .read_exact_at(&mut span, span_start)
            .map_err(io_error(&self.path))?;
        let mut entries = Vec::with_capacity(end_position - first_position);
        let mut cursor = 0usize;
        for index in start..end {
            let record = codec::decode_log_record_header(&span[cursor..])
                .map_err(|error| self.corrupt(format!("entry {index}: {error}")))?;
            let payload_start = cursor + LOG_RECORD_HEADER_BYTES;
            let payload = span
                .get(payload_start..payload_start + record.payload_bytes)
                .ok_or_else(|| self.corrupt(format!("entry {index} runs past its span")))?;
            if record.index != index
                || codec::log_record_checksum(index, payload) != record.checksum
            {
                return Err(self.corrupt(format!("entry {index} fails its checksum")));
            }
            entries.push((index, payload.to_vec()));
            cursor = payload_start + record.payload_bytes;
        }
        Ok(entries)
    }

    /// Keeps the entries through `index` and cuts the rest from the file, durably. The caller
    /// removes a segment that would be left empty instead.
    pub(super) fn truncate_after(&mut self, index: u64) -> Result<(), StorageFailure> {
        assert!(index >= self.first_index, "truncating a segment to nothing");
        let keep = (index + 1 - self.first_index) as usize;
        if keep >= self.offsets.len() {
            return Ok(());
        }
        let new_end = self.offsets[keep];
        self.faults
            .set_len(&self.file, &self.path, new_end)
            .map_err(io_error(&self.path))?;
        self.faults
            .sync(&self.file, &self.path)
            .map_err(io_error(&self.path))?;
        self.offsets.truncate(keep);
        self.end = new_end;
        self.allocated = new_end;
        Ok(())
    }

    fn corrupt(&self, detail: String) -> StorageFailure {
        StorageFailure::Corrupt {
            file: self.path.clone(),
            detail,
        }
    }
}

fn damaged(detail: String) -> ScanEnd {
    ScanEnd::Damaged { detail }
}

/// Fills as much of `buffer` as the reader has; returns how much that was.
fn read_fully(reader: &mut impl Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}
