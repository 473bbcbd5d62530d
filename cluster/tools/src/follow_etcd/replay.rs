//! One etcd revision replayed as one revkv transaction. Its compares say what etcd says each key
//! was just before (a put's key at the version before it, a new key absent, a deleted key at
//! its previous mod revision), its ops are the revision's puts (with their leases) and deletes,
//! and its revision must come out as etcd's. So revkv's keys keep etcd's create revisions and
//! versions (revkv computes them from the same state), and anything else that wrote to revkv
//! stops the follow rather than being overwritten.

use crate::etcd_api::mvccpb::{event::EventType, Event};
use crate::etcd_api::pb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    request_op::Request,
    Compare, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest,
};
use crate::etcd_api::EtcdClient;

use super::FollowError;

/// The events of a watch response, grouped by the revision that made them (a put's mod
/// revision, a delete's tombstone revision), in order.
pub fn group_by_revision(events: &[Event]) -> Vec<(u64, &[Event])> {
    let revision_of = |event: &Event| {
        event
            .kv
            .as_ref()
            .map_or(0, |kv| u64::try_from(kv.mod_revision).unwrap_or(0))
    };
    let mut groups: Vec<(u64, &[Event])> = Vec::new();
    let mut start = 0;
    for index in 1..=events.len() {
        let ends_group =
            index == events.len() || revision_of(&events[index]) != revision_of(&events[start]);
        if ends_group {
            groups.push((revision_of(&events[start]), &events[start..index]));
            start = index;
        }
    }
    groups
}

/// Replays `events`, all of etcd's `revision`, on revkv, which must be at `applied`, just
/// before it.
pub async fn replay_revision(
    revkv: &EtcdClient,
    revision: u64,
    events: &[Event],
    applied: u64,
) -> Result<(), FollowError> {
    if revision != applied + 1 {
        return Err(FollowError::Diverged(format!(
            "etcd's next change is at revision {revision}, but revkv is at {applied}"
        )));
    }
    let mut compares = Vec::with_capacity(events.len());
    let mut operations = Vec::with_capacity(events.len());
    for event in events {
        let (compare, operation) = replayed(event)?;
        compares.extend(compare);
        operations.push(operation);
    }
    let txn = TxnRequest {
        compare: compares,
        success: operations,
        failure: Vec::new(),
    };
    let answer = revkv
        .kv()
        .txn(txn)
        .await
        .map_err(FollowError::call("replaying on revkv"))?
        .into_inner();
    let written = answer.header.map_or(0, |header| header.revision);
    if !answer.succeeded || written != i64::try_from(revision).unwrap_or(-1) {
        return Err(FollowError::Diverged(format!(
            "replaying etcd's revision {revision} on revkv {}: was revkv written to during the \
             follow?",
            if answer.succeeded {
                format!("made revision {written}")
            } else {
                "found a key that differs from etcd's".to_string()
            }
        )));
    }
    Ok(())
}

/// `key`'s `target` equals `value` (`target_union`).
fn equal(key: &[u8], target: CompareTarget, value: TargetUnion) -> Compare {
    Compare {
        result: CompareResult::Equal.into(),
        target: target.into(),
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(value),
    }
}

/// The compares (what etcd says the key was) and the op of one event.
fn replayed(event: &Event) -> Result<(Vec<Compare>, RequestOp), FollowError> {
    let kv = event
        .kv
        .as_ref()
        .ok_or_else(|| FollowError::Diverged("a watch event without its key".into()))?;
    let key = kv.key.clone();
    // Only puts and deletes exist; an unknown type is refused rather than guessed.
    let event_type = EventType::try_from(event.r#type).map_err(|_| {
        FollowError::Diverged(format!("a watch event of unknown type {}", event.r#type))
    })?;
    match event_type {
        EventType::Put => {
            let mut before = vec![equal(
                &key,
                CompareTarget::Version,
                TargetUnion::Version(kv.version - 1),
            )];
            if kv.version > 1 {
                before.push(equal(
                    &key,
                    CompareTarget::Create,
                    TargetUnion::CreateRevision(kv.create_revision),
                ));
            }
            let put = PutRequest {
                key,
                value: kv.value.clone(),
                lease: kv.lease,
                ..PutRequest::default()
            };
            Ok((before, op(Request::RequestPut(put))))
        }
        EventType::Delete => {
            let before = event
                .prev_kv
                .as_ref()
                .map(|prev| {
                    equal(
                        &key,
                        CompareTarget::Mod,
                        TargetUnion::ModRevision(prev.mod_revision),
                    )
                })
                .into_iter()
                .collect();
            let delete = DeleteRangeRequest {
                key,
                ..DeleteRangeRequest::default()
            };
            Ok((before, op(Request::RequestDeleteRange(delete))))
        }
    }
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}
