//! Writing revkv's history as an etcd snapshot: the frames of a revkv snapshot (from a member's
//! store, or read from a revkv backup file) become etcd's buckets, so that etcd 3.4's
//! `etcdctl snapshot restore` and 3.5's `etcdutl snapshot restore` make an etcd member of it with
//! the same keys, revisions, history and leases.
//!
//! Each record goes to the `key` bucket at its revision and position, as etcd's own `KeyValue`;
//! each lease to `lease` with the time it has left when a checkpoint recorded one; `meta` gets
//! the compaction floor (both of etcd's compaction keys, so etcd does not resume a compaction on
//! load) and a consistent index; users, roles and the auth switch go to etcd's auth buckets
//! (`auth.rs`). The membership buckets are left out: etcd's restore writes the new cluster's. A
//! history etcd could not hold is refused rather than written wrong: a current revision that no
//! record or compaction accounts for (etcd derives its revision from those), and a password hash
//! etcd cannot check (argon2; `revkv serve --password-hash bcrypt` writes ones it can).

use std::fs::File;
use std::io::Write;

use prost::Message;
use revkv_storage::codec::{SnapshotFrame, VersionRecord};
use sha2::{Digest, Sha256};

use crate::auth::EtcdAuthBuckets;
use crate::bolt::writer::BoltWriter;
use crate::error::{EtcdSnapshotError, Result};
use crate::layout::{self, RevisionKey};
use crate::messages;

/// bbolt's page size on the machines etcd runs on (x86_64, and arm64 with 4 KiB pages).
pub const PAGE_SIZE: u32 = 4096;

/// What an export wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdExport {
    pub current_revision: u64,
    pub compact_revision: u64,
    pub records: u64,
    pub leases: u64,
    /// The bolt file's length, without a trailer.
    pub bytes: u64,
}

/// Takes a revkv snapshot's frames in stream order and writes them as an etcd bolt file;
/// `finish` is told the snapshot's revisions (its header's, or its summary's).
pub struct EtcdExporter {
    bolt: BoltWriter,
    last_record_revision: u64,
    records: u64,
    /// Lease id (big-endian) and its `leasepb.Lease`, in id order as the frames bring them.
    leases: Vec<([u8; 8], Vec<u8>)>,
    /// The auth buckets, empty when the store has no auth records.
    auth: EtcdAuthBuckets,
}

impl EtcdExporter {
    /// Writes into `file`, which must be new and empty.
    pub fn new(file: File) -> Result<EtcdExporter> {
        let mut bolt = BoltWriter::new(file, PAGE_SIZE)?;
        bolt.begin_bucket(layout::KEY_BUCKET.as_bytes())?;
        Ok(EtcdExporter {
            bolt,
            last_record_revision: 0,
            records: 0,
            leases: Vec::new(),
            auth: EtcdAuthBuckets::default(),
        })
    }

    /// Takes the next frame of the snapshot.
    pub fn frame(&mut self, frame: &SnapshotFrame) -> Result<()> {
        match frame {
            SnapshotFrame::Record {
                revision,
                position,
                record,
            } => self.record(*revision, *position, record),
            SnapshotFrame::Lease { id, ttl_seconds } => self.lease(*id, *ttl_seconds, None),
            SnapshotFrame::LeaseState {
                id,
                ttl_seconds,
                checkpointed_remaining_ms,
                ..
            } => self.lease(*id, *ttl_seconds, *checkpointed_remaining_ms),
            // The revisions come to `finish`; alarms name the old cluster's members, and a
            // restored etcd starts without them.
            SnapshotFrame::Header(_)
            | SnapshotFrame::StreamHeader(_)
            | SnapshotFrame::Alarms(_)
            | SnapshotFrame::LearnerPromotions(_)
            | SnapshotFrame::Trailer { .. } => Ok(()),
            SnapshotFrame::Auth(auth) => {
                self.auth = crate::auth::etcd_buckets_of(auth)?;
                Ok(())
            }
        }
    }

    fn record(&mut self, revision: u64, position: u32, record: &VersionRecord) -> Result<()> {
        let key = RevisionKey {
            main: revision,
            sub: u64::from(position),
            tombstone: record.tombstone,
        };
        let value = if record.tombstone {
            messages::KeyValue {
                key: record.key.clone(),
                ..Default::default()
            }
        } else {
            messages::KeyValue {
                key: record.key.clone(),
                create_revision: signed(record.create_revision)?,
                mod_revision: signed(revision)?,
                version: signed(record.version)?,
                value: record.value.clone(),
                lease: record.lease,
            }
        };
        self.bolt.put(&key.encode(), &value.encode_to_vec())?;
        self.last_record_revision = revision;
        self.records += 1;
        Ok(())
    }

    fn lease(&mut self, id: i64, ttl: i64, remaining_ms: Option<u64>) -> Result<()> {
        // etcd reads the time left in whole seconds; round up so a lease never loses time.
        let remaining_ttl = remaining_ms.map_or(0, |ms| ms.div_ceil(1_000) as i64);
        let lease = messages::Lease {
            id,
            ttl,
            remaining_ttl,
        };
        self.leases.push((id.to_be_bytes(), lease.encode_to_vec()));
        Ok(())
    }

    /// Writes the lease and meta buckets and the root for a snapshot at `current_revision`,
    /// compacted at `compact_revision`, and answers what was written. Refuses a history whose
    /// current revision etcd would not reproduce.
    pub fn finish(
        mut self,
        current_revision: u64,
        compact_revision: u64,
    ) -> Result<(File, EtcdExport)> {
        self.bolt.end_bucket()?;
        let reproduced = self.last_record_revision.max(compact_revision).max(1);
        if reproduced != current_revision {
            return Err(EtcdSnapshotError::Unsupported(format!(
                "the store is at revision {current_revision}, but its last change is at \
                 {reproduced}: etcd would restore it at {reproduced}"
            )));
        }
        let leases = self.leases.len() as u64;
        self.bolt.bucket(
            layout::LEASE_BUCKET.as_bytes(),
            self.leases
                .iter()
                .map(|(id, lease)| (&id[..], lease.as_slice())),
        )?;
        write_meta_bucket(&mut self.bolt, compact_revision)?;
        self.write_auth_buckets()?;
        let (file, bytes) = self.bolt.finish()?;
        let export = EtcdExport {
            current_revision,
            compact_revision,
            records: self.records,
            leases,
            bytes,
        };
        Ok((file, export))
    }
}

impl EtcdExporter {
    /// `auth`, `authUsers` and `authRoles`, when the store has auth records; etcd creates them
    /// empty on its first start otherwise.
    fn write_auth_buckets(&mut self) -> Result<()> {
        if self.auth == EtcdAuthBuckets::default() {
            return Ok(());
        }
        let buckets = [
            (layout::AUTH_BUCKET, &self.auth.auth),
            (layout::AUTH_USERS_BUCKET, &self.auth.users),
            (layout::AUTH_ROLES_BUCKET, &self.auth.roles),
        ];
        for (name, entries) in buckets {
            let entries = entries
                .iter()
                .map(|(key, value)| (key.as_slice(), value.as_slice()));
            self.bolt.bucket(name.as_bytes(), entries)?;
        }
        Ok(())
    }
}

/// `meta`: a consistent index (etcd's restore overwrites it) and, after a compaction, both
/// compaction keys at the floor.
fn write_meta_bucket(bolt: &mut BoltWriter, compact_revision: u64) -> Result<()> {
    let floor = RevisionKey {
        main: compact_revision,
        sub: 0,
        tombstone: false,
    }
    .encode();
    let consistent_index = 1u64.to_be_bytes();
    let mut entries: Vec<(&[u8], &[u8])> = vec![(
        layout::CONSISTENT_INDEX.as_bytes(),
        consistent_index.as_slice(),
    )];
    if compact_revision > 0 {
        entries.push((layout::FINISHED_COMPACT_REVISION.as_bytes(), &floor));
        entries.push((layout::SCHEDULED_COMPACT_REVISION.as_bytes(), &floor));
    }
    entries.sort();
    bolt.bucket(layout::META_BUCKET.as_bytes(), entries)?;
    Ok(())
}

/// Appends etcdctl's trailer, the SHA-256 of everything before it, to a finished bolt file of
/// `length` bytes: what makes a bolt file an etcd snapshot.
pub fn append_trailer(file: &mut File, length: u64) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    let copied = std::io::copy(&mut std::io::Read::take(&mut *file, length), &mut hasher)?;
    if copied != length {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    file.seek(SeekFrom::Start(length))?;
    file.write_all(&hasher.finalize())?;
    file.sync_all()?;
    Ok(())
}

fn signed(value: u64) -> Result<i64> {
    i64::try_from(value)
        .map_err(|_| EtcdSnapshotError::Unsupported(format!("{value} does not fit etcd's int64")))
}

/// Writes `store` (one consistent read) into `file` as an etcd snapshot: the bolt file and its
/// SHA-256 trailer, as `etcdctl snapshot save` writes one.
pub fn export_store(store: &revkv_storage::MvccStore, file: File) -> Result<(File, EtcdExport)> {
    let mut exporter = EtcdExporter::new(file)?;
    let summary = store.export_frames(None, &mut |frame| exporter.frame(frame))?;
    finish_snapshot(exporter, summary.current_revision, summary.compact_revision)
}

/// Converts a revkv backup stream (checked whole on the way) into an etcd snapshot in `file`.
pub fn convert_revkv_backup(
    reader: &mut impl std::io::Read,
    file: File,
) -> Result<(File, EtcdExport)> {
    let mut exporter = EtcdExporter::new(file)?;
    let summary = revkv_storage::read_snapshot_frames(reader, &mut |frame| exporter.frame(&frame))?;
    finish_snapshot(exporter, summary.current_revision, summary.compact_revision)
}

fn finish_snapshot(
    exporter: EtcdExporter,
    current_revision: u64,
    compact_revision: u64,
) -> Result<(File, EtcdExport)> {
    let (mut file, export) = exporter.finish(current_revision, compact_revision)?;
    append_trailer(&mut file, export.bytes)?;
    Ok((file, export))
}
