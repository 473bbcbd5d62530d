//! Alarms: raised and cleared through raft, kept in the state file's meta table, and the rules
//! they impose on the write path: while a NOSPACE alarm is raised, nothing that grows the store is
//! applied; while a CORRUPT alarm is raised, nothing that changes keys or leases is applied
//! (etcd 3.5's `applierV3Corrupt`: put, delete, txn, compaction, lease grant and revoke).
//!
//! The alarms are one record in the meta table (absent: none), so a file written before alarms
//! existed needs no upgrade. Every member applies the same alarm requests, so every member refuses
//! the same writes: the rule is deterministic, never a member's own view of its disk.

use std::path::Path;

use redb::ReadableTable;

use crate::codec;
use crate::error::{corrupt, db_error, Rejection, StorageFailure};
use crate::types::{Alarm, AlarmAction, AlarmKind, Request, TxnOp, TxnRequest};

/// The meta table's key of the alarm record.
const ALARMS_KEY: &str = "alarms";

/// Most alarms raised at once. Each member raises at most one per kind, but an Alarm request
/// (gRPC's ACTIVATE) may name any member id, so the record is bounded here, not by the membership.
pub(crate) const MAX_ALARMS: usize = 128;

/// The alarms raised, in order. More than one per member and kind never exists.
pub(crate) fn load_alarms(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<Vec<Alarm>, StorageFailure> {
    match meta.get(ALARMS_KEY).map_err(db_error(file))? {
        Some(bytes) => codec::decode(bytes.value()).map_err(corrupt(file)),
        None => Ok(Vec::new()),
    }
}

pub(crate) fn save_alarms(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    alarms: &[Alarm],
) -> Result<(), StorageFailure> {
    if alarms.is_empty() {
        meta.remove(ALARMS_KEY).map_err(db_error(file))?;
        return Ok(());
    }
    let bytes = codec::encode(&alarms.to_vec()).map_err(corrupt(file))?;
    meta.insert(ALARMS_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}

/// Raises or clears one alarm; raising one already raised, or clearing one that is not, changes
/// nothing (as in etcd). Raising a new one past `MAX_ALARMS` is refused and changes nothing.
pub(crate) fn change_alarm(
    alarms: &mut Vec<Alarm>,
    action: AlarmAction,
    alarm: Alarm,
) -> Result<(), Rejection> {
    match action {
        AlarmAction::Activate => {
            if let Err(position) = alarms.binary_search(&alarm) {
                if alarms.len() >= MAX_ALARMS {
                    return Err(Rejection::Invalid(format!(
                        "{MAX_ALARMS} alarms are raised, the limit; clear some first"
                    )));
                }
                alarms.insert(position, alarm);
            }
        }
        AlarmAction::Deactivate => alarms.retain(|raised| *raised != alarm),
    }
    debug_assert!(alarms.windows(2).all(|pair| pair[0] < pair[1]));
    Ok(())
}

/// The rejection `request` gets because of the alarms raised, if any. CORRUPT is checked first:
/// it refuses more, and its answer tells the operator about the graver problem.
pub(crate) fn refusal_by_alarms(alarms: &[Alarm], request: &Request) -> Option<Rejection> {
    let raised = |kind: AlarmKind| alarms.iter().any(|alarm| alarm.kind == kind);
    if raised(AlarmKind::Corrupt) && changes_data(request) {
        return Some(Rejection::CorruptCluster);
    }
    if raised(AlarmKind::NoSpace) && grows_store(request) {
        return Some(Rejection::NoSpace);
    }
    None
}

/// Whether a request is one etcd's corrupt applier refuses: everything that changes keys or leases.
/// A txn that only reads is served (etcd answers it without raft); lease checkpoints, alarms and
/// auth changes go through, so an operator can still disarm the alarm and manage users.
fn changes_data(request: &Request) -> bool {
    match request {
        Request::Put(_)
        | Request::DeleteRange(_)
        | Request::Compact { .. }
        | Request::LeaseGrant { .. }
        | Request::LeaseRevoke { .. } => true,
        Request::Txn(txn) => txn_writes(txn),
        Request::LeaseCheckpoint { .. }
        | Request::LeaseCheckpointClear { .. }
        | Request::Alarm { .. }
        | Request::Auth(_)
        | Request::LearnerPromotion(_) => false,
    }
}

fn txn_writes(txn: &TxnRequest) -> bool {
    !txn.reads_only()
}

/// Whether a request may add data: etcd's quota rule counts every put of a txn, in either branch,
/// whichever runs, so the answer does not depend on the compares.
fn grows_store(request: &Request) -> bool {
    match request {
        Request::Put(_) | Request::LeaseGrant { .. } => true,
        Request::Txn(txn) => txn_has_put(txn),
        Request::DeleteRange(_)
        | Request::Compact { .. }
        | Request::LeaseRevoke { .. }
        | Request::LeaseCheckpoint { .. }
        | Request::LeaseCheckpointClear { .. }
        | Request::Alarm { .. }
        | Request::Auth(_)
        | Request::LearnerPromotion(_) => false,
    }
}

/// A put anywhere in the txn, its nested txns included (etcd's `costTxn` counts them too).
fn txn_has_put(txn: &TxnRequest) -> bool {
    txn.success
        .iter()
        .chain(txn.failure.iter())
        .any(|op| match op {
            TxnOp::Put(_) | TxnOp::PutKeeping { .. } => true,
            TxnOp::Txn(nested) => txn_has_put(nested),
            TxnOp::DeleteRange(_) | TxnOp::Get(_) => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DeleteRangeRequest, KeyRange, PutRequest};

    fn no_space(member_id: u64) -> Alarm {
        Alarm {
            member_id,
            kind: AlarmKind::NoSpace,
        }
    }

    fn put() -> PutRequest {
        PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            lease: 0,
            prev_kv: false,
        }
    }

    #[test]
    fn raising_twice_keeps_one_and_clearing_removes_only_that_member() {
        let mut alarms = Vec::new();
        for member_id in [2, 1, 2] {
            change_alarm(&mut alarms, AlarmAction::Activate, no_space(member_id)).unwrap();
        }
        assert_eq!(alarms, vec![no_space(1), no_space(2)]);
        for member_id in [2, 3] {
            change_alarm(&mut alarms, AlarmAction::Deactivate, no_space(member_id)).unwrap();
        }
        assert_eq!(alarms, vec![no_space(1)]);
    }

    #[test]
    fn raising_past_the_limit_is_refused_and_changes_nothing() {
        let mut alarms = Vec::new();
        for member_id in 1..=MAX_ALARMS as u64 {
            change_alarm(&mut alarms, AlarmAction::Activate, no_space(member_id)).unwrap();
        }
        let full = alarms.clone();
        let refused = change_alarm(&mut alarms, AlarmAction::Activate, no_space(9_999));
        assert!(matches!(refused, Err(Rejection::Invalid(_))), "{refused:?}");
        assert_eq!(alarms, full);
        // One already raised is no new alarm: raising it again is fine at the limit.
        change_alarm(&mut alarms, AlarmAction::Activate, no_space(1)).unwrap();
        assert_eq!(alarms, full);
    }

    #[test]
    fn a_no_space_alarm_refuses_what_grows_the_store_and_nothing_else() {
        let alarms = vec![no_space(1)];
        let delete = DeleteRangeRequest {
            range: KeyRange::single("k"),
            prev_kv: false,
        };
        let txn_with_put_in_failure = TxnRequest {
            compare: Vec::new(),
            success: vec![TxnOp::DeleteRange(delete.clone())],
            failure: vec![TxnOp::Put(put())],
        };
        let txn_without_put = TxnRequest {
            compare: Vec::new(),
            success: vec![TxnOp::DeleteRange(delete.clone())],
            failure: Vec::new(),
        };
        let refused = |request: &Request| refusal_by_alarms(&alarms, request).is_some();
        assert!(refused(&Request::Put(put())));
        assert!(refused(&Request::LeaseGrant {
            id: 1,
            ttl_seconds: 10
        }));
        assert!(refused(&Request::Txn(txn_with_put_in_failure)));
        assert!(!refused(&Request::Txn(txn_without_put)));
        assert!(!refused(&Request::DeleteRange(delete)));
        assert!(!refused(&Request::Compact { revision: 1 }));
        assert!(refusal_by_alarms(&[], &Request::Put(put())).is_none());
    }

    #[test]
    fn a_corrupt_alarm_refuses_every_change_of_keys_or_leases_and_nothing_else() {
        let alarms = vec![Alarm {
            member_id: 3,
            kind: AlarmKind::Corrupt,
        }];
        let range = crate::types::RangeRequest::of(KeyRange::single("k"));
        let delete = DeleteRangeRequest {
            range: KeyRange::single("k"),
            prev_kv: false,
        };
        let read_only_txn = TxnRequest {
            compare: Vec::new(),
            success: vec![TxnOp::Get(range.clone())],
            failure: vec![TxnOp::Get(range)],
        };
        let deleting_txn = TxnRequest {
            compare: Vec::new(),
            success: Vec::new(),
            failure: vec![TxnOp::DeleteRange(delete.clone())],
        };
        let refusal = |request: &Request| refusal_by_alarms(&alarms, request);
        for refused in [
            Request::Put(put()),
            Request::DeleteRange(delete),
            Request::Txn(deleting_txn),
            Request::Compact { revision: 1 },
            Request::LeaseGrant {
                id: 1,
                ttl_seconds: 10,
            },
            Request::LeaseRevoke { id: 1 },
        ] {
            assert!(
                matches!(refusal(&refused), Some(Rejection::CorruptCluster)),
                "{refused:?}"
            );
        }
        assert!(refusal(&Request::Txn(read_only_txn)).is_none());
        assert!(refusal(&Request::LeaseCheckpointClear { id: 1 }).is_none());
        let disarm = Request::Alarm {
            action: AlarmAction::Deactivate,
            alarm: alarms[0],
        };
        assert!(refusal(&disarm).is_none());
        // With both alarms raised, the graver one answers.
        let both = [alarms[0], no_space(1)];
        assert!(matches!(
            refusal_by_alarms(&both, &Request::Put(put())),
            Some(Rejection::CorruptCluster)
        ));
    }
}
