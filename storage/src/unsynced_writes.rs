//! What a power cut would take from each file: the changes made since its last fsync.
//!
//! A deterministic simulation (issue 37) must crash a member the way a machine loses power: every
//! change that reached a file after its last fsync may or may not be on the disk afterwards, and
//! the last one may be torn. The page cache keeps them for a real process killed by a signal, so
//! only a simulation can show what revkv does when they are lost. When a simulation asks for it
//! (`DiskFaults::keep_unsynced_writes`), every write and length change of a file is recorded here
//! with the bytes it replaced, until the file's next fsync forgets them. `crash` then undoes, per
//! file, every change after a drawn point, newest first, and may leave the first undone write
//! half on the disk (a drawn subset of its 512-byte sectors), as a disk that had written some of
//! its sectors would.
//!
//! Modelled: lost and torn data writes and length changes of each file on its own (files are
//! synced independently, so a crash may keep a later change of one file and lose an earlier one
//! of another). Not modelled: directory entries (a created or removed file is durable at once; the
//! log store syncs its directory after both anyway), and reordering of the changes within one
//! file (a kept change implies every earlier one is kept).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The most bytes the record may hold across every file: far above what a simulated member writes
/// between two fsyncs (its state file syncs at least every durable-commit interval), so reaching it
/// means a file is never synced, which is a bug worth stopping for.
const MAX_RECORDED_BYTES: usize = 1 << 30;

/// The unit a torn write keeps or loses: a disk writes whole sectors.
const SECTOR_BYTES: usize = 512;

/// One change to a file since its last fsync, with what it replaced.
enum Change {
    Write {
        offset: u64,
        written: Vec<u8>,
        /// The bytes the write covered that the file already had (the part before its old end).
        replaced: Vec<u8>,
        length_before: u64,
    },
    SetLength {
        length_before: u64,
        /// The bytes a shortening cut off; empty when the file grew.
        cut: Vec<u8>,
    },
}

impl Change {
    fn bytes(&self) -> usize {
        match self {
            Change::Write {
                written, replaced, ..
            } => written.len() + replaced.len(),
            Change::SetLength { cut, .. } => cut.len(),
        }
    }
}

/// How a file reads back what it holds now, to record what a change replaces.
pub(crate) trait ReadBack {
    fn current_length(&self) -> io::Result<u64>;
    fn read_exactly_at(&self, offset: u64, into: &mut [u8]) -> io::Result<()>;
}

impl ReadBack for std::fs::File {
    fn current_length(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_exactly_at(&self, offset: u64, into: &mut [u8]) -> io::Result<()> {
        self.read_exact_at(into, offset)
    }
}

impl ReadBack for redb::backends::FileBackend {
    fn current_length(&self) -> io::Result<u64> {
        redb::StorageBackend::len(self)
    }

    fn read_exactly_at(&self, offset: u64, into: &mut [u8]) -> io::Result<()> {
        redb::StorageBackend::read(self, offset, into)
    }
}

/// What a crash did to one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashLoss {
    pub file: PathBuf,
    /// Changes made since the file's last fsync.
    pub unsynced: usize,
    /// How many of them (the oldest) survived whole.
    pub kept: usize,
    /// Sectors of the first lost write that reached the disk anyway, out of its sectors.
    pub torn_sectors: Option<(usize, usize)>,
}

/// The changes of every file since its last fsync. See the module's comment.
#[derive(Default)]
pub(crate) struct UnsyncedWrites {
    files: BTreeMap<PathBuf, Vec<Change>>,
    bytes: usize,
}

impl UnsyncedWrites {
    /// Records that `data` is about to be written at `offset` of `file`.
    pub(crate) fn before_write(
        &mut self,
        path: &Path,
        file: &impl ReadBack,
        offset: u64,
        data: &[u8],
    ) -> io::Result<()> {
        let length_before = file.current_length()?;
        let overlap_end = (offset + data.len() as u64).min(length_before);
        let mut replaced = vec![0u8; overlap_end.saturating_sub(offset) as usize];
        if !replaced.is_empty() {
            file.read_exactly_at(offset, &mut replaced)?;
        }
        self.push(
            path,
            Change::Write {
                offset,
                written: data.to_vec(),
                replaced,
                length_before,
            },
        );
        Ok(())
    }

    /// Records that `file`'s length is about to become `length`.
    pub(crate) fn before_set_length(
        &mut self,
        path: &Path,
        file: &impl ReadBack,
        length: u64,
    ) -> io::Result<()> {
        let length_before = file.current_length()?;
        let mut cut = vec![0u8; length_before.saturating_sub(length) as usize];
        if !cut.is_empty() {
            file.read_exactly_at(length, &mut cut)?;
        }
        self.push(path, Change::SetLength { length_before, cut });
        Ok(())
    }

    fn push(&mut self, path: &Path, change: Change) {
        self.bytes += change.bytes();
        assert!(
            self.bytes <= MAX_RECORDED_BYTES,
            "over {MAX_RECORDED_BYTES} bytes written without an fsync: a file is never synced"
        );
        self.files
            .entry(path.to_path_buf())
            .or_default()
            .push(change);
    }

    /// `path` was synced (or removed): nothing of it can be lost any more.
    pub(crate) fn forget(&mut self, path: &Path) {
        if let Some(changes) = self.files.remove(path) {
            self.bytes -= changes.iter().map(Change::bytes).sum::<usize>();
        }
    }

    /// Loses what a power cut would: for each file, every change after a drawn number of kept
    /// ones, the first lost write possibly torn. `draw(n)` answers a number in `0..n`. The files
    /// must not be open for writing by anyone else.
    pub(crate) fn crash(&mut self, draw: &mut dyn FnMut(u64) -> u64) -> io::Result<Vec<CrashLoss>> {
        let files = std::mem::take(&mut self.files);
        self.bytes = 0;
        let mut losses = Vec::new();
        for (path, changes) in files {
            let kept = draw(changes.len() as u64 + 1) as usize;
            let file = match OpenOptions::new().write(true).open(&path) {
                Ok(file) => file,
                // Removed since: a removal is durable at once (see the module's comment).
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            for change in changes[kept..].iter().rev() {
                undo(&file, change)?;
            }
            let torn_sectors = match changes.get(kept) {
                Some(Change::Write {
                    offset, written, ..
                }) if draw(2) == 1 => Some(tear(&file, *offset, written, draw)?),
                _ => None,
            };
            losses.push(CrashLoss {
                file: path,
                unsynced: changes.len(),
                kept,
                torn_sectors,
            });
        }
        Ok(losses)
    }
}

/// Puts back what `change` replaced. Changes are undone newest first, so the file is exactly as
/// `change` left it.
fn undo(file: &std::fs::File, change: &Change) -> io::Result<()> {
    match change {
        Change::Write {
            offset,
            written,
            replaced,
            length_before,
        } => {
            file.write_all_at(replaced, *offset)?;
            if offset + written.len() as u64 > *length_before {
                file.set_len(*length_before)?;
            }
        }
        Change::SetLength { length_before, cut } => {
            let shortened_to = length_before - cut.len() as u64;
            file.set_len(*length_before)?;
            file.write_all_at(cut, shortened_to)?;
        }
    }
    Ok(())
}

/// Writes a drawn subset of `written`'s sectors at their places: the part of a torn write that
/// reached the disk. Answers how many sectors, of how many.
fn tear(
    file: &std::fs::File,
    offset: u64,
    written: &[u8],
    draw: &mut dyn FnMut(u64) -> u64,
) -> io::Result<(usize, usize)> {
    let sectors: Vec<&[u8]> = written.chunks(SECTOR_BYTES).collect();
    let mut reached = 0;
    for (index, sector) in sectors.iter().enumerate() {
        if draw(2) == 1 {
            file.write_all_at(sector, offset + (index * SECTOR_BYTES) as u64)?;
            reached += 1;
        }
    }
    Ok((reached, sectors.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded_write(
        record: &mut UnsyncedWrites,
        path: &Path,
        file: &std::fs::File,
        offset: u64,
        data: &[u8],
    ) {
        record.before_write(path, file, offset, data).unwrap();
        file.write_all_at(data, offset).unwrap();
    }

    fn setup() -> (tempfile::TempDir, PathBuf, std::fs::File) {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("file");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all_at(b"synced!", 0).unwrap();
        (directory, path, file)
    }

    #[test]
    fn a_crash_that_keeps_nothing_leaves_the_file_as_last_synced() {
        let (_directory, path, file) = setup();
        let mut record = UnsyncedWrites::default();
        recorded_write(&mut record, &path, &file, 3, b"XXXXXXXXXX");
        record.before_set_length(&path, &file, 2).unwrap();
        file.set_len(2).unwrap();
        recorded_write(&mut record, &path, &file, 100, b"far");
        let losses = record.crash(&mut |_| 0).unwrap();
        assert_eq!(losses[0].unsynced, 3);
        assert_eq!(losses[0].kept, 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"synced!");
    }

    #[test]
    fn a_crash_keeps_the_drawn_prefix_of_changes() {
        let (_directory, path, file) = setup();
        let mut record = UnsyncedWrites::default();
        recorded_write(&mut record, &path, &file, 7, b" one");
        recorded_write(&mut record, &path, &file, 11, b" two");
        // Keep one change of two, and do not tear the second.
        let mut draws = vec![1, 0].into_iter();
        record.crash(&mut |_| draws.next().unwrap()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"synced! one");
    }

    #[test]
    fn a_synced_file_loses_nothing() {
        let (_directory, path, file) = setup();
        let mut record = UnsyncedWrites::default();
        recorded_write(&mut record, &path, &file, 0, b"SYNCED");
        record.forget(&path);
        assert!(record.crash(&mut |_| 0).unwrap().is_empty());
        assert_eq!(std::fs::read(&path).unwrap(), b"SYNCED!");
    }

    #[test]
    fn a_torn_write_keeps_only_the_drawn_sectors() {
        let (_directory, path, file) = setup();
        let mut record = UnsyncedWrites::default();
        let written = vec![7u8; 3 * SECTOR_BYTES];
        recorded_write(&mut record, &path, &file, 0, &written);
        // Keep no change whole, tear the write, and let only its middle sector through.
        let mut draws = vec![0, 1, 0, 1, 0].into_iter();
        let losses = record.crash(&mut |_| draws.next().unwrap()).unwrap();
        assert_eq!(losses[0].torn_sectors, Some((1, 3)));
        let contents = std::fs::read(&path).unwrap();
        assert_eq!(contents.len(), 2 * SECTOR_BYTES);
        assert_eq!(&contents[..7], b"synced!");
        assert!(contents[7..SECTOR_BYTES].iter().all(|byte| *byte == 0));
        assert!(contents[SECTOR_BYTES..].iter().all(|byte| *byte == 7));
    }
}
