//! Request validation: every limit and rule that can reject a request is checked here, before the
//! store writes a byte of it, so a rejected request never leaves a half-applied change.
//!
//! Validation depends only on the request and the limits, so every member reaches the same verdict;
//! the node layer calls it too, to refuse bad input before proposing it to raft.

use crate::error::{Malformed, Rejection, TxnBranch};
use crate::limits::Limits;
use std::collections::BTreeSet;

use crate::types::{
    CheckpointedLease, KeepCurrent, KeyRange, PutRequest, RangeEnd, RangeRequest, Request, TxnOp,
    TxnRequest,
};

/// Checks a replicated request against the limits and the txn rules.
pub fn validate_request(request: &Request, limits: &Limits) -> Result<(), Rejection> {
    match request {
        Request::Put(put) => validate_put(put, limits),
        Request::DeleteRange(delete) => validate_key_range(&delete.range, limits),
        Request::Txn(txn) => validate_txn(txn, limits),
        Request::Compact { revision } if *revision == 0 => Err(Rejection::Invalid(
            "compact revision must be at least 1".into(),
        )),
        Request::Compact { .. } => Ok(()),
        Request::LeaseGrant { id, ttl_seconds } => {
            limits.check_lease_id(*id)?;
            limits.check_lease_ttl(*ttl_seconds)
        }
        Request::LeaseRevoke { id } | Request::LeaseCheckpointClear { id } => {
            limits.check_lease_id(*id)
        }
        Request::LeaseCheckpoint { leases, .. } => validate_checkpoint(leases, limits),
        Request::Alarm { alarm, .. } if alarm.member_id == 0 => Err(Rejection::Invalid(
            "an alarm names a member id, never 0".into(),
        )),
        Request::Alarm { .. } => Ok(()),
        // The records check names and limits when applying (`auth::AuthState::apply`).
        Request::Auth(_) => Ok(()),
        Request::LearnerPromotion(change) => super::learner_promotions::validate_change(change),
    }
}

/// A checkpoint names at most `max_leases` leases, each with a valid id and a remaining TTL no
/// longer than the longest TTL.
fn validate_checkpoint(leases: &[CheckpointedLease], limits: &Limits) -> Result<(), Rejection> {
    if leases.len() as u64 > limits.max_leases {
        return Err(Rejection::Invalid(format!(
            "a checkpoint of {} leases is over the limit of {}",
            leases.len(),
            limits.max_leases
        )));
    }
    let longest_ms = u64::try_from(limits.max_lease_ttl_seconds)
        .unwrap_or(0)
        .saturating_mul(1000);
    for lease in leases {
        limits.check_lease_id(lease.id)?;
        if lease.remaining_ttl_ms > longest_ms {
            return Err(Rejection::Invalid(format!(
                "lease {} is checkpointed with {} ms left, more than the longest TTL",
                lease.id, lease.remaining_ttl_ms
            )));
        }
    }
    Ok(())
}

/// Checks a top-level range read.
pub fn validate_range(range: &RangeRequest, limits: &Limits) -> Result<(), Rejection> {
    let keys = range
        .range
        .as_ref()
        .ok_or_else(|| Rejection::Invalid("a range read needs a key or prefix".into()))?;
    validate_key_range(keys, limits)?;
    if range.revision == Some(0) {
        return Err(Rejection::Invalid("revision must be at least 1".into()));
    }
    if range.limit == Some(0) {
        return Err(Rejection::Invalid("limit must be at least 1".into()));
    }
    Ok(())
}

fn validate_put(put: &PutRequest, limits: &Limits) -> Result<(), Rejection> {
    limits.check_key(&put.key)?;
    limits.check_value(&put.value)?;
    if put.lease != 0 {
        limits.check_lease_id(put.lease)?;
    }
    Ok(())
}

/// A single-key range needs a non-empty key; a bounded or open range may start at the empty key
/// (the whole key space).
fn validate_key_range(range: &KeyRange, limits: &Limits) -> Result<(), Rejection> {
    match &range.end {
        RangeEnd::Single => limits.check_key(&range.start),
        RangeEnd::Until(end) => {
            check_bound(&range.start, limits)?;
            check_bound(end, limits)
        }
        RangeEnd::Unbounded => check_bound(&range.start, limits),
    }
}

fn check_bound(bound: &[u8], limits: &Limits) -> Result<(), Rejection> {
    if bound.len() > limits.max_key_bytes {
        return Err(Rejection::Invalid(format!(
            "range bound is {} bytes; the limit is {}",
            bound.len(),
            limits.max_key_bytes
        )));
    }
    Ok(())
}

/// How deep txns may nest inside one another. etcd sets no depth of its own, but its gRPC
/// decoder stops at 100 nested messages, about 49 levels of txns; 64 refuses nothing a gRPC client
/// can send and keeps every recursive walk of a txn shallow.
pub const MAX_TXN_NESTING: usize = 64;

/// Checks a txn against the limits, whether it goes through the log or is only read
/// (`MvccStore::read_txn`).
///
/// As etcd's `checkTxnRequest`: each level's compares, success ops and failure ops are at most a
/// budget, `max_txn_ops` at the top, and a nested txn's budget is what its parent left (the
/// budget less the parent's largest of the three), so every path from the top counts at most
/// `max_txn_ops`. Beyond etcd, the ops and compares of all nested txns together are at most
/// `max_nested_txn_ops`, and nesting is at most `MAX_TXN_NESTING` deep. Then etcd's rule on keys
/// (`checkIntervals`), for each top-level branch.
pub fn validate_txn(txn: &TxnRequest, limits: &Limits) -> Result<(), Rejection> {
    let mut nested_ops = 0;
    validate_txn_level(txn, limits.max_txn_ops, 0, &mut nested_ops, limits)?;
    check_written_keys(&txn.success)?;
    check_written_keys(&txn.failure)?;
    Ok(())
}

/// Checks one level of a txn within `budget` ops, and the levels nested in it.
fn validate_txn_level(
    txn: &TxnRequest,
    budget: usize,
    depth: usize,
    nested_ops: &mut usize,
    limits: &Limits,
) -> Result<(), Rejection> {
    if depth > MAX_TXN_NESTING {
        return Err(Rejection::Invalid(format!(
            "txns are nested more than {MAX_TXN_NESTING} deep"
        )));
    }
    let counts = [
        (TxnBranch::Compare, txn.compare.len()),
        (TxnBranch::Success, txn.success.len()),
        (TxnBranch::Failure, txn.failure.len()),
    ];
    for (branch, count) in counts {
        if count > budget {
            return Err(Rejection::Malformed(Malformed::TooManyTxnOps {
                branch,
                count: count as u64,
                limit: budget as u64,
            }));
        }
    }
    if depth > 0 {
        *nested_ops += txn.compare.len() + txn.success.len() + txn.failure.len();
        if *nested_ops > limits.max_nested_txn_ops {
            return Err(Rejection::Invalid(format!(
                "the nested txns hold more than {} ops and compares together (max_nested_txn_ops)",
                limits.max_nested_txn_ops
            )));
        }
    }
    for compare in &txn.compare {
        validate_compare_keys(&compare.keys(), limits)?;
    }
    let used = counts.iter().map(|(_, count)| *count).max().unwrap_or(0);
    for op in txn.success.iter().chain(&txn.failure) {
        match op {
            TxnOp::Put(put) => validate_put(put, limits)?,
            TxnOp::PutKeeping { put, keep } => validate_put_keeping(put, *keep, limits)?,
            TxnOp::DeleteRange(delete) => validate_key_range(&delete.range, limits)?,
            TxnOp::Get(get) => validate_txn_get(get, limits)?,
            TxnOp::Txn(nested) => {
                validate_txn_level(nested, budget - used, depth + 1, nested_ops, limits)?
            }
        }
    }
    Ok(())
}

/// A compare names a non-empty key, and its range's bounds are within the key limit.
fn validate_compare_keys(keys: &KeyRange, limits: &Limits) -> Result<(), Rejection> {
    limits.check_key(&keys.start)?;
    validate_key_range(keys, limits)
}

/// A put that keeps the current value carries none, and one that keeps the current lease names
/// none (etcd's "value is provided" and "lease is provided").
fn validate_put_keeping(
    put: &PutRequest,
    keep: KeepCurrent,
    limits: &Limits,
) -> Result<(), Rejection> {
    if keep.value && !put.value.is_empty() {
        return Err(Rejection::Invalid(
            "a put that keeps the current value (ignore_value) must carry no value".into(),
        ));
    }
    if keep.lease && put.lease != 0 {
        return Err(Rejection::Invalid(
            "a put that keeps the current lease (ignore_lease) must name no lease".into(),
        ));
    }
    validate_put(put, limits)
}

/// The keys one branch writes, its nested txns' included: what `check_written_keys` compares.
struct WrittenKeys<'t> {
    puts: BTreeSet<&'t [u8]>,
    deletes: Vec<&'t KeyRange>,
}

impl WrittenKeys<'_> {
    fn deleted(&self, key: &[u8]) -> bool {
        self.deletes.iter().any(|range| range.contains(key))
    }
}

/// etcd's rule on the keys of one branch (`checkIntervals`): no key is put twice where both puts
/// could run, and no put falls in a delete range that could run with it. A nested txn's success
/// and failure never both run, so they may put the same key; its puts must not fall in the
/// deletes of this level or of the nested txns before it, and this level's puts must not fall in
/// any delete of this level or below. Fails with `duplicate key given in txn request`.
///
/// One check more than etcd's: a delete in a nested txn must not cover a key a nested txn before
/// it puts. etcd lets that pair through (its check looks only at puts after deletes) and writes
/// the key twice at one revision; revkv's key index holds at most one version of a key per
/// revision, as a flat txn can only ever write, so the pair is refused like the others.
fn check_written_keys(ops: &[TxnOp]) -> Result<(), Rejection> {
    written_keys(ops).map(|_| ())
}

fn written_keys(ops: &[TxnOp]) -> Result<WrittenKeys<'_>, Rejection> {
    let mut written = WrittenKeys {
        puts: BTreeSet::new(),
        deletes: ops
            .iter()
            .filter_map(|op| match op {
                TxnOp::DeleteRange(delete) => Some(&delete.range),
                _ => None,
            })
            .collect(),
    };
    for op in ops {
        let TxnOp::Txn(nested) = op else { continue };
        let on_success = written_keys(&nested.success)?;
        let on_failure = written_keys(&nested.failure)?;
        for key in &on_success.puts {
            if written.puts.contains(key) || written.deleted(key) {
                return Err(duplicate_key(key));
            }
        }
        for key in &on_failure.puts {
            let put_elsewhere = written.puts.contains(key) && !on_success.puts.contains(key);
            if put_elsewhere || written.deleted(key) {
                return Err(duplicate_key(key));
            }
        }
        for range in on_success.deletes.iter().chain(&on_failure.deletes) {
            if let Some(key) = written.puts.iter().find(|key| range.contains(key)) {
                return Err(duplicate_key(key));
            }
        }
        written.puts.extend(on_success.puts);
        written.puts.extend(on_failure.puts);
        written.deletes.extend(on_success.deletes);
        written.deletes.extend(on_failure.deletes);
    }
    for op in ops {
        let key = match op {
            TxnOp::Put(put) | TxnOp::PutKeeping { put, .. } => put.key.as_slice(),
            _ => continue,
        };
        if !written.puts.insert(key) || written.deleted(key) {
            return Err(duplicate_key(key));
        }
    }
    Ok(written)
}

/// A get inside a txn may read at a revision (checked against the store when the txn runs), but
/// never continues a paged read.
fn validate_txn_get(get: &RangeRequest, limits: &Limits) -> Result<(), Rejection> {
    validate_range(get, limits)?;
    if get.continue_token.is_some() {
        return Err(Rejection::Invalid(
            "a get inside a txn cannot continue a paged read".into(),
        ));
    }
    Ok(())
}

fn duplicate_key(key: &[u8]) -> Rejection {
    Rejection::Malformed(Malformed::DuplicateTxnKey {
        key: String::from_utf8_lossy(key).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Compare, CompareOp, CompareTarget, DeleteRangeRequest};

    fn put(key: &str) -> TxnOp {
        TxnOp::Put(PutRequest {
            key: key.into(),
            value: b"v".to_vec(),
            lease: 0,
            prev_kv: false,
        })
    }

    fn txn(success: Vec<TxnOp>) -> Request {
        Request::Txn(TxnRequest {
            compare: vec![],
            success,
            failure: vec![],
        })
    }

    #[test]
    fn duplicate_puts_and_puts_inside_deletes_are_rejected() {
        let limits = Limits::default();
        assert!(validate_request(&txn(vec![put("a"), put("b")]), &limits).is_ok());
        assert_eq!(
            validate_request(&txn(vec![put("a"), put("a")]), &limits),
            Err(Rejection::Malformed(Malformed::DuplicateTxnKey {
                key: "a".into()
            }))
        );
        let delete_prefix = TxnOp::DeleteRange(DeleteRangeRequest {
            range: KeyRange::prefix("a"),
            prev_kv: false,
        });
        assert_eq!(
            validate_request(&txn(vec![delete_prefix.clone(), put("ab")]), &limits),
            Err(Rejection::Malformed(Malformed::DuplicateTxnKey {
                key: "ab".into()
            }))
        );
        assert!(validate_request(&txn(vec![delete_prefix, put("b")]), &limits).is_ok());
    }

    /// The kinds became values, but the words a client of the HTTP API reads stay what they were.
    #[test]
    fn malformed_requests_are_worded_as_they_always_were() {
        let words = |malformed: Malformed| Rejection::Malformed(malformed).to_string();
        assert_eq!(
            words(Malformed::EmptyKey),
            "invalid request: key must not be empty"
        );
        let too_many = Malformed::TooManyTxnOps {
            branch: TxnBranch::Compare,
            count: 129,
            limit: 128,
        };
        assert_eq!(
            words(too_many),
            "invalid request: txn has 129 compare entries; the limit is 128"
        );
        let duplicate = Malformed::DuplicateTxnKey { key: "a".into() };
        assert_eq!(
            words(duplicate),
            "invalid request: duplicate key given in txn request: a"
        );
    }

    #[test]
    fn op_limits_and_key_limits_are_enforced() {
        let limits = Limits {
            max_txn_ops: 2,
            max_key_bytes: 3,
            ..Limits::default()
        };
        assert_eq!(
            validate_request(&txn(vec![put("a"), put("b"), put("c")]), &limits),
            Err(Rejection::Malformed(Malformed::TooManyTxnOps {
                branch: TxnBranch::Success,
                count: 3,
                limit: 2
            }))
        );
        assert_eq!(
            validate_request(&txn(vec![put("")]), &limits),
            Err(Rejection::Malformed(Malformed::EmptyKey))
        );
        assert!(validate_request(&txn(vec![put("abcd")]), &limits).is_err());
        let compares = Request::Txn(TxnRequest {
            compare: vec![
                Compare {
                    key: b"k".to_vec(),
                    range_end: RangeEnd::Single,
                    target: CompareTarget::Version(0),
                    op: CompareOp::Equal,
                };
                3
            ],
            success: vec![],
            failure: vec![],
        });
        assert!(validate_request(&compares, &limits).is_err());
        let big_value = Request::Put(PutRequest {
            key: b"k".to_vec(),
            value: vec![0; limits.max_value_bytes + 1],
            lease: 0,
            prev_kv: false,
        });
        assert!(matches!(
            validate_request(&big_value, &limits),
            Err(Rejection::TooLarge(_))
        ));
        let empty_key = Request::Put(PutRequest {
            key: Vec::new(),
            value: Vec::new(),
            lease: 0,
            prev_kv: false,
        });
        assert!(validate_request(&empty_key, &limits).is_err());
    }
}
