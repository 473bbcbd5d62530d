//! The write path: one request at a time, inside the batch's write transaction.
//!
//! A request is validated completely before it writes anything. Every change it makes is written at
//! one pending revision (current + 1), each at the next position within that revision; the revision
//! is taken only if at least one change was written, so a no-op does not bump it.
//!
//! Leases: a put attaches its key to its lease (and detaches it from the lease its previous
//! version had), a delete detaches, a revoke deletes every attached key at one revision exactly as
//! a delete-range would, and a grant writes only the `leases` table (no new revision). The leases
//! a put or a txn's chosen branch names are checked before anything is written, so a put with a
//! lease that does not exist writes nothing.

use std::collections::BTreeMap;

use crate::codec::{LeaseRecord, VersionRecord};
use crate::error::{Malformed, ReadError, Rejection, StorageFailure};
use crate::limits::Limits;
use crate::mvcc::compact::PendingCompaction;
use crate::mvcc::key_index::IndexEntry;
use crate::mvcc::leases::WriteLeaseTables;
use crate::mvcc::read::ResolvedRange;
use crate::mvcc::tables::{StoreState, WriteTables};
use crate::mvcc::txn_tree::TakenPath;
use crate::mvcc::validate::validate_request;
use crate::types::{ApplyEntry, ApplyOutcome, DeleteRangeResponse, EntryPayload, KeyRange};
use crate::types::{
    Compare, DeleteRangeRequest, KeepCurrent, KeyValue, PutRequest, PutResponse, RangeRequest,
    RangeResponse, Request, Response, TxnOp, TxnOpResponse, TxnRequest, TxnResponse,
};
use crate::types::{LeaseGrantResponse, RangeEnd};

/// Applies one request. `Err` is a storage fault that must abort the whole batch; a rejected
/// request is an `Ok` outcome carrying the rejection.
pub(crate) fn apply_request<'f, 't>(
    tables: &mut WriteTables<'f, 't>,
    leases: &mut WriteLeaseTables<'f, 't>,
    state: &mut StoreState,
    (request, log_index): (&Request, u64),
    limits: &Limits,
) -> Result<ApplyOutcome, StorageFailure> {
    if let Err(rejection) = validate_request(request, limits) {
        return Ok(rejected(state, rejection));
    }
    if let Some(outcome) = apply_lease_bookkeeping(leases, state, (request, log_index), limits)? {
        return Ok(outcome);
    }
    apply_history_change(tables, leases, state, request, limits)
}

/// Applies the lease requests that write no history and take no revision (grant, checkpoint,
/// checkpoint clear); `None` for every other request.
fn apply_lease_bookkeeping(
    leases: &mut WriteLeaseTables<'_, '_>,
    state: &StoreState,
    (request, log_index): (&Request, u64),
    limits: &Limits,
) -> Result<Option<ApplyOutcome>, StorageFailure> {
    let outcome = match request {
        Request::LeaseGrant { id, ttl_seconds } => {
            let grant = (*id, *ttl_seconds, log_index);
            grant_lease(leases, state, grant, limits)?
        }
        Request::LeaseCheckpoint {
            computed_at_index,
            leases: checkpointed,
        } => {
            let recorded = leases.checkpoint(*computed_at_index, checkpointed)?;
            unchanged(state, Ok(Response::LeaseCheckpoint { recorded }))
        }
        Request::LeaseCheckpointClear { id } => {
            let answer = match leases.clear_checkpoint(*id, log_index)? {
                true => Ok(Response::LeaseCheckpointClear),
                false => Err(Rejection::LeaseNotFound { id: *id }),
            };
            unchanged(state, answer)
        }
        _ => return Ok(None),
    };
    Ok(Some(outcome))
}

/// Applies a request that writes history (put, delete, txn, lease revoke): the revision moves
/// on by one when it wrote anything, and a rejection leaves the state as it was.
fn apply_history_change<'f, 't>(
    tables: &mut WriteTables<'f, 't>,
    leases: &mut WriteLeaseTables<'f, 't>,
    state: &mut StoreState,
    request: &Request,
    limits: &Limits,
) -> Result<ApplyOutcome, StorageFailure> {
    let mut change = Change {
        tables,
        leases,
        revision: state.current_revision + 1,
        compact_revision: state.compact_revision,
        next_position: 0,
        live_keys: state.live_keys,
        limits,
    };
    let answer = match request {
        Request::Put(put) => change.put_checked(put)?.map(Response::Put),
        Request::DeleteRange(delete) => change
            .delete_range_checked(delete)?
            .map(Response::DeleteRange),
        Request::Txn(txn) => change.txn(txn)?.map(Response::Txn),
        Request::LeaseRevoke { id } => change.revoke(*id)?.map(Response::LeaseRevoke),
        Request::Compact { .. } => unreachable!("compactions are applied by the batch"),
        Request::LeaseGrant { .. }
        | Request::LeaseCheckpoint { .. }
        | Request::LeaseCheckpointClear { .. } => {
            unreachable!("applied by `apply_lease_bookkeeping`: they write no history")
        }
        Request::Alarm { .. } => unreachable!("alarms are applied by the batch (`alarms.rs`)"),
        Request::Auth(_) => {
            unreachable!("auth changes are applied by the batch (`auth_record.rs`)")
        }
        Request::LearnerPromotion(_) => {
            unreachable!("promotion intents are applied by the batch (`learner_promotions.rs`)")
        }
    };
    let response = match answer {
        Ok(response) => response,
        Err(rejection) => {
            // Lease and delete-size checks run before the first write, so a rejection leaves
            // nothing behind.
            assert_eq!(change.next_position, 0, "a rejected request wrote history");
            return Ok(rejected(state, rejection));
        }
    };
    if change.next_position > 0 {
        state.current_revision = change.revision;
        state.live_keys = change.live_keys;
    }
    Ok(ApplyOutcome {
        revision: state.current_revision,
        result: Ok(response),
    })
}

/// The outcome of a request that takes no revision.
fn unchanged(state: &StoreState, result: Answer<Response>) -> ApplyOutcome {
    ApplyOutcome {
        revision: state.current_revision,
        result,
    }
}

fn rejected(state: &StoreState, rejection: Rejection) -> ApplyOutcome {
    ApplyOutcome {
        revision: state.current_revision,
        result: Err(rejection),
    }
}

/// Moves the compact revision to `revision` and cleans at most `inline_entries` history entries
/// of the window now; the rest stays in `pending` for `MvccStore::compact_step`.
pub(crate) fn compact_request(
    tables: &mut WriteTables<'_, '_>,
    state: &mut StoreState,
    revision: u64,
    pending: &mut Option<PendingCompaction>,
    inline_entries: usize,
) -> Result<ApplyOutcome, StorageFailure> {
    if revision > state.current_revision {
        let rejection = Rejection::FutureRevision {
            requested: revision,
            current: state.current_revision,
        };
        return Ok(rejected(state, rejection));
    }
    if revision <= state.compact_revision {
        let rejection = Rejection::Compacted {
            requested: revision,
            compact_revision: state.compact_revision,
        };
        return Ok(rejected(state, rejection));
    }
    let window = PendingCompaction::extended(*pending, state.compact_revision, revision);
    state.compact_revision = revision;
    // Readers below the new compact revision are refused from here on, before any version they
    // might need leaves the index (`key_index.rs`).
    tables.index.write()?.raise_compact_revision(revision);
    *pending = tables.compact_some(window, inline_entries)?;
    Ok(ApplyOutcome {
        revision: state.current_revision,
        result: Ok(Response::Compact),
    })
}

/// Grants a lease: writes its record, and nothing else (a grant takes no revision). The grant's
/// log index refuses any checkpoint computed before it (one of an earlier lease of the same id).
fn grant_lease(
    leases: &mut WriteLeaseTables<'_, '_>,
    state: &StoreState,
    (id, ttl_seconds, log_index): (i64, i64, u64),
    limits: &Limits,
) -> Result<ApplyOutcome, StorageFailure> {
    if leases.record(id)?.is_some() {
        return Ok(rejected(state, Rejection::LeaseExists { id }));
    }
    if leases.count()? >= limits.max_leases {
        let rejection = Rejection::Invalid(format!(
            "{} leases are granted, the limit; revoke some or raise max_leases",
            limits.max_leases
        ));
        return Ok(rejected(state, rejection));
    }
    let record = LeaseRecord {
        ttl_seconds,
        attached_keys: 0,
        checkpointed_remaining_ms: None,
        renewed_at_index: log_index,
    };
    leases.save(id, &record)?;
    Ok(ApplyOutcome {
        revision: state.current_revision,
        result: Ok(Response::LeaseGrant(LeaseGrantResponse { id, ttl_seconds })),
    })
}

/// A rejection of a request, or its answer. The outer `Result` of the functions that return it is
/// a storage fault.
type Answer<T> = std::result::Result<T, Rejection>;

/// The changes of one request, all at `revision`.
struct Change<'a, 'f, 't> {
    tables: &'a mut WriteTables<'f, 't>,
    leases: &'a mut WriteLeaseTables<'f, 't>,
    revision: u64,
    /// The store's compact revision: a txn's get reads no revision below it.
    compact_revision: u64,
    next_position: u32,
    /// The store's live-key count as changed so far by this request.
    live_keys: u64,
    limits: &'a Limits,
}

impl Change<'_, '_, '_> {
    /// A top-level put: its lease is checked first.
    fn put_checked(&mut self, put: &PutRequest) -> Result<Answer<PutResponse>, StorageFailure> {
        if let Err(rejection) = self.check_leases([put])? {
            return Ok(Err(rejection));
        }
        self.put(put).map(Ok)
    }

    /// Rejects puts that name a lease that is not granted, or that would attach more keys to a
    /// lease than the limit allows. Reads only, so a rejection writes nothing. Puts in one txn
    /// branch name distinct keys outside its delete ranges (validation), so each put's key is
    /// attached to what it is attached to before the request; keys the same request detaches
    /// are not credited, which makes the limit check err on the side of refusing.
    fn check_leases<'p>(
        &self,
        puts: impl IntoIterator<Item = &'p PutRequest>,
    ) -> Result<Answer<()>, StorageFailure> {
        let mut newly_attached: BTreeMap<i64, u64> = BTreeMap::new();
        for put in puts.into_iter().filter(|put| put.lease != 0) {
            if self.leases.record(put.lease)?.is_none() {
                return Ok(Err(Rejection::LeaseNotFound { id: put.lease }));
            }
            if !self.leases.is_attached(put.lease, &put.key)? {
                *newly_attached.entry(put.lease).or_default() += 1;
            }
        }
        for (id, added) in newly_attached {
            let record = self.leases.record(id)?;
            let attached = record.map_or(0, |record| record.attached_keys);
            if attached + added > self.limits.max_keys_per_lease {
                return Ok(Err(Rejection::Invalid(format!(
                    "lease {id} has {attached} keys attached; {added} more would pass the limit \
                     of {} keys per lease",
                    self.limits.max_keys_per_lease
                ))));
            }
        }
        Ok(Ok(()))
    }

    fn put(&mut self, put: &PutRequest) -> Result<PutResponse, StorageFailure> {
        let previous = self.current_entry(&put.key)?;
        let previous_lease = previous.map_or(0, |entry| entry.lease);
        if previous_lease != 0 && previous_lease != put.lease {
            self.leases.detach(previous_lease, &put.key)?;
        }
        if put.lease != 0 {
            self.leases.attach(put.lease, &put.key)?;
        }
        let (create_revision, version) = match &previous {
            Some(previous) => (previous.create_revision, previous.version + 1),
            None => (self.revision, 1),
        };
        // The previous value is read from history only when the client asked for it.
        let prev_kv = match previous.filter(|_| put.prev_kv) {
            Some(entry) => Some(self.tables.kv_for_entry(&put.key, &entry, true)?),
            None => None,
        };
        if previous.is_none() {
            self.live_keys += 1;
        }
        self.record_history(VersionRecord {
            key: put.key.clone(),
            value: put.value.clone(),
            create_revision,
            version,
            lease: put.lease,
            tombstone: false,
        })?;
        Ok(PutResponse { prev_kv })
    }

    /// A top-level delete: its size is checked first.
    fn delete_range_checked(
        &mut self,
        delete: &DeleteRangeRequest,
    ) -> Result<Answer<DeleteRangeResponse>, StorageFailure> {
        if let Err(rejection) = self.check_delete_sizes([delete])? {
            return Ok(Err(rejection));
        }
        self.delete_range(delete).map(Ok)
    }

    /// Rejects deletes that would remove more than `max_delete_keys` keys in all, counted before
    /// the request changes anything. Reads only, so a rejection writes nothing. Overlapping
    /// ranges count their common keys twice, which errs on the side of refusing.
    fn check_delete_sizes<'d>(
        &self,
        deletes: impl IntoIterator<Item = &'d DeleteRangeRequest>,
    ) -> Result<Answer<()>, StorageFailure> {
        let most = self.limits.max_delete_keys;
        let mut doomed: u64 = 0;
        for delete in deletes {
            let count_keys = RangeRequest {
                range: Some(delete.range.clone()),
                count_only: true,
                ..RangeRequest::default()
            };
            doomed = doomed.saturating_add(self.read_current(&count_keys, u64::MAX)?.count);
            if doomed > most {
                return Ok(Err(Rejection::Invalid(format!(
                    "the delete would remove {doomed} keys or more; one request removes at most \
                     {most} (max_delete_keys): delete in smaller ranges"
                ))));
            }
        }
        Ok(Ok(()))
    }

    fn delete_range(
        &mut self,
        delete: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StorageFailure> {
        let doomed_keys = RangeRequest {
            range: Some(delete.range.clone()),
            keys_only: !delete.prev_kv,
            ..RangeRequest::default()
        };
        // A delete removes every key in its range, so it is not capped by `max_range_keys`.
        let doomed = self.read_current(&doomed_keys, u64::MAX)?;
        for kv in &doomed.kvs {
            if kv.lease != 0 {
                self.leases.detach(kv.lease, &kv.key)?;
            }
            self.record_tombstone(&kv.key)?;
        }
        Ok(DeleteRangeResponse {
            deleted: doomed.kvs.len() as u64,
            prev_kvs: if delete.prev_kv {
                doomed.kvs
            } else {
                Vec::new()
            },
        })
    }

    /// Deletes every key attached to lease `id` at this change's revision, in key order (as a
    /// delete-range of those keys would), and removes the lease.
    fn revoke(&mut self, id: i64) -> Result<Answer<DeleteRangeResponse>, StorageFailure> {
        let Some(record) = self.leases.record(id)? else {
            return Ok(Err(Rejection::LeaseNotFound { id }));
        };
        let keys = self.leases.attached_keys(id, u64::MAX)?;
        if keys.len() as u64 != record.attached_keys {
            return Err(StorageFailure::Invariant(format!(
                "lease {id} counts {} attached keys but has {}",
                record.attached_keys,
                keys.len()
            )));
        }
        for key in &keys {
            let attached_here = self
                .current_entry(key)?
                .is_some_and(|entry| entry.lease == id);
            if !attached_here {
                return Err(StorageFailure::Invariant(format!(
                    "lease {id} lists a key whose current version is not attached to it"
                )));
            }
            self.record_tombstone(key)?;
        }
        self.leases.remove(id, &keys)?;
        Ok(Ok(DeleteRangeResponse {
            deleted: keys.len() as u64,
            prev_kvs: Vec::new(),
        }))
    }

    /// A txn, nested txns included: every branch is decided and every op on the way checked
    /// before the first write (`txn_tree.rs`), so a rejection writes nothing, as in etcd, where
    /// `checkTxn` refuses the whole txn before it runs.
    fn txn(&mut self, txn: &TxnRequest) -> Result<Answer<TxnResponse>, StorageFailure> {
        assert_eq!(self.next_position, 0, "a txn is a request of its own");
        let before = self.revision - 1;
        let tables = &*self.tables;
        let path = TakenPath::decide(txn, &mut |compares: &[Compare]| {
            tables
                .compares_hold_at(compares, before)
                .map_err(ReadError::into_failure)
        })?;
        let ops = path.ops_to_run(txn);
        if let Err(rejection) = self.check_ops_to_run(&ops)? {
            return Ok(Err(rejection));
        }
        let response = path.run(txn, &mut |op| self.run_op(op))?;
        Ok(Ok(response))
    }

    /// The checks of etcd's `checkTxn` over every op that will run, each at its turn and against
    /// the state before the txn, so the first refusal is etcd's: a get's revision, a keeping
    /// put's key, a put's lease. Then revkv's own limits over them all: the keys attached to
    /// each lease, and the keys the deletes remove.
    fn check_ops_to_run(&self, ops: &[&TxnOp]) -> Result<Answer<()>, StorageFailure> {
        let mut puts_attaching = Vec::new();
        let mut deletes = Vec::new();
        for op in ops.iter().copied() {
            let refusal = match op {
                TxnOp::Get(get) => get
                    .revision
                    .and_then(|revision| self.check_read_revision(revision).err()),
                TxnOp::Put(put) => {
                    puts_attaching.push(put);
                    self.lease_refusal(put.lease)?
                }
                TxnOp::PutKeeping { put, keep } => {
                    if self.current_entry(&put.key)?.is_none() {
                        let key = String::from_utf8_lossy(&put.key).into_owned();
                        return Ok(Err(Rejection::Malformed(Malformed::KeyNotFound { key })));
                    }
                    if keep.lease {
                        None
                    } else {
                        puts_attaching.push(put);
                        self.lease_refusal(put.lease)?
                    }
                }
                TxnOp::DeleteRange(delete) => {
                    deletes.push(delete);
                    None
                }
                TxnOp::Txn(_) => unreachable!("nested txns are flattened away"),
            };
            if let Some(refusal) = refusal {
                return Ok(Err(refusal));
            }
        }
        if let Err(rejection) = self.check_leases(puts_attaching)? {
            return Ok(Err(rejection));
        }
        self.check_delete_sizes(deletes)
    }

    /// `LeaseNotFound` when a put names a lease that is not granted.
    fn lease_refusal(&self, lease: i64) -> Result<Option<Rejection>, StorageFailure> {
        if lease == 0 || self.leases.record(lease)?.is_some() {
            return Ok(None);
        }
        Ok(Some(Rejection::LeaseNotFound { id: lease }))
    }

    /// A get inside a txn reads at most the revision before the txn, and nothing compacted
    /// (etcd's `checkRange`).
    fn check_read_revision(&self, revision: u64) -> Answer<()> {
        let current = self.revision - 1;
        if revision > current {
            return Err(Rejection::FutureRevision {
                requested: revision,
                current,
            });
        }
        if revision < self.compact_revision {
            return Err(Rejection::Compacted {
                requested: revision,
                compact_revision: self.compact_revision,
            });
        }
        Ok(())
    }

    /// Runs one op of a txn (never a nested txn: `TakenPath::run` walks those).
    fn run_op(&mut self, op: &TxnOp) -> Result<TxnOpResponse, StorageFailure> {
        Ok(match op {
            TxnOp::Put(put) => TxnOpResponse::Put(self.put(put)?),
            TxnOp::PutKeeping { put, keep } => TxnOpResponse::Put(self.put_keeping(put, *keep)?),
            TxnOp::DeleteRange(delete) => TxnOpResponse::DeleteRange(self.delete_range(delete)?),
            TxnOp::Get(get) => {
                let cap = self.limits.max_range_keys;
                let limit = get.limit.unwrap_or(cap).min(cap);
                TxnOpResponse::Get(self.read_current(get, limit)?)
            }
            TxnOp::Txn(_) => unreachable!("nested txns are walked by TakenPath::run"),
        })
    }

    /// A put that keeps the key's current value or lease. The key was live before the txn
    /// (checked), and no earlier op of the txn wrote it (validation refuses a put after a delete
    /// of its key, and two puts of one key that could both run).
    fn put_keeping(
        &mut self,
        put: &PutRequest,
        keep: KeepCurrent,
    ) -> Result<PutResponse, StorageFailure> {
        let current = self.current_kv(&put.key, keep.value)?.ok_or_else(|| {
            StorageFailure::Invariant("a keeping put's key was checked to be live".into())
        })?;
        let kept = PutRequest {
            key: put.key.clone(),
            value: if keep.value {
                current.value
            } else {
                put.value.clone()
            },
            lease: if keep.lease { current.lease } else { put.lease },
            prev_kv: put.prev_kv,
        };
        self.put(&kept)
    }

    /// Reads the state as changed so far by this request, or at the revision a txn's get names.
    fn read_current(
        &self,
        request: &RangeRequest,
        limit: u64,
    ) -> Result<RangeResponse, StorageFailure> {
        let keys = request
            .range
            .as_ref()
            .ok_or_else(|| StorageFailure::Invariant("validated range has no keys".into()))?;
        let written_anything = self.next_position > 0;
        let revision = match request.revision {
            // Checked before the txn wrote anything (`check_read_revision`).
            Some(revision) => revision,
            None if written_anything => self.revision,
            None => self.revision - 1,
        };
        let resolved = ResolvedRange {
            start: keys.start.clone(),
            end: keys.exclusive_end(),
            revision,
            limit,
            keys_only: request.keys_only,
            count_only: request.count_only,
            known_count: None,
        };
        self.tables
            .read_range(&resolved)
            .map_err(ReadError::into_failure)
    }

    /// The newest index entry of `key` as changed so far by this request, if the key is live.
    fn current_entry(&self, key: &[u8]) -> Result<Option<IndexEntry>, StorageFailure> {
        let entry = self
            .tables
            .index_entry_at(key, self.revision)
            .map_err(ReadError::into_failure)?;
        Ok(entry.filter(|entry| !entry.tombstone))
    }

    /// The current key-value of `key` as changed so far by this request, if the key is live.
    fn current_kv(&self, key: &[u8], with_value: bool) -> Result<Option<KeyValue>, StorageFailure> {
        match self.current_entry(key)? {
            Some(entry) => self.tables.kv_for_entry(key, &entry, with_value).map(Some),
            None => Ok(None),
        }
    }

    /// Deletes one live key: its tombstone at the next position of this revision.
    fn record_tombstone(&mut self, key: &[u8]) -> Result<(), StorageFailure> {
        self.live_keys = self.live_keys.checked_sub(1).ok_or_else(|| {
            StorageFailure::Invariant("a delete found more live keys than the store counts".into())
        })?;
        self.record_history(VersionRecord {
            key: key.to_vec(),
            value: Vec::new(),
            create_revision: 0,
            version: 0,
            lease: 0,
            tombstone: true,
        })
    }

    /// Writes one history entry and its key-index entry at the next position of this revision.
    fn record_history(&mut self, record: VersionRecord) -> Result<(), StorageFailure> {
        let position = self.next_position;
        self.next_position = position.checked_add(1).ok_or_else(|| {
            StorageFailure::Invariant("more than 2^32 changes in one revision".into())
        })?;
        self.tables.insert_version(self.revision, position, &record)
    }
}

/// The most entries `MvccStore::apply_batch_if_small` counts as small.
pub(super) const SMALL_APPLY_MAX_ENTRIES: usize = 8;

/// An entry whose apply touches a bounded number of keys: a put, or a txn whose every op names one
/// key; the work of a range delete or a lease revoke grows with the keys it finds.
pub(super) fn is_small_entry(entry: &ApplyEntry) -> bool {
    match &entry.payload {
        EntryPayload::Blank => true,
        EntryPayload::Request(Request::Put(_)) => true,
        EntryPayload::Request(Request::Txn(txn)) => is_small_txn(txn),
        _ => false,
    }
}

/// A txn whose compares and ops each name one key, at every level of nesting.
fn is_small_txn(txn: &TxnRequest) -> bool {
    let single = |range: &KeyRange| matches!(range.end, RangeEnd::Single);
    let compares_single_keys = txn
        .compare
        .iter()
        .all(|compare| compare.range_end == RangeEnd::Single);
    compares_single_keys
        && txn.success.iter().chain(&txn.failure).all(|op| match op {
            TxnOp::Put(_) | TxnOp::PutKeeping { .. } => true,
            TxnOp::DeleteRange(delete) => single(&delete.range),
            TxnOp::Get(get) => get.range.as_ref().is_some_and(single),
            TxnOp::Txn(nested) => is_small_txn(nested),
        })
}
