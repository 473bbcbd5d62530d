//! The write path: one request at a time, inside the batch's write transaction.
//!
//! A request is validated completely before it writes anything. Every change it makes is written at
//! one pending revision (current + 1), each at the next position within that revision; the revision
//! is taken only if at least one change was written, so a no-op does not bump it.

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, Error, Result};
use crate::limits::Limits;
use crate::mvcc::read::ResolvedRange;
use crate::mvcc::tables::{IndexEntry, StoreState, WriteTables};
use crate::mvcc::validate::validate_request;
use crate::types::{ApplyOutcome, DeleteRangeResponse};
use crate::types::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyValue, PutRequest, PutResponse,
    RangeRequest, RangeResponse, Request, Response, TxnOp, TxnOpResponse, TxnRequest, TxnResponse,
};

/// Applies one request. `Err` is a storage fault that must abort the whole batch; a rejected
/// request is an `Ok` outcome carrying the rejection.
pub(crate) fn apply_request(
    tables: &mut WriteTables<'_, '_>,
    state: &mut StoreState,
    request: &Request,
    limits: &Limits,
) -> Result<ApplyOutcome> {
    if let Err(rejection) = validate_request(request, limits) {
        return Ok(rejected(state, rejection));
    }
    if let Request::Compact { revision } = request {
        return compact_request(tables, state, *revision);
    }
    let mut change = Change {
        tables,
        revision: state.current_revision + 1,
        next_position: 0,
        live_keys: state.live_keys,
        limits,
    };
    let response = match request {
        Request::Put(put) => Response::Put(change.put(put)?),
        Request::DeleteRange(delete) => Response::DeleteRange(change.delete_range(delete)?),
        Request::Txn(txn) => Response::Txn(change.txn(txn)?),
        Request::Compact { .. } => unreachable!("compaction was handled above"),
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

fn rejected(state: &StoreState, rejection: Error) -> ApplyOutcome {
    debug_assert!(rejection.is_request_rejection());
    ApplyOutcome {
        revision: state.current_revision,
        result: Err(rejection),
    }
}

fn compact_request(
    tables: &mut WriteTables<'_, '_>,
    state: &mut StoreState,
    revision: u64,
) -> Result<ApplyOutcome> {
    if revision > state.current_revision {
        let rejection = Error::FutureRevision {
            requested: revision,
            current: state.current_revision,
        };
        return Ok(rejected(state, rejection));
    }
    if revision <= state.compact_revision {
        let rejection = Error::Compacted {
            requested: revision,
            compact_revision: state.compact_revision,
        };
        return Ok(rejected(state, rejection));
    }
    tables.compact_history(state.compact_revision, revision)?;
    state.compact_revision = revision;
    Ok(ApplyOutcome {
        revision: state.current_revision,
        result: Ok(Response::Compact),
    })
}

/// The changes of one request, all at `revision`.
struct Change<'a, 'f, 't> {
    tables: &'a mut WriteTables<'f, 't>,
    revision: u64,
    next_position: u32,
    /// The store's live-key count as changed so far by this request.
    live_keys: u64,
    limits: &'a Limits,
}

impl Change<'_, '_, '_> {
    fn put(&mut self, put: &PutRequest) -> Result<PutResponse> {
        let previous = self.current_entry(&put.key)?;
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

    fn delete_range(&mut self, delete: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        let doomed_keys = RangeRequest {
            range: Some(delete.range.clone()),
            keys_only: !delete.prev_kv,
            ..RangeRequest::default()
        };
        // A delete removes every key in its range, so it is not capped by `max_range_keys`.
        let doomed = self.read_current(&doomed_keys, u64::MAX)?;
        for kv in &doomed.kvs {
            self.live_keys = self.live_keys.checked_sub(1).ok_or_else(|| {
                Error::Invariant("a delete found more live keys than the store counts".into())
            })?;
            self.record_history(VersionRecord {
                key: kv.key.clone(),
                value: Vec::new(),
                create_revision: 0,
                version: 0,
                lease: 0,
                tombstone: true,
            })?;
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

    fn txn(&mut self, txn: &TxnRequest) -> Result<TxnResponse> {
        let mut succeeded = true;
        for compare in &txn.compare {
            let with_value = matches!(compare.target, CompareTarget::Value(_));
            let current = self.current_kv(&compare.key, with_value)?;
            if !compare_holds(current.as_ref(), compare) {
                succeeded = false;
                break;
            }
        }
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let mut responses = Vec::with_capacity(branch.len());
        for op in branch {
            responses.push(match op {
                TxnOp::Put(put) => TxnOpResponse::Put(self.put(put)?),
                TxnOp::DeleteRange(delete) => {
                    TxnOpResponse::DeleteRange(self.delete_range(delete)?)
                }
                TxnOp::Get(get) => {
                    let cap = self.limits.max_range_keys;
                    let limit = get.limit.unwrap_or(cap).min(cap);
                    TxnOpResponse::Get(self.read_current(get, limit)?)
                }
            });
        }
        Ok(TxnResponse {
            succeeded,
            responses,
        })
    }

    /// Reads the state as changed so far by this request.
    fn read_current(&self, request: &RangeRequest, limit: u64) -> Result<RangeResponse> {
        let keys = request
            .range
            .as_ref()
            .ok_or_else(|| Error::Invariant("validated range has no keys".into()))?;
        let written_anything = self.next_position > 0;
        let resolved = ResolvedRange {
            start: keys.start.clone(),
            end: keys.exclusive_end(),
            revision: if written_anything {
                self.revision
            } else {
                self.revision - 1
            },
            limit,
            keys_only: request.keys_only,
            count_only: request.count_only,
            known_count: None,
        };
        self.tables.read_range(&resolved)
    }

    /// The newest index entry of `key` as changed so far by this request, if the key is live.
    fn current_entry(&self, key: &[u8]) -> Result<Option<IndexEntry>> {
        let entry = self.tables.index_entry_at(key, self.revision)?;
        Ok(entry.filter(|entry| !entry.tombstone))
    }

    /// The current key-value of `key` as changed so far by this request, if the key is live.
    fn current_kv(&self, key: &[u8], with_value: bool) -> Result<Option<KeyValue>> {
        match self.current_entry(key)? {
            Some(entry) => self.tables.kv_for_entry(key, &entry, with_value).map(Some),
            None => Ok(None),
        }
    }

    /// Writes one history entry and its key-index entry at the next position of this revision.
    fn record_history(&mut self, record: VersionRecord) -> Result<()> {
        let file = self.tables.file;
        let position = self.next_position;
        self.next_position = position
            .checked_add(1)
            .ok_or_else(|| Error::Invariant("more than 2^32 changes in one revision".into()))?;
        let bytes = codec::encode(&record).map_err(corrupt(file))?;
        self.tables
            .history
            .insert((self.revision, position), bytes.as_slice())
            .map_err(db_error(file))?;
        let entry = IndexEntry::for_record(&record, self.revision, position);
        self.tables
            .index
            .insert((record.key.as_slice(), self.revision), entry.to_stored())
            .map_err(db_error(file))?;
        Ok(())
    }
}

/// Evaluates one compare as etcd does: a missing key has version, revisions and lease 0, and any
/// value compare on a missing key fails.
pub(crate) fn compare_holds(current: Option<&KeyValue>, compare: &Compare) -> bool {
    use std::cmp::Ordering;
    let ordering = match (&compare.target, current) {
        (CompareTarget::Value(_), None) => return false,
        (CompareTarget::Value(expected), Some(kv)) => kv.value.as_slice().cmp(expected.as_slice()),
        (CompareTarget::Version(expected), kv) => kv.map_or(0, |kv| kv.version).cmp(expected),
        (CompareTarget::CreateRevision(expected), kv) => {
            kv.map_or(0, |kv| kv.create_revision).cmp(expected)
        }
        (CompareTarget::ModRevision(expected), kv) => {
            kv.map_or(0, |kv| kv.mod_revision).cmp(expected)
        }
        (CompareTarget::Lease(expected), kv) => kv.map_or(0, |kv| kv.lease).cmp(expected),
    };
    match compare.op {
        CompareOp::Equal => ordering == Ordering::Equal,
        CompareOp::NotEqual => ordering != Ordering::Equal,
        CompareOp::Less => ordering == Ordering::Less,
        CompareOp::Greater => ordering == Ordering::Greater,
    }
}
