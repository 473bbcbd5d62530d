//! Consistent snapshots: export the whole state as a frame stream, and import one atomically.
//!
//! The stream is a header (stream version, revisions, applied log id, membership, live-key count,
//! the member that wrote it and its cluster id), every history entry not yet compacted in
//! (revision, position) order, every granted lease in id order, and a trailer with the count of
//! records and leases and an xxh3 checksum of every byte before it. The same stream serves raft
//! snapshots and backups (`GET /v1/snapshot`). Export reads one redb read transaction, so it is
//! one consistent revision and never blocks writers, and it writes frame by frame into any
//! `Write`, so the caller decides where the bytes go (a bounded channel, a file) and nothing holds
//! the whole stream. The key index is rebuilt from the history on import (compaction never removes
//! a live key's current version, so the history holds all of them), and the lease attachments
//! from the live keys' `lease` fields. Reading and checking the frames is `snapshot_frames.rs`.

use std::io::{Read, Write};

use redb::{Durability, ReadableTable};
use xxhash_rust::xxh3::Xxh3;

use crate::auth::AuthState;
use crate::codec::{
    self, LeaseRecord, SnapshotFrame, StreamHeader, VersionRecord, SNAPSHOT_MAGIC, STREAM_VERSION,
};
use crate::error::{corrupt, db_error, ReadError, SnapshotError, StorageFailure};
use crate::file::META;
use crate::mvcc::alarms::save_alarms;
use crate::mvcc::auth_record::save_auth;
use crate::mvcc::compact::{save_pending, PendingCompaction};
use crate::mvcc::key_index::SharedKeyIndex;
use crate::mvcc::learner_promotions::save_promotions;
use crate::mvcc::leases::{open_write_lease_tables, ReadLeaseTables, WriteLeaseTables};
use crate::mvcc::snapshot_frames::{
    bad, read_foreign, read_stream, Counting, ForeignHistory, FrameFeed, FrameSink, ImportProgress,
    SnapshotSummary,
};
use crate::mvcc::tables::open_write_tables;
use crate::mvcc::tables::{
    save_cluster_id, save_state, ReadTables, StoreState, WriteTables, HISTORY, LEASES, LEASE_KEYS,
};
use crate::mvcc::MvccStore;
use crate::types::{Alarm, AppliedState, LearnerPromotion};

/// What an export reads from the meta table besides the state record, in the same transaction.
pub(crate) struct ExportMeta {
    pub cluster_id: Option<u64>,
    pub alarms: Vec<Alarm>,
    pub auth: AuthState,
    pub promotions: Vec<LearnerPromotion>,
}

/// What a restore puts in place of the stream's own raft position: the new cluster's membership
/// at a log id of its own, and the new cluster's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreTarget {
    pub applied: AppliedState,
    pub cluster_id: u64,
}

impl RestoreTarget {
    /// The target for restoring `backup` into a new cluster whose membership (as the raft layer
    /// encoded it) is applied at `membership_log_id`. The new cluster id is derived from the
    /// backup's cluster id and checksum and the new membership: every member restored from one
    /// file with one membership gets the same id without talking to the others, and it differs
    /// from the source cluster's, as etcd's restore gives a new cluster id.
    pub fn new(
        backup: &SnapshotSummary,
        membership: Vec<u8>,
        membership_log_id: crate::types::LogId,
    ) -> Self {
        let mut hasher = Xxh3::new();
        hasher.update(b"revkv-restored-cluster");
        hasher.update(&backup.cluster_id.unwrap_or_default().to_le_bytes());
        hasher.update(&backup.checksum.to_le_bytes());
        hasher.update(&membership);
        RestoreTarget {
            applied: AppliedState {
                last_applied: Some(membership_log_id),
                membership: Some(membership),
            },
            cluster_id: hasher.digest(),
        }
    }
}

impl MvccStore {
    /// Writes a consistent snapshot of the whole store (one read transaction) to `writer`, as a
    /// stream no member wrote (tests and the raft layer's older callers).
    pub fn export_snapshot<W: Write>(
        &self,
        writer: &mut W,
    ) -> Result<SnapshotSummary, SnapshotError> {
        self.export_stream(None, writer)
    }

    /// Writes a consistent snapshot of the whole store (one read transaction) to `writer`, frame
    /// by frame, naming `member_id` as its writer. Writers are never blocked: redb readers see the
    /// state of their transaction's start while later commits go on.
    pub fn export_stream<W: Write>(
        &self,
        member_id: Option<u64>,
        writer: &mut W,
    ) -> Result<SnapshotSummary, SnapshotError> {
        let mut writer = HashingWriter {
            inner: writer,
            hasher: Xxh3::new(),
        };
        let mut summary =
            self.export_frames(member_id, &mut |frame| write_frame(&mut writer, frame))?;
        let checksum = writer.hasher.digest();
        let trailer = SnapshotFrame::Trailer {
            record_count: summary.records,
            checksum,
        };
        write_frame(writer.inner, &trailer)?;
        writer.inner.flush()?;
        summary.checksum = checksum;
        Ok(summary)
    }

    /// Hands a consistent snapshot of the whole store (one read transaction) to `emit`, frame by
    /// frame: the header, every history record, every lease, the alarms and the auth records,
    /// as a stream carries them but without its trailer. For writers of other formats (etcd's,
    /// `revkv-etcd-snapshot`); the summary's checksum is 0.
    pub fn export_frames<E: From<SnapshotError> + From<StorageFailure>>(
        &self,
        member_id: Option<u64>,
        emit: &mut dyn FnMut(&SnapshotFrame) -> std::result::Result<(), E>,
    ) -> std::result::Result<SnapshotSummary, E> {
        let (tables, leases, state, export_meta) = self.read_for_export()?;
        let ExportMeta {
            cluster_id,
            alarms,
            auth,
            promotions,
        } = export_meta;
        emit(&SnapshotFrame::StreamHeader(StreamHeader {
            magic: SNAPSHOT_MAGIC.into(),
            stream_version: STREAM_VERSION,
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            applied: state.applied.clone(),
            live_keys: state.live_keys,
            member_id,
            cluster_id,
        }))?;
        let records = emit_history_frames(emit, &tables)?
            + emit_lease_frames(emit, &leases)?
            + emit_cluster_state_frames(emit, alarms, auth, promotions)?;
        Ok(SnapshotSummary {
            stream_version: STREAM_VERSION,
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            applied: state.applied,
            records,
            live_keys: Some(state.live_keys),
            member_id,
            cluster_id,
            checksum: 0,
        })
    }

    /// Replaces the whole state with the snapshot read from `reader`, in one durable transaction:
    /// a malformed, truncated or corrupt stream changes nothing. The applied log id, membership
    /// and cluster id are the stream's (a raft snapshot from this cluster's leader).
    pub fn import_snapshot<R: Read>(
        &self,
        reader: &mut R,
    ) -> Result<SnapshotSummary, SnapshotError> {
        self.import_with(None, |sink| read_stream(reader, sink))
    }

    /// Replaces the whole state with a backup read from `reader` for a new cluster: the history
    /// and leases are the backup's, the applied log id, membership and cluster id are `target`'s.
    /// One durable transaction, so a bad stream changes nothing. Each record is counted into
    /// `progress` as it is written.
    pub fn import_for_restore<R: Read>(
        &self,
        reader: &mut R,
        target: &RestoreTarget,
        progress: &ImportProgress,
    ) -> Result<SnapshotSummary, SnapshotError> {
        self.import_with(Some(target), |sink| {
            read_stream(reader, &mut Counting { sink, progress })
        })
    }

    /// Replaces the whole state with a history from outside revkv (an etcd snapshot) for a new
    /// cluster: `feed` hands over its frames, which pass the same checks as a stream's. One
    /// durable transaction, so a bad history changes nothing.
    pub fn import_foreign_for_restore<E: From<SnapshotError> + From<StorageFailure>>(
        &self,
        history: ForeignHistory,
        feed: impl FnOnce(&mut FrameFeed<'_>) -> std::result::Result<(), E>,
        target: &RestoreTarget,
    ) -> std::result::Result<SnapshotSummary, E> {
        self.import_with(Some(target), |sink| read_foreign(history, feed, sink))
    }

    /// Empties the tables, lets `read` fill them through the sink, then saves the state, alarms,
    /// auth and pending compaction and swaps the key index, all in one write transaction.
    fn import_with<E: From<SnapshotError> + From<StorageFailure>>(
        &self,
        target: Option<&RestoreTarget>,
        read: impl FnOnce(&mut TableSink<'_, '_, '_>) -> std::result::Result<SnapshotSummary, E>,
    ) -> std::result::Result<SnapshotSummary, E> {
        let file = self.path().to_path_buf();
        let mut write = self.database().begin_write().map_err(db_error(&file))?;
        write
            .set_durability(Durability::Immediate)
            .map_err(db_error(&file))?;
        write.delete_table(HISTORY).map_err(db_error(&file))?;
        write.delete_table(LEASES).map_err(db_error(&file))?;
        write.delete_table(LEASE_KEYS).map_err(db_error(&file))?;
        // The imported versions are indexed apart from the live index, which readers keep using
        // until the import is complete; it is swapped in just before the commit (`key_index.rs`).
        let imported_index = SharedKeyIndex::default();
        let summary = {
            let mut tables = open_write_tables(&write, &file, &imported_index)?;
            let mut leases = open_write_lease_tables(&write, &file)?;
            let mut sink = TableSink {
                tables: &mut tables,
                leases: &mut leases,
                alarms: Vec::new(),
                auth: AuthState::default(),
                promotions: Vec::new(),
            };
            let mut summary = read(&mut sink)?;
            // A restore starts a new cluster, whose members the old alarms do not name.
            let alarms = match target {
                Some(_) => Vec::new(),
                None => std::mem::take(&mut sink.alarms),
            };
            let auth = std::mem::take(&mut sink.auth);
            // The same for the learners waiting to be promoted: they name the old members.
            let promotions = match target {
                Some(_) => Vec::new(),
                None => std::mem::take(&mut sink.promotions),
            };
            let live_keys = attach_live_keys(&tables, &mut leases, summary.current_revision)?;
            check_announced_live_keys(&summary, live_keys)?;
            summary.live_keys = Some(live_keys);
            if let Some(target) = target {
                summary.applied = target.applied.clone();
                summary.cluster_id = Some(target.cluster_id);
            }
            let mut meta = write.open_table(META).map_err(db_error(&file))?;
            save_imported_meta(&mut meta, &file, &summary, &alarms, &auth)?;
            save_promotions(&mut meta, &file, &promotions)?;
            summary
        };
        let mut imported_index = imported_index.into_inner();
        imported_index.raise_compact_revision(summary.compact_revision);
        self.key_index.replace(imported_index);
        // The imported index is already in place: a failed commit must put the file's back.
        write
            .commit()
            .map_err(|error| self.rebuild_key_index_after(db_error(&file)(error)))?;
        self.record_commit(Durability::Immediate, summary.applied.last_applied);
        self.reload_auth()?;
        self.reload_compaction_pending()?;
        self.reload_cluster_id()?;
        Ok(summary)
    }
}

/// Import's sink: every record and lease goes into the (emptied) tables of the write transaction.
struct TableSink<'s, 'f, 't> {
    tables: &'s mut WriteTables<'f, 't>,
    leases: &'s mut WriteLeaseTables<'f, 't>,
    /// Kept until the stream has been read whole; the caller decides whether they are saved.
    alarms: Vec<Alarm>,
    /// Kept until the stream has been read whole, then saved.
    auth: AuthState,
    /// Kept until the stream has been read whole; the caller decides whether they are saved.
    promotions: Vec<LearnerPromotion>,
}

impl FrameSink for TableSink<'_, '_, '_> {
    fn record(
        &mut self,
        revision: u64,
        position: u32,
        record: VersionRecord,
    ) -> Result<(), SnapshotError> {
        Ok(self.tables.insert_version(revision, position, &record)?)
    }

    fn lease(&mut self, id: i64, record: LeaseRecord) -> Result<(), SnapshotError> {
        Ok(self.leases.save(id, &record)?)
    }

    fn alarms(&mut self, alarms: Vec<Alarm>) -> Result<(), SnapshotError> {
        self.alarms = alarms;
        Ok(())
    }

    fn auth(&mut self, auth: AuthState) -> Result<(), SnapshotError> {
        self.auth = auth;
        Ok(())
    }

    fn learner_promotions(
        &mut self,
        promotions: Vec<LearnerPromotion>,
    ) -> Result<(), SnapshotError> {
        self.promotions = promotions;
        Ok(())
    }
}

/// Hands over every history entry not yet compacted, in (revision, position) order, and returns
/// how many it handed over.
fn emit_history_frames<E: From<SnapshotError> + From<StorageFailure>>(
    emit: &mut dyn FnMut(&SnapshotFrame) -> std::result::Result<(), E>,
    tables: &ReadTables<'_>,
) -> std::result::Result<u64, E> {
    let file = tables.file;
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
        emit(&frame)?;
        records += 1;
    }
    Ok(records)
}

/// Hands over every granted lease in id order and returns how many it handed over.
fn emit_lease_frames<E: From<SnapshotError> + From<StorageFailure>>(
    emit: &mut dyn FnMut(&SnapshotFrame) -> std::result::Result<(), E>,
    leases: &ReadLeaseTables<'_>,
) -> std::result::Result<u64, E> {
    let mut records = 0u64;
    for (id, lease) in leases.all_records(u64::MAX)? {
        let frame = SnapshotFrame::LeaseState {
            id,
            ttl_seconds: lease.ttl_seconds,
            checkpointed_remaining_ms: lease.checkpointed_remaining_ms,
            renewed_at_index: lease.renewed_at_index,
        };
        emit(&frame)?;
        records += 1;
    }
    Ok(records)
}

/// Hands over the alarms and the auth state, each only when it differs from a new store's, and
/// returns how many frames it handed over: a store that never used them exports the same stream
/// as before they existed.
fn emit_cluster_state_frames<E: From<SnapshotError> + From<StorageFailure>>(
    emit: &mut dyn FnMut(&SnapshotFrame) -> std::result::Result<(), E>,
    alarms: Vec<Alarm>,
    auth: AuthState,
    promotions: Vec<LearnerPromotion>,
) -> std::result::Result<u64, E> {
    let mut records = 0u64;
    if !alarms.is_empty() {
        emit(&SnapshotFrame::Alarms(alarms))?;
        records += 1;
    }
    if auth != AuthState::default() {
        emit(&SnapshotFrame::Auth(auth))?;
        records += 1;
    }
    if !promotions.is_empty() {
        emit(&SnapshotFrame::LearnerPromotions(promotions))?;
        records += 1;
    }
    Ok(records)
}

/// A stream whose header announces a live-key count must hold exactly that many live keys:
/// anything else means its writer and its history disagree.
fn check_announced_live_keys(
    summary: &SnapshotSummary,
    live_keys: u64,
) -> Result<(), SnapshotError> {
    match summary.live_keys {
        Some(announced) if announced != live_keys => Err(bad(format!(
            "the header announces {announced} live keys, the history holds {live_keys}"
        ))),
        _ => Ok(()),
    }
}

/// Saves an import's store state, alarms, auth, pending compaction and cluster id in the meta
/// table of the import's write transaction.
fn save_imported_meta(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &std::path::Path,
    summary: &SnapshotSummary,
    alarms: &[Alarm],
    auth: &AuthState,
) -> Result<(), StorageFailure> {
    let state = StoreState {
        current_revision: summary.current_revision,
        compact_revision: summary.compact_revision,
        applied: summary.applied.clone(),
        live_keys: summary.live_keys.unwrap_or_default(),
    };
    save_state(meta, file, &state)?;
    save_alarms(meta, file, alarms)?;
    // Users, roles and auth's state come along even into a new cluster, as etcd's restore keeps
    // its auth bucket: a restored cluster keeps out whoever the old one did.
    save_auth(meta, file, auth)?;
    // The stream may hold versions its writer had not cleaned yet (a pending compaction there);
    // cleaning the whole window here, in the background, removes them.
    let pending = (summary.compact_revision > 0).then_some(PendingCompaction {
        next: (0, 0),
        through_revision: summary.compact_revision,
    });
    save_pending(meta, file, pending.as_ref())?;
    if let Some(cluster_id) = summary.cluster_id {
        save_cluster_id(meta, file, cluster_id)?;
    }
    Ok(())
}

fn write_frame<W: Write>(writer: &mut W, frame: &SnapshotFrame) -> Result<(), SnapshotError> {
    codec::write_frame(writer, frame).map_err(|error| match error {
        codec::CodecError::Io(io) => SnapshotError::Io(io),
        other => bad(other.to_string()),
    })
}

/// Counts the live keys at `revision` and attaches each one that carries a granted lease to it.
/// A key whose lease is not granted was written before leases were enforced (layout 3) and stays
/// unattached, as it was in the exported store.
fn attach_live_keys(
    tables: &WriteTables<'_, '_>,
    leases: &mut WriteLeaseTables<'_, '_>,
    revision: u64,
) -> Result<u64, StorageFailure> {
    let mut live_keys = 0u64;
    let mut to_attach: Vec<(i64, Vec<u8>)> = Vec::new();
    tables
        .visit_live_at(&[], None, revision, &mut |key, entry| {
            live_keys += 1;
            if entry.lease != 0 {
                to_attach.push((entry.lease, key.to_vec()));
            }
            Ok(true)
        })
        .map_err(ReadError::into_failure)?;
    for (lease, key) in to_attach {
        if leases.record(lease)?.is_some() {
            leases.attach(lease, &key)?;
        }
    }
    Ok(live_keys)
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
