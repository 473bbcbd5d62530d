//! What a request needs to be allowed, decided once for every front-end (HTTP and gRPC) from the
//! request itself: a put needs write on its key, a delete write on its range (and read when it
//! returns the deleted values), a txn read on every compared key plus what each op of *both*
//! branches needs (the caller must not learn which branch runs before it is allowed to run
//! either), and administration needs `root`. This is etcd's rule set (`checkTxnAuth` and
//! friends), kept as a pure function so it is tested without a member.
//!
//! It sits beside `auth` rather than inside it: it reads the request types (`crate::types`), whose
//! `Request::Auth` holds `auth`'s records, so inside `auth` the two modules would import each
//! other.

use crate::auth::{Access, AccessRules};
use crate::types::{DeleteRangeRequest, KeyRange, PutRequest, Request, TxnOp, TxnRequest};

/// What a request needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Any authenticated user (a lease grant; a revoke's keys are checked by the front-end, which
    /// reads them from the lease).
    Authenticated,
    /// Every listed access to every key of its range.
    Keys(Vec<(Access, KeyRange)>),
    /// The `root` role (compaction, alarms, auth administration, the leader's own lease
    /// checkpoints).
    Root,
}

impl Requirement {
    /// True when `rules` satisfy this requirement.
    pub fn is_met_by(&self, rules: &AccessRules) -> bool {
        match self {
            Requirement::Authenticated => true,
            Requirement::Keys(needed) => needed
                .iter()
                .all(|(access, keys)| rules.permits(*access, keys)),
            Requirement::Root => rules.is_root(),
        }
    }
}

/// What `request` needs.
pub fn requirement_of(request: &Request) -> Requirement {
    let mut needed = Vec::new();
    match request {
        Request::Put(put) => put_needs(put, &mut needed),
        Request::DeleteRange(delete) => delete_needs(delete, &mut needed),
        Request::Txn(txn) => return requirement_of_txn(txn),
        Request::LeaseGrant { .. } | Request::LeaseRevoke { .. } => {
            return Requirement::Authenticated
        }
        Request::Compact { .. }
        | Request::LeaseCheckpoint { .. }
        | Request::LeaseCheckpointClear { .. }
        | Request::Alarm { .. }
        | Request::Auth(_)
        | Request::LearnerPromotion(_) => return Requirement::Root,
    }
    Requirement::Keys(needed)
}

/// What a txn needs, whether it writes or only reads: read access to every compare's keys, and
/// what each op of both branches needs, at every level of nesting (etcd's
/// `checkTxnReqsPermission` recurses the same way).
pub fn requirement_of_txn(txn: &TxnRequest) -> Requirement {
    let mut needed = Vec::new();
    txn_needs(txn, &mut needed);
    Requirement::Keys(needed)
}

fn txn_needs(txn: &TxnRequest, needed: &mut Vec<(Access, KeyRange)>) {
    for compare in &txn.compare {
        needed.push((Access::Read, compare.keys()));
    }
    for op in txn.success.iter().chain(&txn.failure) {
        op_needs(op, needed);
    }
}

fn op_needs(op: &TxnOp, needed: &mut Vec<(Access, KeyRange)>) {
    match op {
        TxnOp::Txn(nested) => txn_needs(nested, needed),
        // Keeping the current value or lease reveals nothing of them: a put's need.
        TxnOp::Put(put) | TxnOp::PutKeeping { put, .. } => put_needs(put, needed),
        TxnOp::DeleteRange(delete) => delete_needs(delete, needed),
        TxnOp::Get(read) => {
            // A read without a range is refused by validation; it touches no key.
            if let Some(keys) = &read.range {
                needed.push((Access::Read, keys.clone()));
            }
        }
    }
}

fn put_needs(put: &PutRequest, needed: &mut Vec<(Access, KeyRange)>) {
    let key = KeyRange::single(put.key.clone());
    if put.prev_kv {
        needed.push((Access::Read, key.clone()));
    }
    needed.push((Access::Write, key));
}

fn delete_needs(delete: &DeleteRangeRequest, needed: &mut Vec<(Access, KeyRange)>) {
    if delete.prev_kv {
        needed.push((Access::Read, delete.range.clone()));
    }
    needed.push((Access::Write, delete.range.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Permission, PermissionKind};
    use crate::types::{Compare, CompareOp, CompareTarget, RangeRequest, TxnRequest};

    fn rules_on(kind: PermissionKind, prefix: &str) -> AccessRules {
        let permission = Permission {
            kind,
            keys: KeyRange::prefix(prefix),
        };
        AccessRules::of_roles([("app", std::slice::from_ref(&permission))])
    }

    fn put(key: &str, prev_kv: bool) -> PutRequest {
        PutRequest {
            key: key.into(),
            value: b"v".to_vec(),
            lease: 0,
            prev_kv,
        }
    }

    #[test]
    fn a_put_needs_write_and_a_put_returning_the_old_value_needs_read_too() {
        let write_only = rules_on(PermissionKind::Write, "app/");
        assert!(requirement_of(&Request::Put(put("app/a", false))).is_met_by(&write_only));
        assert!(!requirement_of(&Request::Put(put("app/a", true))).is_met_by(&write_only));
        assert!(!requirement_of(&Request::Put(put("other", false))).is_met_by(&write_only));
    }

    #[test]
    fn a_txn_needs_read_on_compares_and_every_op_of_both_branches() {
        let rules = rules_on(PermissionKind::ReadWrite, "app/");
        let txn = |failure_key: &str| {
            Request::Txn(TxnRequest {
                compare: vec![Compare {
                    key: b"app/a".to_vec(),
                    range_end: crate::types::RangeEnd::Single,
                    target: CompareTarget::Version(0),
                    op: CompareOp::Equal,
                }],
                success: vec![TxnOp::Put(put("app/a", false))],
                failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single(failure_key)))],
            })
        };
        assert!(requirement_of(&txn("app/b")).is_met_by(&rules));
        // The failure branch reads outside the permission: refused even if it would not run.
        assert!(!requirement_of(&txn("secret")).is_met_by(&rules));
        let write_only = rules_on(PermissionKind::Write, "app/");
        assert!(
            !requirement_of(&txn("app/b")).is_met_by(&write_only),
            "a compare reads its key"
        );
    }

    #[test]
    fn a_nested_txn_needs_what_each_of_its_levels_needs_and_a_range_compare_reads_its_range() {
        let rules = rules_on(PermissionKind::ReadWrite, "app/");
        let with_nested = |nested_compare: Compare, nested_put: &str| {
            Request::Txn(TxnRequest {
                compare: Vec::new(),
                success: vec![TxnOp::Txn(TxnRequest {
                    compare: vec![nested_compare],
                    success: Vec::new(),
                    failure: vec![TxnOp::Put(put(nested_put, false))],
                })],
                failure: Vec::new(),
            })
        };
        let inside = |end: &str| Compare {
            key: b"app/a".to_vec(),
            range_end: crate::types::RangeEnd::Until(end.into()),
            target: CompareTarget::Version(0),
            op: CompareOp::Equal,
        };
        assert!(requirement_of(&with_nested(inside("app/z"), "app/b")).is_met_by(&rules));
        assert!(
            !requirement_of(&with_nested(inside("b"), "app/b")).is_met_by(&rules),
            "the compare's range reaches past app/"
        );
        assert!(
            !requirement_of(&with_nested(inside("app/z"), "secret")).is_met_by(&rules),
            "the nested failure branch writes outside the permission"
        );
    }

    #[test]
    fn administration_needs_root_and_a_lease_grant_only_a_user() {
        let rules = rules_on(PermissionKind::ReadWrite, "");
        let compact = Request::Compact { revision: 1 };
        assert!(!requirement_of(&compact).is_met_by(&rules));
        assert!(requirement_of(&compact).is_met_by(&AccessRules::of_roles([("root", &[][..])])));
        let grant = Request::LeaseGrant {
            id: 1,
            ttl_seconds: 5,
        };
        assert!(requirement_of(&grant).is_met_by(&AccessRules::default()));
    }
}
