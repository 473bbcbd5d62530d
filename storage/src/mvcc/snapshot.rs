//! Consistent snapshots: export the whole state as a frame stream, and import one atomically.
//!
//! The stream is a header (revisions, applied log id, membership), every history entry not yet
//! compacted in (revision, position) order, every granted lease in id order, and a trailer with the
//! count of records and leases and an xxh3 checksum of every byte before it. The key index is
//! rebuilt from the history on import (compaction never removes a live key's current version, so
//! the history holds all of them), and the lease attachments from the live keys' `lease` fields.

use std::io::{Read, Write};

use redb::{Durability, ReadableTable};
use xxhash_rust::xxh3::Xxh3;

use crate::codec::{
    self, LeaseRecord, SnapshotFrame, SnapshotHeader, VersionRecord, SNAPSHOT_MAGIC,
};
use crate::error::{corrupt, db_error, Error, Result};
use crate::file::META;
use crate::mvcc::leases::{open_write_lease_tables, WriteLeaseTables};
use crate::mvcc::tables::{
    save_state, StoreState, WriteTables, HISTORY, KEY_INDEX, LEASES, LEASE_KEYS,
};
use crate::mvcc::{open_write_tables, MvccStore};
use crate::types::AppliedState;

/// What a snapshot holds, as reported after export or import.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotSummary {
    pub current_revision: u64,
    pub compact_revision: u64,
    pub applied: AppliedState,
    pub records: u64,
}

impl MvccStore {
    /// Writes a consistent snapshot of the whole store (one read transaction) to `writer`.
    pub fn export_snapshot<W: Write>(&self, writer: &mut W) -> Result<SnapshotSummary> {
        let (tables, leases, state) = self.read_tables_with_leases()?;
        let file = tables.file;
        let mut writer = HashingWriter {
            inner: writer,
            hasher: Xxh3::new(),
        };
        let header = SnapshotFrame::Header(SnapshotHeader {
            magic: SNAPSHOT_MAGIC.into(),
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            applied: state.applied.clone(),
        });
        write_frame(&mut writer, &header)?;
        let mut records = 0u64;
        for entry in tables.history.iter().map_err(db_error(file))? {
            let (key, bytes) = entry.map_err(db_error(file))?;
            let (revision, position) = key.value();
            let record: VersionRecord = codec::decode(bytes.value()).map_err(corrupt(file))?;
            let frame = SnapshotFrame::Record {
                revision,
                position,
                record,
            };
            write_frame(&mut writer, &frame)?;
            records += 1;
        }
        for (id, lease) in leases.all_records(u64::MAX)? {
            let frame = SnapshotFrame::LeaseState {
                id,
                ttl_seconds: lease.ttl_seconds,
                checkpointed_remaining_ms: lease.checkpointed_remaining_ms,
                renewed_at_index: lease.renewed_at_index,
            };
            write_frame(&mut writer, &frame)?;
            records += 1;
        }
        let checksum = writer.hasher.digest();
        write_frame(
            writer.inner,
            &SnapshotFrame::Trailer {
                record_count: records,
                checksum,
            },
        )?;
        Ok(SnapshotSummary {
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            applied: state.applied,
            records,
        })
    }

    /// Replaces the whole state with the snapshot read from `reader`, in one durable transaction:
    /// a malformed, truncated or corrupt stream changes nothing.
    pub fn import_snapshot<R: Read>(&self, reader: &mut R) -> Result<SnapshotSummary> {
        let file = self.path().to_path_buf();
        let mut write = self.database().begin_write().map_err(db_error(&file))?;
        write
            .set_durability(Durability::Immediate)
            .map_err(db_error(&file))?;
        write.delete_table(HISTORY).map_err(db_error(&file))?;
        write.delete_table(KEY_INDEX).map_err(db_error(&file))?;
        write.delete_table(LEASES).map_err(db_error(&file))?;
        write.delete_table(LEASE_KEYS).map_err(db_error(&file))?;
        let summary = {
            let mut tables = open_write_tables(&write, &file)?;
            let mut leases = open_write_lease_tables(&write, &file)?;
            let mut reader = HashingReader {
                inner: reader,
                hasher: Xxh3::new(),
            };
            let summary = load_frames(&mut tables, &mut leases, &mut reader)?;
            let live_keys = attach_live_keys(&tables, &mut leases, summary.current_revision)?;
            let mut meta = write.open_table(META).map_err(db_error(&file))?;
            let state = StoreState {
                current_revision: summary.current_revision,
                compact_revision: summary.compact_revision,
                applied: summary.applied.clone(),
                live_keys,
            };
            save_state(&mut meta, &file, &state)?;
            summary
        };
        write.commit().map_err(db_error(&file))?;
        self.record_commit(Durability::Immediate, summary.applied.last_applied);
        Ok(summary)
    }
}

fn bad(detail: impl Into<String>) -> Error {
    Error::BadSnapshot(detail.into())
}

fn write_frame<W: Write>(writer: &mut W, frame: &SnapshotFrame) -> Result<()> {
    codec::write_frame(writer, frame).map_err(|error| match error {
        codec::CodecError::Io(io) => Error::SnapshotIo(io),
        other => bad(other.to_string()),
    })
}

fn read_frame<R: Read>(reader: &mut R) -> Result<Option<SnapshotFrame>> {
    codec::read_frame(reader).map_err(|error| bad(error.to_string()))
}

/// Counts the live keys at `revision` and attaches each one that carries a granted lease to it.
/// A key whose lease is not granted was written before leases were enforced (layout 3) and stays
/// unattached, as it was in the exported store.
fn attach_live_keys(
    tables: &WriteTables<'_, '_>,
    leases: &mut WriteLeaseTables<'_, '_>,
    revision: u64,
) -> Result<u64> {
    let mut live_keys = 0u64;
    let mut to_attach: Vec<(i64, Vec<u8>)> = Vec::new();
    tables.visit_live_at(&[], None, revision, &mut |key, entry| {
        live_keys += 1;
        if entry.lease != 0 {
            to_attach.push((entry.lease, key.to_vec()));
        }
        Ok(true)
    })?;
    for (lease, key) in to_attach {
        if leases.record(lease)?.is_some() {
            leases.attach(lease, &key)?;
        }
    }
    Ok(live_keys)
}

/// Reads the header, every record, every lease and the trailer, writing them into the (empty)
/// tables.
fn load_frames<R: Read>(
    tables: &mut WriteTables<'_, '_>,
    leases: &mut WriteLeaseTables<'_, '_>,
    reader: &mut HashingReader<R>,
) -> Result<SnapshotSummary> {
    let header = match read_frame(reader)? {
        Some(SnapshotFrame::Header(header)) if header.magic == SNAPSHOT_MAGIC => header,
        Some(_) => {
            return Err(bad(
                "the stream does not start with a revkv snapshot header",
            ))
        }
        None => return Err(bad("empty stream")),
    };
    let mut records = 0u64;
    let mut last_position: Option<(u64, u32)> = None;
    let mut last_lease: Option<i64> = None;
    loop {
        let checksum_so_far = reader.hasher.digest();
        match read_frame(reader)? {
            None => return Err(bad("the stream ended before its trailer")),
            Some(SnapshotFrame::Header(_)) => return Err(bad("a second header")),
            Some(SnapshotFrame::Record {
                revision,
                position,
                record,
            }) => {
                let at = (revision, position);
                if last_lease.is_some()
                    || last_position.is_some_and(|last| at <= last)
                    || revision > header.current_revision
                {
                    return Err(bad(format!("record {revision}/{position} is out of order")));
                }
                last_position = Some(at);
                insert_record(tables, revision, position, record)?;
                records += 1;
            }
            Some(SnapshotFrame::Lease { id, ttl_seconds }) => {
                // A stream written before checkpoints: the lease has none.
                let record = imported_lease(ttl_seconds, None, 0);
                load_lease(leases, &mut last_lease, id, record)?;
                records += 1;
            }
            Some(SnapshotFrame::LeaseState {
                id,
                ttl_seconds,
                checkpointed_remaining_ms,
                renewed_at_index,
            }) => {
                let record =
                    imported_lease(ttl_seconds, checkpointed_remaining_ms, renewed_at_index);
                load_lease(leases, &mut last_lease, id, record)?;
                records += 1;
            }
            Some(SnapshotFrame::Trailer {
                record_count,
                checksum,
            }) => {
                if record_count != records || checksum != checksum_so_far {
                    return Err(bad("the trailer's count or checksum does not match"));
                }
                break;
            }
        }
    }
    if read_frame(reader)?.is_some() {
        return Err(bad("data after the trailer"));
    }
    Ok(SnapshotSummary {
        current_revision: header.current_revision,
        compact_revision: header.compact_revision,
        applied: header.applied,
        records,
    })
}

fn insert_record(
    tables: &mut WriteTables<'_, '_>,
    revision: u64,
    position: u32,
    record: VersionRecord,
) -> Result<()> {
    if record.key.is_empty() {
        return Err(bad("a record with an empty key"));
    }
    tables.insert_version(revision, position, &record)
}

/// A writer that hashes every byte it passes on.
struct HashingWriter<'w, W: Write> {
    inner: &'w mut W,
    hasher: Xxh3,
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes every byte it hands out.
struct HashingReader<'r, R: Read> {
    inner: &'r mut R,
    hasher: Xxh3,
}

impl<R: Read> Read for HashingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        Ok(read)
    }
}

/// A lease as a snapshot carries it; its keys are counted when `lease_keys` is rebuilt.
fn imported_lease(
    ttl_seconds: i64,
    checkpointed_remaining_ms: Option<u64>,
    renewed_at_index: u64,
) -> LeaseRecord {
    LeaseRecord {
        ttl_seconds,
        attached_keys: 0,
        checkpointed_remaining_ms,
        renewed_at_index,
    }
}

/// Writes one imported lease, after checking it comes after the previous one in id order.
fn load_lease(
    leases: &mut WriteLeaseTables<'_, '_>,
    last_lease: &mut Option<i64>,
    id: i64,
    record: LeaseRecord,
) -> Result<()> {
    if id <= 0 || record.ttl_seconds < 1 || last_lease.is_some_and(|last| id <= last) {
        return Err(bad(format!("lease {id} is out of order or malformed")));
    }
    *last_lease = Some(id);
    leases.save(id, &record)
}
