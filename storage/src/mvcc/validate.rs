//! Request validation: every limit and rule that can reject a request is checked here, before the
//! store writes a byte of it, so a rejected request never leaves a half-applied change.
//!
//! Validation depends only on the request and the limits, so every member reaches the same verdict;
//! the node layer calls it too, to refuse bad input before proposing it to raft.

use crate::error::{Malformed, Rejection, TxnBranch};
use crate::limits::Limits;
use crate::types::{
    CheckpointedLease, DeleteRangeRequest, KeyRange, PutRequest, RangeEnd, RangeRequest, Request,
    TxnOp, TxnRequest,
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

/// Checks a txn against the limits, whether it goes through the log or is only read
/// (`MvccStore::read_txn`).
pub fn validate_txn(txn: &TxnRequest, limits: &Limits) -> Result<(), Rejection> {
    for (branch, count) in [
        (TxnBranch::Compare, txn.compare.len()),
        (TxnBranch::Success, txn.success.len()),
        (TxnBranch::Failure, txn.failure.len()),
    ] {
        if count > limits.max_txn_ops {
            return Err(Rejection::Malformed(Malformed::TooManyTxnOps {
                branch,
                count: count as u64,
                limit: limits.max_txn_ops as u64,
            }));
        }
    }
    for compare in &txn.compare {
        limits.check_key(&compare.key)?;
    }
    validate_branch(&txn.success, limits)?;
    validate_branch(&txn.failure, limits)
}

/// Checks each op, and that no key is written twice in the branch: puts must name distinct keys,
/// and no put may fall inside a delete range of the same branch (etcd's rule).
fn validate_branch(ops: &[TxnOp], limits: &Limits) -> Result<(), Rejection> {
    let mut put_keys: Vec<&[u8]> = Vec::new();
    let mut delete_ranges: Vec<&DeleteRangeRequest> = Vec::new();
    for op in ops {
        match op {
            TxnOp::Put(put) => {
                validate_put(put, limits)?;
                put_keys.push(&put.key);
            }
            TxnOp::DeleteRange(delete) => {
                validate_key_range(&delete.range, limits)?;
                delete_ranges.push(delete);
            }
            TxnOp::Get(get) => validate_txn_get(get, limits)?,
        }
    }
    put_keys.sort_unstable();
    if let Some(pair) = put_keys.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(duplicate_key(pair[0]));
    }
    for key in &put_keys {
        if delete_ranges
            .iter()
            .any(|delete| delete.range.contains(key))
        {
            return Err(duplicate_key(key));
        }
    }
    Ok(())
}

fn validate_txn_get(get: &RangeRequest, limits: &Limits) -> Result<(), Rejection> {
    validate_range(get, limits)?;
    if get.revision.is_some() || get.continue_token.is_some() {
        return Err(Rejection::Invalid(
            "a get inside a txn reads the txn's own state: revision and continue are not allowed"
                .into(),
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
    use crate::types::{Compare, CompareOp, CompareTarget};

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
