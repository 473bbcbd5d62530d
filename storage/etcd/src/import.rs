//! Reading an etcd snapshot (`etcdctl snapshot save`) or member db file into revkv's history:
//! every revision the file still holds becomes a history record at the same revision and
//! position, with the same create revision, version, value and lease; the compaction floor and
//! the current revision are etcd's; every lease keeps its TTL (and its remaining TTL when etcd
//! checkpointed one); users, roles and the auth switch become revkv's auth records (`auth.rs`).
//!
//! Nothing here writes: `EtcdSnapshot::open` checks the file's SHA-256 trailer and its bbolt
//! structure, and `feed` hands each converted record to the caller (the restore, which passes it
//! through revkv's own stream checks), so a damaged file is refused before anything is created.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use prost::Message;
use revkv_storage::auth::{AuthState, MAX_ROLES, MAX_USERS};
use revkv_storage::codec::{SnapshotFrame, VersionRecord};
use revkv_storage::{ForeignHistory, FrameFeed};
use sha2::{Digest, Sha256};

use crate::auth::EtcdAuthBuckets;
use crate::bolt::{page, BoltFile, BucketRoot, DEFAULT_MAX_PAGE_BYTES};
use crate::error::{EtcdSnapshotError, Result};
use crate::layout::{self, RevisionKey};
use crate::messages;

/// etcdctl's trailer: the SHA-256 of the bolt file, after it.
pub const TRAILER_BYTES: u64 = 32;
/// A file whose size leaves this remainder modulo 512 carries a trailer (etcd's own test).
const TRAILER_ALIGNMENT: u64 = 512;
/// etcd keeps two keys in its `auth` bucket; a few more are read and ignored.
const MAX_AUTH_BUCKET_ENTRIES: usize = 16;

/// Whether the file at `path` is a bbolt file (an etcd snapshot or db) rather than a revkv
/// stream: bbolt's magic sits right after the first page's header.
pub fn is_bolt_file(path: &Path) -> std::io::Result<bool> {
    let mut start = [0u8; page::PAGE_HEADER_BYTES + 4];
    let mut file = File::open(path)?;
    match file.read_exact(&mut start) {
        Ok(()) => Ok(start[page::PAGE_HEADER_BYTES..] == page::MAGIC.to_le_bytes()),
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(error) => Err(error),
    }
}

/// An etcd snapshot or member db, opened and checked.
pub struct EtcdSnapshot {
    bolt: BoltFile,
    buckets: Vec<(String, BucketRoot)>,
    /// Whether the file carried etcdctl's trailer (a snapshot) or not (a member's db).
    pub had_trailer: bool,
    /// The first 8 bytes of the SHA-256 of the bolt file: what tells two snapshots apart (the
    /// restore derives the new cluster's id from it).
    pub content_hash: u64,
    /// `history()`, once computed: it walks the whole `key` bucket, and a restore asks twice.
    history: std::sync::OnceLock<ForeignHistory>,
}

impl EtcdSnapshot {
    /// Opens `path`, checks its SHA-256 trailer when it has one, its meta pages, and that its
    /// buckets are the ones etcd 3.4 and 3.5 write.
    pub fn open(path: &Path) -> Result<EtcdSnapshot> {
        let file = File::open(path)?;
        let length = file.metadata()?.len();
        let had_trailer = length % TRAILER_ALIGNMENT == TRAILER_BYTES;
        let data_length = if had_trailer {
            length - TRAILER_BYTES
        } else {
            length
        };
        let digest = sha256_of(&file, data_length)?;
        if had_trailer {
            check_trailer(&file, data_length, &digest)?;
        }
        let bolt = BoltFile::open(file, data_length, DEFAULT_MAX_PAGE_BYTES)?;
        let mut buckets = Vec::new();
        for (name, root) in bolt.buckets()? {
            let name = known_bucket(&name)?;
            buckets.push((name.to_string(), root));
        }
        let snapshot = EtcdSnapshot {
            bolt,
            buckets,
            had_trailer,
            content_hash: u64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 digest")),
            history: std::sync::OnceLock::new(),
        };
        snapshot.refuse_newer_schema()?;
        Ok(snapshot)
    }

    /// The current and compact revisions, as etcd computes them when it loads the file: the
    /// compaction floor is the scheduled compaction (etcd finishes an interrupted one on load),
    /// and the current revision is the last record's, or the floor if that is higher.
    pub fn history(&self) -> Result<ForeignHistory> {
        if let Some(history) = self.history.get() {
            return Ok(*history);
        }
        let history = self.read_history()?;
        Ok(*self.history.get_or_init(|| history))
    }

    fn read_history(&self) -> Result<ForeignHistory> {
        let compact_revision = self
            .meta_revision(layout::FINISHED_COMPACT_REVISION)?
            .max(self.meta_revision(layout::SCHEDULED_COMPACT_REVISION)?);
        let mut last_revision = 0;
        if let Some(bucket) = self.bucket(layout::KEY_BUCKET) {
            self.bolt.for_each(bucket, &mut |key: &[u8], _: &[u8]| {
                last_revision = parse_revision_key(key)?.main;
                Ok::<(), EtcdSnapshotError>(())
            })?;
        }
        Ok(ForeignHistory {
            current_revision: last_revision.max(compact_revision).max(1),
            compact_revision,
        })
    }

    /// Hands every record (in revision order), then every lease (in id order), then the auth
    /// records to `emit`. The auth records are read first, so a file whose users or roles revkv
    /// cannot enforce is refused before any record is handed over (a cluster that kept people
    /// out must not come back open).
    pub fn feed(&self, emit: &mut FrameFeed<'_>) -> Result<()> {
        let auth = self.auth_state()?;
        if let Some(bucket) = self.bucket(layout::KEY_BUCKET) {
            self.bolt
                .for_each(bucket, &mut |key: &[u8], value: &[u8]| {
                    emit(record_frame(key, value)?)?;
                    Ok::<(), EtcdSnapshotError>(())
                })?;
        }
        if let Some(bucket) = self.bucket(layout::LEASE_BUCKET) {
            self.bolt
                .for_each(bucket, &mut |key: &[u8], value: &[u8]| {
                    emit(lease_frame(key, value)?)?;
                    Ok::<(), EtcdSnapshotError>(())
                })?;
        }
        if let Some(auth) = auth {
            emit(SnapshotFrame::Auth(auth))?;
        }
        Ok(())
    }

    fn bucket(&self, name: &str) -> Option<&BucketRoot> {
        self.buckets
            .iter()
            .find(|(bucket, _)| bucket == name)
            .map(|(_, root)| root)
    }

    /// The value of `key` in `bucket`, if any. Reads the whole bucket: only for small ones.
    fn small_bucket_value(&self, bucket: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let Some(root) = self.bucket(bucket) else {
            return Ok(None);
        };
        let mut found = None;
        self.bolt
            .for_each(root, &mut |entry: &[u8], value: &[u8]| {
                if entry == key.as_bytes() {
                    found = Some(value.to_vec());
                }
                Ok::<(), EtcdSnapshotError>(())
            })?;
        Ok(found)
    }

    /// A compaction revision in `meta`: a 17-byte revision key whose main revision counts.
    fn meta_revision(&self, key: &'static str) -> Result<u64> {
        match self.small_bucket_value(layout::META_BUCKET, key)? {
            None => Ok(0),
            Some(bytes) => RevisionKey::parse(&bytes)
                .filter(|revision| !revision.tombstone)
                .map(|revision| revision.main)
                .ok_or_else(|| bad_entry(layout::META_BUCKET, key.into(), "not a revision")),
        }
    }

    /// etcd 3.6 and later record their schema's version in `meta`. 3.6 added only that key to
    /// 3.5's schema, and 3.7 changed nothing (etcd's `server/storage/schema/schema.go`), so files
    /// of both read as 3.5's; a later version may have changed what this reader relies on, and
    /// is refused rather than misread.
    fn refuse_newer_schema(&self) -> Result<()> {
        let Some(version) =
            self.small_bucket_value(layout::META_BUCKET, layout::STORAGE_VERSION)?
        else {
            return Ok(());
        };
        if layout::storage_version_is_readable(&version) {
            return Ok(());
        }
        Err(EtcdSnapshotError::Unsupported(format!(
            "it records storage version {:?}; revkv reads the snapshots of etcd 3.4 to 3.7 \
             (storage versions 3.6 and 3.7)",
            String::from_utf8_lossy(&version)
        )))
    }

    /// The users, roles and auth switch as revkv's records (`auth.rs`), or None when the file
    /// holds none. Reads at most one entry past revkv's limits, so a huge bucket is refused
    /// without being held.
    pub fn auth_state(&self) -> Result<Option<AuthState>> {
        let buckets = EtcdAuthBuckets {
            auth: self.bounded_entries(layout::AUTH_BUCKET, MAX_AUTH_BUCKET_ENTRIES)?,
            users: self.bounded_entries(layout::AUTH_USERS_BUCKET, MAX_USERS + 1)?,
            roles: self.bounded_entries(layout::AUTH_ROLES_BUCKET, MAX_ROLES + 1)?,
        };
        crate::auth::auth_state_from_etcd(&buckets)
    }

    fn bounded_entries(&self, bucket: &str, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut entries = Vec::new();
        if let Some(root) = self.bucket(bucket) {
            self.bolt.for_each(root, &mut |key: &[u8], value: &[u8]| {
                if entries.len() < limit {
                    entries.push((key.to_vec(), value.to_vec()));
                }
                Ok::<(), EtcdSnapshotError>(())
            })?;
        }
        Ok(entries)
    }
}

/// The SHA-256 of the first `length` bytes of `file`.
fn sha256_of(file: &File, length: u64) -> Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let copied = std::io::copy(&mut std::io::Read::take(file, length), &mut hasher)?;
    if copied != length {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(hasher.finalize().into())
}

/// Checks etcdctl's SHA-256 trailer, which follows the first `data_length` bytes.
fn check_trailer(file: &File, data_length: u64, digest: &[u8; 32]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut stored = [0u8; TRAILER_BYTES as usize];
    file.read_exact_at(&mut stored, data_length)?;
    if &stored != digest {
        return Err(EtcdSnapshotError::ChecksumMismatch);
    }
    Ok(())
}

fn known_bucket(name: &[u8]) -> Result<&'static str> {
    layout::KNOWN_BUCKETS
        .iter()
        .find(|known| known.as_bytes() == name)
        .copied()
        .ok_or_else(|| {
            EtcdSnapshotError::Unsupported(format!(
                "bucket {:?} is not one etcd 3.4 or 3.5 writes (a newer etcd, or not etcd)",
                String::from_utf8_lossy(name)
            ))
        })
}

fn parse_revision_key(key: &[u8]) -> Result<RevisionKey> {
    RevisionKey::parse(key)
        .filter(|revision| revision.main >= 1)
        .ok_or_else(|| bad_entry(layout::KEY_BUCKET, hex(key), "not a revision key"))
}

/// One `key` bucket entry as a history record, checked against etcd's data model: a put's mod
/// revision is its key's, its create revision is at most that, its version at least one.
fn record_frame(key: &[u8], value: &[u8]) -> Result<SnapshotFrame> {
    let revision = parse_revision_key(key)?;
    let entry = || format!("{}/{}", revision.main, revision.sub);
    let kv = messages::KeyValue::decode(value)
        .map_err(|error| bad_entry(layout::KEY_BUCKET, entry(), &error.to_string()))?;
    let position = u32::try_from(revision.sub)
        .map_err(|_| bad_entry(layout::KEY_BUCKET, entry(), "the sub revision is too large"))?;
    if kv.key.is_empty() {
        return Err(bad_entry(layout::KEY_BUCKET, entry(), "an empty key"));
    }
    let record = if revision.tombstone {
        VersionRecord {
            key: kv.key,
            value: Vec::new(),
            create_revision: 0,
            version: 0,
            lease: 0,
            tombstone: true,
        }
    } else {
        let main = revision.main as i64;
        let sound = kv.mod_revision == main
            && (1..=main).contains(&kv.create_revision)
            && kv.version >= 1
            && kv.lease >= 0;
        if !sound {
            let what = format!(
                "create {} mod {} version {} lease {} do not fit revision {main}",
                kv.create_revision, kv.mod_revision, kv.version, kv.lease
            );
            return Err(bad_entry(layout::KEY_BUCKET, entry(), &what));
        }
        VersionRecord {
            key: kv.key,
            value: kv.value,
            create_revision: kv.create_revision as u64,
            version: kv.version as u64,
            lease: kv.lease,
            tombstone: false,
        }
    };
    Ok(SnapshotFrame::Record {
        revision: revision.main,
        position,
        record,
    })
}

/// One `lease` bucket entry as a lease with its TTL and, when etcd checkpointed it, the time
/// that was left.
fn lease_frame(key: &[u8], value: &[u8]) -> Result<SnapshotFrame> {
    let id = <[u8; 8]>::try_from(key)
        .map(i64::from_be_bytes)
        .map_err(|_| bad_entry(layout::LEASE_BUCKET, hex(key), "not an 8-byte lease id"))?;
    let lease = messages::Lease::decode(value)
        .map_err(|error| bad_entry(layout::LEASE_BUCKET, id.to_string(), &error.to_string()))?;
    if lease.id != id || id <= 0 || lease.ttl < 1 || lease.remaining_ttl < 0 {
        let what = format!(
            "lease {} with TTL {} and {} s left (revkv needs a positive id and TTL)",
            lease.id, lease.ttl, lease.remaining_ttl
        );
        return Err(bad_entry(layout::LEASE_BUCKET, id.to_string(), &what));
    }
    let checkpointed_remaining_ms =
        (lease.remaining_ttl > 0).then(|| (lease.remaining_ttl as u64).saturating_mul(1_000));
    Ok(SnapshotFrame::LeaseState {
        id,
        ttl_seconds: lease.ttl,
        checkpointed_remaining_ms,
        renewed_at_index: 0,
    })
}

fn bad_entry(bucket: &'static str, entry: String, what: &str) -> EtcdSnapshotError {
    EtcdSnapshotError::BadEntry {
        bucket,
        entry,
        what: what.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
