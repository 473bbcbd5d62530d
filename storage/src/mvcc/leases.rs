//! Leases in the replicated state: the `leases` and `lease_keys` tables, typed access to them, and
//! the store's lease reads.
//!
//! A lease is a granted TTL and the set of keys attached to it. Leases are not revisioned (as in
//! etcd): the tables hold what is granted now. Deadlines are not replicated; the leader keeps
//! them in memory and proposes a revoke when one passes (the raft crate's lessor), so every member
//! deletes the same keys at the same log position. What is replicated of a lease's clock is its
//! last checkpoint (the leader's remaining TTL, etcd's lease checkpoint), which a keep-alive clears,
//! and the log index of that clear (or of the grant), which refuses checkpoints older than it.
//!
//! Invariants, kept by the write path (`apply.rs`) and checked there:
//! - `(lease, key)` is in `lease_keys` exactly when `key` is live and its current version carries
//!   `lease` (keys written with a lease before layout 3, when leases were not enforced, are the one
//!   exception: they keep their `lease` field but are attached to nothing);
//! - a lease's `attached_keys` is its number of rows in `lease_keys`, at most
//!   `Limits::max_keys_per_lease`.

use std::path::Path;

use redb::ReadableTable;

use crate::codec::{self, LeaseRecord};
use crate::error::{corrupt, db_error, StorageFailure};
use crate::mvcc::tables::{LEASES, LEASE_KEYS};
use crate::mvcc::MvccStore;
use crate::types::{CheckpointedLease, LeaseInfo};

/// The lease tables opened in one transaction, plus the file name for error messages.
pub(crate) struct LeaseTables<'f, L, K> {
    pub file: &'f Path,
    pub leases: L,
    pub lease_keys: K,
}

/// The write transaction's lease tables.
pub(crate) type WriteLeaseTables<'f, 't> =
    LeaseTables<'f, redb::Table<'t, i64, &'static [u8]>, redb::Table<'t, (i64, &'static [u8]), ()>>;

/// A read transaction's lease tables.
pub(crate) type ReadLeaseTables<'f> = LeaseTables<
    'f,
    redb::ReadOnlyTable<i64, &'static [u8]>,
    redb::ReadOnlyTable<(i64, &'static [u8]), ()>,
>;

/// Opens (creating them if needed) the lease tables in a write transaction.
pub(crate) fn open_write_lease_tables<'f, 't>(
    write: &'t redb::WriteTransaction,
    file: &'f Path,
) -> Result<WriteLeaseTables<'f, 't>, StorageFailure> {
    Ok(LeaseTables {
        file,
        leases: write.open_table(LEASES).map_err(db_error(file))?,
        lease_keys: write.open_table(LEASE_KEYS).map_err(db_error(file))?,
    })
}

impl<L, K> LeaseTables<'_, L, K>
where
    L: ReadableTable<i64, &'static [u8]>,
    K: ReadableTable<(i64, &'static [u8]), ()>,
{
    /// The record of lease `id`, if it is granted.
    pub fn record(&self, id: i64) -> Result<Option<LeaseRecord>, StorageFailure> {
        let stored = self.leases.get(id).map_err(db_error(self.file))?;
        stored
            .map(|bytes| codec::decode_lease_record(bytes.value()).map_err(corrupt(self.file)))
            .transpose()
    }

    /// How many leases are granted (O(1) in redb).
    pub fn count(&self) -> Result<u64, StorageFailure> {
        self.leases.len().map_err(db_error(self.file))
    }

    /// True when `key` is attached to lease `id`.
    pub fn is_attached(&self, id: i64, key: &[u8]) -> Result<bool, StorageFailure> {
        let row = self
            .lease_keys
            .get((id, key))
            .map_err(db_error(self.file))?;
        Ok(row.is_some())
    }

    /// The keys attached to lease `id`, in key order, at most `limit` of them.
    pub fn attached_keys(&self, id: i64, limit: u64) -> Result<Vec<Vec<u8>>, StorageFailure> {
        let empty: &[u8] = &[];
        let rows = self
            .lease_keys
            .range((id, empty)..)
            .map_err(db_error(self.file))?;
        let mut keys = Vec::new();
        for row in rows {
            let (stored, _) = row.map_err(db_error(self.file))?;
            let (lease, key) = stored.value();
            if lease != id || keys.len() as u64 >= limit {
                break;
            }
            keys.push(key.to_vec());
        }
        Ok(keys)
    }

    /// Every granted lease in id order, at most `limit` of them.
    pub fn all(&self, limit: u64) -> Result<Vec<LeaseInfo>, StorageFailure> {
        let records = self.all_records(limit)?;
        Ok(records
            .iter()
            .map(|(id, record)| lease_info(*id, record))
            .collect())
    }

    /// Every granted lease's record in id order, at most `limit` of them.
    pub fn all_records(&self, limit: u64) -> Result<Vec<(i64, LeaseRecord)>, StorageFailure> {
        let mut leases = Vec::new();
        for entry in self.leases.iter().map_err(db_error(self.file))? {
            if leases.len() as u64 >= limit {
                break;
            }
            let (id, bytes) = entry.map_err(db_error(self.file))?;
            let record = codec::decode_lease_record(bytes.value()).map_err(corrupt(self.file))?;
            leases.push((id.value(), record));
        }
        Ok(leases)
    }
}

impl WriteLeaseTables<'_, '_> {
    /// Writes the record of lease `id`.
    pub fn save(&mut self, id: i64, record: &LeaseRecord) -> Result<(), StorageFailure> {
        let bytes = codec::encode_lease_record(record).map_err(corrupt(self.file))?;
        self.leases
            .insert(id, bytes.as_slice())
            .map_err(db_error(self.file))?;
        Ok(())
    }

    /// Removes lease `id` and every row of its keys. The caller has deleted the keys.
    pub fn remove(&mut self, id: i64, keys: &[Vec<u8>]) -> Result<(), StorageFailure> {
        for key in keys {
            self.lease_keys
                .remove((id, key.as_slice()))
                .map_err(db_error(self.file))?;
        }
        self.leases.remove(id).map_err(db_error(self.file))?;
        Ok(())
    }

    /// Attaches `key` to lease `id` (which must be granted); attaching it again changes nothing.
    pub fn attach(&mut self, id: i64, key: &[u8]) -> Result<(), StorageFailure> {
        let mut record = self.record(id)?.ok_or_else(|| {
            StorageFailure::Invariant(format!(
                "attaching a key to lease {id}, which is not granted"
            ))
        })?;
        let newly_attached = self
            .lease_keys
            .insert((id, key), ())
            .map_err(db_error(self.file))?
            .is_none();
        if newly_attached {
            record.attached_keys += 1;
            self.save(id, &record)?;
        }
        Ok(())
    }

    /// Records a checkpoint's remaining TTLs (see `Request::LeaseCheckpoint`): a lease renewed at
    /// a log index above `computed_at_index`, or no longer granted, is skipped. Answers the ids
    /// recorded.
    pub fn checkpoint(
        &mut self,
        computed_at_index: u64,
        checkpointed: &[CheckpointedLease],
    ) -> Result<Vec<i64>, StorageFailure> {
        let mut recorded = Vec::new();
        for lease in checkpointed {
            let Some(mut record) = self.record(lease.id)? else {
                continue;
            };
            if record.renewed_at_index > computed_at_index {
                continue;
            }
            record.checkpointed_remaining_ms = Some(lease.remaining_ttl_ms);
            self.save(lease.id, &record)?;
            recorded.push(lease.id);
        }
        Ok(recorded)
    }

    /// Forgets lease `id`'s checkpoint after a renewal applied at `log_index`; false when the
    /// lease is not granted.
    pub fn clear_checkpoint(&mut self, id: i64, log_index: u64) -> Result<bool, StorageFailure> {
        let Some(mut record) = self.record(id)? else {
            return Ok(false);
        };
        record.checkpointed_remaining_ms = None;
        record.renewed_at_index = record.renewed_at_index.max(log_index);
        self.save(id, &record)?;
        Ok(true)
    }

    /// Detaches `key` from lease `id`. A key written with a lease before layout 3 was never
    /// attached, so a missing row is not an error.
    pub fn detach(&mut self, id: i64, key: &[u8]) -> Result<(), StorageFailure> {
        let was_attached = self
            .lease_keys
            .remove((id, key))
            .map_err(db_error(self.file))?
            .is_some();
        if !was_attached {
            return Ok(());
        }
        let mut record = self.record(id)?.ok_or_else(|| {
            StorageFailure::Invariant(format!("key attached to lease {id}, which is not granted"))
        })?;
        record.attached_keys = record.attached_keys.checked_sub(1).ok_or_else(|| {
            StorageFailure::Invariant(format!("lease {id} has more attached keys than it counts"))
        })?;
        self.save(id, &record)
    }
}

pub(crate) fn lease_info(id: i64, record: &LeaseRecord) -> LeaseInfo {
    LeaseInfo {
        id,
        granted_ttl_seconds: record.ttl_seconds,
        attached_keys: record.attached_keys,
        checkpointed_remaining_ms: record.checkpointed_remaining_ms,
    }
}

impl MvccStore {
    /// Lease `id` as granted now, or `None`.
    pub fn lease(&self, id: i64) -> Result<Option<LeaseInfo>, StorageFailure> {
        let leases = self.read_lease_tables()?;
        Ok(leases.record(id)?.map(|record| lease_info(id, &record)))
    }

    /// The keys attached to lease `id` now, in key order (at most `max_keys_per_lease`).
    pub fn lease_keys(&self, id: i64) -> Result<Vec<Vec<u8>>, StorageFailure> {
        let leases = self.read_lease_tables()?;
        leases.attached_keys(id, self.limits().max_keys_per_lease)
    }

    /// Every lease granted now, in id order (at most `max_leases`).
    pub fn leases(&self) -> Result<Vec<LeaseInfo>, StorageFailure> {
        let leases = self.read_lease_tables()?;
        leases.all(self.limits().max_leases)
    }
}
