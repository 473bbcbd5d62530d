//! One etcd revision replayed as one revkv transaction. Its compares say what etcd says each key
//! was just before (a put's key at the version before it, a new key absent, a deleted key at
//! its previous mod revision), its ops are the revision's puts (with their leases) and deletes,
//! and its revision must come out as etcd's. So revkv's keys keep etcd's create revisions and
//! versions (revkv computes them from the same state), and anything else that wrote to revkv
//! stops the follow rather than being overwritten.

use etcd_client::{Client, Compare, CompareOp, Event, EventType, PutOptions, Txn, TxnOp};

use super::FollowError;

/// The events of a watch response, grouped by the revision that made them (a put's mod
/// revision, a delete's tombstone revision), in order.
pub fn group_by_revision(events: &[Event]) -> Vec<(u64, &[Event])> {
    let revision_of = |event: &Event| {
        event
            .kv()
            .map_or(0, |kv| u64::try_from(kv.mod_revision()).unwrap_or(0))
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
    revkv: &mut Client,
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
    let answer = revkv
        .txn(Txn::new().when(compares).and_then(operations))
        .await
        .map_err(|error| FollowError::Etcd("replaying on revkv", error))?;
    let written = answer.header().map_or(0, |header| header.revision());
    if !answer.succeeded() || written != i64::try_from(revision).unwrap_or(-1) {
        return Err(FollowError::Diverged(format!(
            "replaying etcd's revision {revision} on revkv {}: was revkv written to during the \
             follow?",
            if answer.succeeded() {
                format!("made revision {written}")
            } else {
                "found a key that differs from etcd's".to_string()
            }
        )));
    }
    Ok(())
}

/// The compares (what etcd says the key was) and the op of one event.
fn replayed(event: &Event) -> Result<(Vec<Compare>, TxnOp), FollowError> {
    let kv = event
        .kv()
        .ok_or_else(|| FollowError::Diverged("a watch event without its key".into()))?;
    let key = kv.key().to_vec();
    match event.event_type() {
        EventType::Put => {
            let mut before = vec![Compare::version(
                key.clone(),
                CompareOp::Equal,
                kv.version() - 1,
            )];
            if kv.version() > 1 {
                let created = kv.create_revision();
                before.push(Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    created,
                ));
            }
            let options = (kv.lease() != 0).then(|| PutOptions::new().with_lease(kv.lease()));
            Ok((before, TxnOp::put(key, kv.value().to_vec(), options)))
        }
        EventType::Delete => {
            let before = event
                .prev_kv()
                .map(|prev| {
                    Compare::mod_revision(key.clone(), CompareOp::Equal, prev.mod_revision())
                })
                .into_iter()
                .collect();
            Ok((before, TxnOp::delete(key, None)))
        }
    }
}
