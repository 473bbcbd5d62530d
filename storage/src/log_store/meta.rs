//! The raft log's metadata file: the vote, the committed id and the last purged id, in two slots.
//!
//! Every change rewrites the whole `LogMeta` record into a slot, with a sequence number and a
//! checksum (the layout is in `codec.rs`). A write never touches the slot that holds the last
//! *durable* state: it goes to the other slot, and a durable write (the vote, the purged id) makes
//! that slot the durable one only after its fsync. So a crash at any point leaves at least the
//! last durable state readable, and a torn slot is recognised by its checksum and ignored. The
//! committed id is written without an fsync, as the raft layer allows: losing it only makes a
//! restarted member re-apply fewer entries before the leader tells it the rest.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::codec::{self, LogMeta};
use crate::disk_faults::DiskFaults;
use crate::error::{io_error, StorageFailure};

/// Bytes per slot: far more than a vote and two log ids need.
const SLOT_BYTES: u64 = 4096;

/// The size of the metadata file: two slots.
pub(super) const FILE_BYTES: u64 = 2 * SLOT_BYTES;

/// The open metadata file and what it holds.
pub(super) struct MetaFile {
    file: File,
    path: PathBuf,
    current: LogMeta,
    sequence: u64,
    /// The slot (0 or 1) that holds the last state written with an fsync.
    durable_slot: u64,
    /// Every write and fsync goes through these switches.
    faults: DiskFaults,
}

impl MetaFile {
    /// Creates the file with an empty state, durably.
    pub(super) fn create(path: &Path, faults: &DiskFaults) -> Result<Self, StorageFailure> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io_error(path))?;
        let mut meta = MetaFile {
            file,
            path: path.to_path_buf(),
            current: LogMeta::default(),
            sequence: 0,
            durable_slot: 1,
            faults: faults.clone(),
        };
        meta.write(LogMeta::default(), true)?;
        Ok(meta)
    }

    /// Opens the file and reads the newest intact slot.
    pub(super) fn open(path: &Path, faults: &DiskFaults) -> Result<Self, StorageFailure> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_error(path))?;
        let mut best: Option<(u64, u64, LogMeta)> = None;
        for slot in 0..2 {
            let mut bytes = vec![0u8; SLOT_BYTES as usize];
            let read = read_up_to(&file, &mut bytes, slot * SLOT_BYTES).map_err(io_error(path))?;
            bytes.truncate(read);
            if let Ok((sequence, meta)) = codec::decode_log_meta_slot(&bytes) {
                if best
                    .as_ref()
                    .is_none_or(|(best_sequence, _, _)| sequence > *best_sequence)
                {
                    best = Some((sequence, slot, meta));
                }
            }
        }
        let (sequence, slot, current) = best.ok_or_else(|| StorageFailure::Corrupt {
            file: path.to_path_buf(),
            detail: "neither metadata slot is intact".into(),
        })?;
        // The newest intact slot may hold a state written without an fsync (still only in the
        // page cache after a clean stop). Sync it before calling it durable, because the next
        // write goes to the other slot.
        faults.sync(&file, path).map_err(io_error(path))?;
        Ok(MetaFile {
            file,
            path: path.to_path_buf(),
            current,
            sequence,
            durable_slot: slot,
            faults: faults.clone(),
        })
    }

    /// The file, for locking.
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    pub(super) fn current(&self) -> &LogMeta {
        &self.current
    }

    /// Replaces the state; with `durable`, returns only after it is on stable storage.
    pub(super) fn write(&mut self, meta: LogMeta, durable: bool) -> Result<(), StorageFailure> {
        let sequence = self.sequence + 1;
        let slot_bytes = codec::encode_log_meta_slot(sequence, &meta).map_err(|error| {
            StorageFailure::Invariant(format!("log metadata does not encode: {error}"))
        })?;
        assert!(
            slot_bytes.len() as u64 <= SLOT_BYTES,
            "a log metadata record of {} bytes does not fit its slot",
            slot_bytes.len()
        );
        let slot = 1 - self.durable_slot;
        self.faults
            .write_at(&self.file, &self.path, &slot_bytes, slot * SLOT_BYTES)
            .map_err(io_error(&self.path))?;
        if durable {
            self.faults
                .sync(&self.file, &self.path)
                .map_err(io_error(&self.path))?;
            self.durable_slot = slot;
        }
        self.sequence = sequence;
        self.current = meta;
        Ok(())
    }
}

/// Reads as much as the file holds at `offset`, up to the buffer's length.
fn read_up_to(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], offset + filled as u64)? {
            0 => break,
            read => filled += read,
        }
    }
    Ok(filled)
}
