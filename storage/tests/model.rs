//! Model-based property test: random sequences of put / delete / txn (nested txns, range compares,
//! gets at a revision and keeping puts included) / compact / lease grant /
//! lease revoke / lease checkpoint / checkpoint clear / reads / history reads / reopen run against
//! the real store and against a
//! deliberately naive in-memory model, and every answer, revision, version, create/mod revision,
//! lease, attached key and error must match; at the end a snapshot of the store, imported
//! elsewhere, must answer the same.
//!
//! The model keeps a full copy of the key space after every revision, so a read at revision R is a
//! lookup and cannot be subtly wrong; it shares no code with the store beyond the public types.
//! Its leases are a map of id to TTL, checkpoint and the log index of the last renewal (grant or
//! checkpoint clear); the keys attached to a lease are simply the live keys whose `lease` names
//! it, which is what the store's `lease_keys` table must agree with. A checkpoint computed at an
//! index below a lease's renewal must leave that lease alone.

use crate::support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use revkv_storage::{
    CheckpointedLease, Compare, CompareOp, CompareTarget, DeleteRangeRequest, DeleteRangeResponse,
    Error, Event, EventKind, KeepCurrent, KeyRange, KeyValue, LeaseGrantResponse, LeaseInfo,
    Malformed, PutRequest, RangeEnd, RangeRequest, RangeResponse, Request, Response, StoreOptions,
    TxnOp, TxnOpResponse, TxnRequest, TxnResponse,
};
use support::TestStore;

const KEYS: &[&str] = &["a", "a/b", "a/c", "ab", "b", "b/a", "c"];

type KeySpace = BTreeMap<Vec<u8>, KeyValue>;

/// The reference model: the key space after every revision, and the events of each revision.
struct Model {
    /// `states[r]` is the key space after revision `r`; `states[0]` is unused.
    states: Vec<KeySpace>,
    events: Vec<Vec<Event>>,
    compact_revision: u64,
    /// Granted leases.
    leases: BTreeMap<i64, ModelLease>,
}

/// One granted lease of the model.
#[derive(Clone, Copy, Debug)]
struct ModelLease {
    ttl_seconds: i64,
    checkpointed_remaining_ms: Option<u64>,
    /// The log index of the grant or of the last checkpoint clear.
    renewed_at_index: u64,
}

/// What the model expects a request to answer.
type Expected = Result<Response, Error>;

impl Model {
    fn new() -> Self {
        Model {
            states: vec![KeySpace::new(), KeySpace::new()],
            events: vec![Vec::new(), Vec::new()],
            compact_revision: 0,
            leases: BTreeMap::new(),
        }
    }

    fn current(&self) -> u64 {
        (self.states.len() - 1) as u64
    }

    /// Applies `request` as the log entry at `log_index`.
    fn apply(&mut self, request: &Request, log_index: u64) -> Expected {
        let revision = self.current() + 1;
        let mut working = Working {
            space: self.states.last().unwrap().clone(),
            revision,
            events: Vec::new(),
            leases: self.leases.clone(),
            past: self.states.clone(),
            compact_revision: self.compact_revision,
        };
        let response = match request {
            Request::Put(put) => {
                working.check_leases([put])?;
                Response::Put(working.put(put))
            }
            Request::DeleteRange(delete) => Response::DeleteRange(working.delete(delete)),
            Request::Txn(txn) => Response::Txn(working.txn(txn)?),
            Request::Compact { revision } => return self.compact(*revision),
            Request::LeaseGrant { id, ttl_seconds } => {
                return self.grant(*id, *ttl_seconds, log_index)
            }
            Request::LeaseCheckpoint {
                computed_at_index,
                leases,
            } => return self.checkpoint(*computed_at_index, leases),
            Request::LeaseCheckpointClear { id } => return self.clear_checkpoint(*id, log_index),
            Request::LeaseRevoke { id } => Response::LeaseRevoke(working.revoke(*id)?),
            // Alarms have their own tests (`alarms_and_defragment.rs`); the generator makes none.
            Request::Alarm { .. } => unreachable!("the model's generator makes no alarm request"),
            // Auth changes take no revision and touch no key; `auth::records` tests them.
            Request::Auth(_) => unreachable!("the model's generator makes no auth request"),
            // Promotion intents touch no key; `mvcc/learner_promotions.rs` tests them.
            Request::LearnerPromotion(_) => {
                unreachable!("the model's generator makes no learner promotion")
            }
        };
        if let Request::LeaseRevoke { id } = request {
            self.leases.remove(id);
        }
        if !working.events.is_empty() {
            self.states.push(working.space);
            self.events.push(working.events);
        }
        Ok(response)
    }

    fn grant(&mut self, id: i64, ttl_seconds: i64, log_index: u64) -> Expected {
        if id <= 0 || ttl_seconds < 1 {
            return Err(Error::Invalid("bad lease".into()));
        }
        if self.leases.contains_key(&id) {
            return Err(Error::LeaseExists { id });
        }
        let lease = ModelLease {
            ttl_seconds,
            checkpointed_remaining_ms: None,
            renewed_at_index: log_index,
        };
        self.leases.insert(id, lease);
        Ok(Response::LeaseGrant(LeaseGrantResponse { id, ttl_seconds }))
    }

    /// Records the remaining TTL of every granted lease not renewed after `computed_at_index`;
    /// an id that is not positive refuses the whole checkpoint.
    fn checkpoint(&mut self, computed_at_index: u64, leases: &[CheckpointedLease]) -> Expected {
        if leases.iter().any(|lease| lease.id <= 0) {
            return Err(Error::Invalid("bad lease".into()));
        }
        let mut recorded = Vec::new();
        for checkpointed in leases {
            if let Some(lease) = self.leases.get_mut(&checkpointed.id) {
                if lease.renewed_at_index <= computed_at_index {
                    lease.checkpointed_remaining_ms = Some(checkpointed.remaining_ttl_ms);
                    recorded.push(checkpointed.id);
                }
            }
        }
        Ok(Response::LeaseCheckpoint { recorded })
    }

    fn clear_checkpoint(&mut self, id: i64, log_index: u64) -> Expected {
        if id <= 0 {
            return Err(Error::Invalid("bad lease".into()));
        }
        let lease = self
            .leases
            .get_mut(&id)
            .ok_or(Error::LeaseNotFound { id })?;
        lease.checkpointed_remaining_ms = None;
        lease.renewed_at_index = log_index;
        Ok(Response::LeaseCheckpointClear)
    }

    /// The leases as the store must list them: attached keys are the live keys naming the lease.
    fn lease_infos(&self) -> Vec<LeaseInfo> {
        self.leases
            .iter()
            .map(|(&id, lease)| LeaseInfo {
                id,
                granted_ttl_seconds: lease.ttl_seconds,
                attached_keys: self.attached_keys(id).len() as u64,
                checkpointed_remaining_ms: lease.checkpointed_remaining_ms,
            })
            .collect()
    }

    fn attached_keys(&self, id: i64) -> Vec<Vec<u8>> {
        let current = self.states.last().unwrap();
        current
            .values()
            .filter(|kv| kv.lease == id)
            .map(|kv| kv.key.clone())
            .collect()
    }

    fn compact(&mut self, revision: u64) -> Expected {
        if revision > self.current() {
            return Err(Error::FutureRevision {
                requested: revision,
                current: self.current(),
            });
        }
        if revision <= self.compact_revision {
            return Err(Error::Compacted {
                requested: revision,
                compact_revision: self.compact_revision,
            });
        }
        self.compact_revision = revision;
        Ok(Response::Compact)
    }

    fn read(
        &self,
        range: &KeyRange,
        revision: Option<u64>,
        limit: Option<u64>,
    ) -> Result<RangeResponse, Error> {
        let revision = revision.unwrap_or(self.current());
        if revision > self.current() {
            return Err(Error::FutureRevision {
                requested: revision,
                current: self.current(),
            });
        }
        if revision < self.compact_revision {
            return Err(Error::Compacted {
                requested: revision,
                compact_revision: self.compact_revision,
            });
        }
        Ok(read_space(&self.states[revision as usize], range, limit))
    }

    /// How many history entries compaction must keep: every event above the compact revision,
    /// and every put at or below it that was still the key's version at the compact revision.
    fn retained_history_entries(&self) -> u64 {
        let mut retained = 0;
        for (revision, events) in self.events.iter().enumerate() {
            for event in events {
                let revision = revision as u64;
                let kept = revision > self.compact_revision
                    || (event.kind == EventKind::Put
                        && !self.changed_between(&event.kv.key, revision, self.compact_revision));
                retained += u64::from(kept);
            }
        }
        retained
    }

    /// True when `key` changed at some revision in `(after, through]`.
    fn changed_between(&self, key: &[u8], after: u64, through: u64) -> bool {
        (after + 1..=through).any(|revision| {
            self.events[revision as usize]
                .iter()
                .any(|event| event.kv.key == key)
        })
    }

    fn events_since(&self, from: u64) -> Result<Vec<Event>, Error> {
        if from <= self.compact_revision {
            return Err(Error::Compacted {
                requested: from,
                compact_revision: self.compact_revision,
            });
        }
        Ok(self
            .events
            .iter()
            .skip(from as usize)
            .flatten()
            .cloned()
            .collect())
    }
}

fn read_space(space: &KeySpace, range: &KeyRange, limit: Option<u64>) -> RangeResponse {
    let matching: Vec<KeyValue> = space
        .values()
        .filter(|kv| range.contains(&kv.key))
        .cloned()
        .collect();
    let limit = limit.unwrap_or(u64::MAX) as usize;
    RangeResponse {
        count: matching.len() as u64,
        more: matching.len() > limit,
        kvs: matching.into_iter().take(limit).collect(),
        continue_token: None,
    }
}

/// The key space while one request is applied.
struct Working {
    space: KeySpace,
    revision: u64,
    events: Vec<Event>,
    /// The leases granted before the request (a request other than a grant never adds one).
    leases: BTreeMap<i64, ModelLease>,
    /// The key space after every earlier revision, for a txn's gets at a revision.
    past: Vec<KeySpace>,
    compact_revision: u64,
}

impl Working {
    fn check_leases<'p>(
        &self,
        puts: impl IntoIterator<Item = &'p PutRequest>,
    ) -> Result<(), Error> {
        for put in puts {
            if put.lease != 0 && !self.leases.contains_key(&put.lease) {
                return Err(Error::LeaseNotFound { id: put.lease });
            }
        }
        Ok(())
    }

    /// Deletes every key naming the lease, in key order, as one delete.
    fn revoke(&mut self, id: i64) -> Result<DeleteRangeResponse, Error> {
        if id <= 0 {
            return Err(Error::Invalid("bad lease".into()));
        }
        if !self.leases.contains_key(&id) {
            return Err(Error::LeaseNotFound { id });
        }
        let doomed: Vec<Vec<u8>> = self
            .space
            .values()
            .filter(|kv| kv.lease == id)
            .map(|kv| kv.key.clone())
            .collect();
        for key in &doomed {
            self.delete(&DeleteRangeRequest {
                range: KeyRange::single(key.clone()),
                prev_kv: false,
            });
        }
        Ok(DeleteRangeResponse {
            deleted: doomed.len() as u64,
            prev_kvs: Vec::new(),
        })
    }

    fn put(&mut self, put: &PutRequest) -> revkv_storage::PutResponse {
        let previous = self.space.get(&put.key).cloned();
        let kv = KeyValue {
            key: put.key.clone(),
            value: put.value.clone(),
            create_revision: previous
                .as_ref()
                .map_or(self.revision, |p| p.create_revision),
            mod_revision: self.revision,
            version: previous.as_ref().map_or(1, |p| p.version + 1),
            lease: put.lease,
        };
        self.space.insert(put.key.clone(), kv.clone());
        self.events.push(Event {
            kind: EventKind::Put,
            kv,
            prev_kv: previous.clone(),
        });
        revkv_storage::PutResponse {
            prev_kv: previous.filter(|_| put.prev_kv),
        }
    }

    fn delete(&mut self, delete: &DeleteRangeRequest) -> revkv_storage::DeleteRangeResponse {
        let doomed: Vec<KeyValue> = self
            .space
            .values()
            .filter(|kv| delete.range.contains(&kv.key))
            .cloned()
            .collect();
        for kv in &doomed {
            self.space.remove(&kv.key);
            self.events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: kv.key.clone(),
                    value: Vec::new(),
                    create_revision: 0,
                    mod_revision: self.revision,
                    version: 0,
                    lease: 0,
                },
                prev_kv: Some(kv.clone()),
            });
        }
        revkv_storage::DeleteRangeResponse {
            deleted: doomed.len() as u64,
            prev_kvs: if delete.prev_kv { doomed } else { Vec::new() },
        }
    }

    /// A txn with its nested txns: every branch is chosen by the state before the txn, the ops
    /// that will run are checked in the order they run (a get's revision, a keeping put's key, a
    /// put's lease), and only then do they run, in order.
    fn txn(&mut self, txn: &TxnRequest) -> Result<TxnResponse, Error> {
        for branch in [&txn.success, &txn.failure] {
            if let Some(key) = key_written_twice(branch) {
                return Err(Error::Malformed(Malformed::DuplicateTxnKey { key }));
            }
        }
        let before = self.space.clone();
        let mut to_run = Vec::new();
        ops_that_run(&before, txn, &mut to_run);
        // etcd's `checkTxn`: each op that will run at its turn, against the state before.
        let current = self.revision - 1;
        for op in &to_run {
            match op {
                TxnOp::Get(RangeRequest {
                    revision: Some(revision),
                    ..
                }) => {
                    if *revision > current {
                        return Err(Error::FutureRevision {
                            requested: *revision,
                            current,
                        });
                    }
                    if *revision < self.compact_revision {
                        return Err(Error::Compacted {
                            requested: *revision,
                            compact_revision: self.compact_revision,
                        });
                    }
                }
                TxnOp::Put(put) => self.check_leases([put])?,
                TxnOp::PutKeeping { put, keep } => {
                    if !before.contains_key(&put.key) {
                        let key = String::from_utf8_lossy(&put.key).into_owned();
                        return Err(Error::Malformed(Malformed::KeyNotFound { key }));
                    }
                    if !keep.lease {
                        self.check_leases([put])?;
                    }
                }
                _ => {}
            }
        }
        Ok(self.run_txn(&before, txn))
    }

    fn run_txn(&mut self, before: &KeySpace, txn: &TxnRequest) -> TxnResponse {
        let succeeded = txn.compare.iter().all(|compare| holds(before, compare));
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let responses = branch
            .iter()
            .map(|op| match op {
                TxnOp::Put(put) => TxnOpResponse::Put(self.put(put)),
                TxnOp::PutKeeping { put, keep } => {
                    let current = self.space[&put.key].clone();
                    let kept = PutRequest {
                        value: if keep.value {
                            current.value
                        } else {
                            put.value.clone()
                        },
                        lease: if keep.lease { current.lease } else { put.lease },
                        ..put.clone()
                    };
                    TxnOpResponse::Put(self.put(&kept))
                }
                TxnOp::DeleteRange(delete) => TxnOpResponse::DeleteRange(self.delete(delete)),
                TxnOp::Get(get) => {
                    let range = get.range.as_ref().unwrap();
                    let space = match get.revision {
                        Some(revision) => &self.past[revision as usize],
                        None => &self.space,
                    };
                    TxnOpResponse::Get(read_space(space, range, get.limit))
                }
                TxnOp::Txn(nested) => TxnOpResponse::Txn(self.run_txn(before, nested)),
            })
            .collect();
        TxnResponse {
            succeeded,
            responses,
        }
    }
}

/// The ops of `txn` that will run, nested txns walked, in the order they run.
fn ops_that_run<'t>(before: &KeySpace, txn: &'t TxnRequest, ops: &mut Vec<&'t TxnOp>) {
    let succeeded = txn.compare.iter().all(|compare| holds(before, compare));
    let branch = if succeeded {
        &txn.success
    } else {
        &txn.failure
    };
    for op in branch {
        match op {
            TxnOp::Txn(nested) => ops_that_run(before, nested, ops),
            op => ops.push(op),
        }
    }
}

/// A put or a delete of a branch, with where it sits: the (nested txn, branch) pairs on the way
/// down to it.
struct PlacedWrite<'t> {
    place: Vec<(usize, bool)>,
    put_key: Option<&'t [u8]>,
    deleted: Option<&'t KeyRange>,
}

/// Two writes can both run unless they sit in opposite branches of one nested txn.
fn can_both_run(a: &PlacedWrite, b: &PlacedWrite) -> bool {
    match a.place.iter().zip(&b.place).find(|(x, y)| x != y) {
        Some(((txn_a, _), (txn_b, _))) => txn_a != txn_b,
        None => true,
    }
}

fn place_writes<'t>(
    ops: &'t [TxnOp],
    place: &mut Vec<(usize, bool)>,
    next_txn: &mut usize,
    writes: &mut Vec<PlacedWrite<'t>>,
) {
    for op in ops {
        let (put_key, deleted) = match op {
            TxnOp::Put(put) | TxnOp::PutKeeping { put, .. } => (Some(put.key.as_slice()), None),
            TxnOp::DeleteRange(delete) => (None, Some(&delete.range)),
            TxnOp::Get(_) => continue,
            TxnOp::Txn(nested) => {
                let txn = *next_txn;
                *next_txn += 1;
                for (succeeded, branch) in [(true, &nested.success), (false, &nested.failure)] {
                    place.push((txn, succeeded));
                    place_writes(branch, place, next_txn, writes);
                    place.pop();
                }
                continue;
            }
        };
        writes.push(PlacedWrite {
            place: place.clone(),
            put_key,
            deleted,
        });
    }
}

/// A key of the branch that two writes which can both run would write (two puts, or a put and a
/// delete covering it, in either order), if there is one.
fn key_written_twice(branch: &[TxnOp]) -> Option<String> {
    let mut writes = Vec::new();
    place_writes(branch, &mut Vec::new(), &mut 0, &mut writes);
    for (index, first) in writes.iter().enumerate() {
        for second in &writes[index + 1..] {
            if !can_both_run(first, second) {
                continue;
            }
            let clash = |put: &PlacedWrite, other: &PlacedWrite| {
                let key = put.put_key?;
                let twice = other.put_key == Some(key)
                    || other.deleted.is_some_and(|range| range.contains(key));
                twice.then(|| String::from_utf8_lossy(key).into_owned())
            };
            if let Some(key) = clash(first, second).or_else(|| clash(second, first)) {
                return Some(key);
            }
        }
    }
    None
}

/// Whether `compare` holds: of its key, or of every key of its range, a range with no key
/// comparing as a missing key.
fn holds(space: &KeySpace, compare: &Compare) -> bool {
    let keys = compare.keys();
    let matching: Vec<&KeyValue> = space.values().filter(|kv| keys.contains(&kv.key)).collect();
    if matching.is_empty() {
        return holds_for(None, compare);
    }
    matching.into_iter().all(|kv| holds_for(Some(kv), compare))
}

fn holds_for(kv: Option<&KeyValue>, compare: &Compare) -> bool {
    let ordering = match &compare.target {
        CompareTarget::Value(value) => match kv {
            None => return false,
            Some(kv) => kv.value.cmp(value),
        },
        CompareTarget::Version(version) => kv.map_or(0, |kv| kv.version).cmp(version),
        CompareTarget::CreateRevision(revision) => {
            kv.map_or(0, |kv| kv.create_revision).cmp(revision)
        }
        CompareTarget::ModRevision(revision) => kv.map_or(0, |kv| kv.mod_revision).cmp(revision),
        CompareTarget::Lease(lease) => kv.map_or(0, |kv| kv.lease).cmp(lease),
    };
    match compare.op {
        CompareOp::Equal => ordering.is_eq(),
        CompareOp::NotEqual => ordering.is_ne(),
        CompareOp::Less => ordering.is_lt(),
        CompareOp::Greater => ordering.is_gt(),
    }
}

/// One step of a generated history.
#[derive(Clone, Debug)]
enum Step {
    Write(Request),
    /// A lease checkpoint computed at the index `back` entries before the next one.
    Checkpoint {
        back: i64,
        leases: Vec<(i64, u64)>,
    },
    /// Compact at `current - back` (may be at or below the compact revision, or in the future).
    CompactBack(i64),
    /// Read at `current - back`, or now.
    Read {
        range: KeyRange,
        back: Option<i64>,
        limit: Option<u64>,
    },
    Events {
        back: i64,
    },
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(KEYS).prop_map(|key| key.as_bytes().to_vec())
}

fn key_range() -> impl Strategy<Value = KeyRange> {
    prop_oneof![
        3 => key().prop_map(KeyRange::single),
        2 => prop::sample::select(&["", "a", "a/", "b"][..]).prop_map(KeyRange::prefix),
        1 => (key(), key()).prop_map(|(start, end)| KeyRange::between(start, end)),
    ]
}

/// Lease ids puts and revokes name: mostly ones grants also use, so attaching succeeds often.
const LEASE_IDS: std::ops::Range<i64> = 0..4;

fn put() -> impl Strategy<Value = PutRequest> {
    let lease = prop_oneof![2 => Just(0i64), 3 => LEASE_IDS];
    (key(), "[xyz]{0,3}", lease, any::<bool>()).prop_map(|(key, value, lease, prev_kv)| {
        PutRequest {
            key,
            value: value.into_bytes(),
            lease,
            prev_kv,
        }
    })
}

fn delete() -> impl Strategy<Value = DeleteRangeRequest> {
    (key_range(), any::<bool>()).prop_map(|(range, prev_kv)| DeleteRangeRequest { range, prev_kv })
}

fn compare() -> impl Strategy<Value = Compare> {
    let target = prop_oneof![
        "[xyz]{0,2}".prop_map(|value| CompareTarget::Value(value.into_bytes())),
        (0u64..4).prop_map(CompareTarget::Version),
        (0u64..12).prop_map(CompareTarget::CreateRevision),
        (0u64..12).prop_map(CompareTarget::ModRevision),
        (0i64..3).prop_map(CompareTarget::Lease),
    ];
    let op = prop_oneof![
        Just(CompareOp::Equal),
        Just(CompareOp::NotEqual),
        Just(CompareOp::Less),
        Just(CompareOp::Greater),
    ];
    // Mostly single keys; sometimes `[key, end)` (empty when end <= key) or every key from key on.
    let range_end = prop_oneof![
        6 => Just(RangeEnd::Single),
        2 => key().prop_map(RangeEnd::Until),
        1 => Just(RangeEnd::Unbounded),
    ];
    (key(), range_end, target, op).prop_map(|(key, range_end, target, op)| Compare {
        key,
        range_end,
        target,
        op,
    })
}

/// A put that keeps the current value, lease or both (never carrying what it keeps).
fn put_keeping() -> impl Strategy<Value = TxnOp> {
    (put(), any::<bool>(), any::<bool>()).prop_map(|(mut put, value, lease)| {
        let keep = KeepCurrent { value, lease };
        if keep.value {
            put.value.clear();
        }
        if keep.lease {
            put.lease = 0;
        }
        TxnOp::PutKeeping { put, keep }
    })
}

/// An op that is not a txn: a put (plain or keeping), a delete, or a get of the current state or
/// at a revision (some of them compacted or in the future).
fn single_op() -> BoxedStrategy<TxnOp> {
    prop_oneof![
        4 => put().prop_map(TxnOp::Put),
        1 => put_keeping(),
        2 => delete().prop_map(TxnOp::DeleteRange),
        3 => (key_range(), prop::option::of(1u64..3), prop::option::of(1u64..14)).prop_map(
            |(range, limit, revision)| TxnOp::Get(RangeRequest {
                limit,
                revision,
                ..RangeRequest::of(range)
            })
        ),
    ]
    .boxed()
}

/// A txn whose branches hold `ops`.
fn txn_of(ops: BoxedStrategy<TxnOp>, most_ops: usize) -> impl Strategy<Value = TxnRequest> {
    (
        prop::collection::vec(compare(), 0..3),
        prop::collection::vec(ops.clone(), 0..most_ops),
        prop::collection::vec(ops, 0..most_ops),
    )
        .prop_map(|(compare, success, failure)| TxnRequest {
            compare,
            success,
            failure,
        })
}

/// An op of a top-level txn: mostly single ops, sometimes a nested txn, itself holding nested
/// txns now and then (two levels below the top).
fn txn_op() -> BoxedStrategy<TxnOp> {
    let inner = prop_oneof![
        5 => single_op(),
        1 => txn_of(single_op(), 3).prop_map(TxnOp::Txn),
    ]
    .boxed();
    prop_oneof![
        5 => single_op(),
        1 => txn_of(inner, 3).prop_map(TxnOp::Txn),
    ]
    .boxed()
}

fn step() -> impl Strategy<Value = Step> {
    let txn = (
        prop::collection::vec(compare(), 0..3),
        prop::collection::vec(txn_op(), 0..4),
        prop::collection::vec(txn_op(), 0..3),
    )
        .prop_map(|(compare, success, failure)| {
            Request::Txn(TxnRequest {
                compare,
                success,
                failure,
            })
        });
    let grant =
        (-1i64..4, 0i64..4).prop_map(|(id, ttl_seconds)| Request::LeaseGrant { id, ttl_seconds });
    let revoke = LEASE_IDS.prop_map(|id| Request::LeaseRevoke { id });
    // Computed at an index up to 6 entries back (or ahead): around the grants and clears.
    let checkpoint = (
        -2i64..6,
        prop::collection::vec((LEASE_IDS, 0u64..100_000), 0..4),
    )
        .prop_map(|(back, leases)| Step::Checkpoint { back, leases });
    let clear = LEASE_IDS.prop_map(|id| Step::Write(Request::LeaseCheckpointClear { id }));
    prop_oneof![
        6 => put().prop_map(|put| Step::Write(Request::Put(put))),
        3 => grant.prop_map(Step::Write),
        2 => revoke.prop_map(Step::Write),
        2 => checkpoint,
        2 => clear,
        2 => delete().prop_map(|delete| Step::Write(Request::DeleteRange(delete))),
        4 => txn.prop_map(Step::Write),
        1 => (-1i64..6).prop_map(Step::CompactBack),
        4 => (key_range(), prop::option::of(-1i64..8), prop::option::of(1u64..4))
            .prop_map(|(range, back, limit)| Step::Read { range, back, limit }),
        2 => (-1i64..8).prop_map(|back| Step::Events { back }),
        1 => Just(Step::Reopen),
    ]
}

fn relative(current: u64, back: i64) -> u64 {
    (current as i64 - back).max(1) as u64
}

/// Errors match when they are the same kind with the same revisions (messages may differ). The
/// store answers each operation's own error; the model answers their union.
fn same_error(actual: impl Into<Error>, expected: &Error) -> bool {
    match (&actual.into(), expected) {
        (Error::Invalid(_), Error::Invalid(_)) | (Error::TooLarge(_), Error::TooLarge(_)) => true,
        // The store names the first clash its walk meets, the model the first pair it tries.
        (
            Error::Malformed(Malformed::DuplicateTxnKey { .. }),
            Error::Malformed(Malformed::DuplicateTxnKey { .. }),
        ) => true,
        (Error::Malformed(a), Error::Malformed(b)) => a == b,
        (Error::LeaseNotFound { id: a }, Error::LeaseNotFound { id: b })
        | (Error::LeaseExists { id: a }, Error::LeaseExists { id: b }) => a == b,
        (
            Error::FutureRevision {
                requested: a,
                current: b,
            },
            Error::FutureRevision {
                requested: c,
                current: d,
            },
        ) => a == c && b == d,
        (
            Error::Compacted {
                requested: a,
                compact_revision: b,
            },
            Error::Compacted {
                requested: c,
                compact_revision: d,
            },
        ) => a == c && b == d,
        _ => false,
    }
}

fn check_read(
    store: &TestStore,
    model: &Model,
    range: &KeyRange,
    revision: Option<u64>,
    limit: Option<u64>,
) -> Result<(), TestCaseError> {
    let request = RangeRequest {
        revision,
        limit,
        ..RangeRequest::of(range.clone())
    };
    let expected = model.read(range, revision, limit);
    match (store.store.range(&request), expected) {
        (Ok(actual), Ok(expected)) => {
            let token = actual.response.continue_token.clone();
            let mut actual_response = actual.response;
            actual_response.continue_token = None;
            prop_assert_eq!(&actual_response, &expected);
            prop_assert_eq!(actual.revision, revision.unwrap_or(model.current()));
            prop_assert_eq!(token.is_some(), expected.more);
            if let Some(token) = token {
                check_next_page(
                    store,
                    model,
                    range,
                    actual.revision,
                    limit,
                    &token,
                    &expected,
                )?;
            }
        }
        (Err(actual), Err(expected)) => {
            let shown = format!("{actual:?} vs {expected:?}");
            prop_assert!(same_error(actual, &expected), "{}", shown)
        }
        (actual, expected) => prop_assert!(false, "read: store {actual:?}, model {expected:?}"),
    }
    Ok(())
}

/// The page after a continue token holds the model's keys after the last key of the first page.
fn check_next_page(
    store: &TestStore,
    model: &Model,
    range: &KeyRange,
    revision: u64,
    limit: Option<u64>,
    token: &str,
    first_page: &RangeResponse,
) -> Result<(), TestCaseError> {
    let request = RangeRequest {
        limit,
        continue_token: Some(token.to_string()),
        ..RangeRequest::of(range.clone())
    };
    let next = store
        .store
        .range(&request)
        .map_err(|error| TestCaseError::fail(error.to_string()))?;
    prop_assert_eq!(next.revision, revision);
    let last_key = &first_page.kvs.last().unwrap().key;
    let rest: Vec<KeyValue> = model.states[revision as usize]
        .values()
        .filter(|kv| range.contains(&kv.key) && kv.key > *last_key)
        .cloned()
        .collect();
    prop_assert_eq!(next.response.count, rest.len() as u64);
    let take = limit.unwrap_or(u64::MAX) as usize;
    prop_assert_eq!(
        next.response.kvs,
        rest.into_iter().take(take).collect::<Vec<_>>()
    );
    Ok(())
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let mut store = TestStore::new();
    let mut model = Model::new();
    for step in steps {
        match step {
            Step::Write(request) => apply_both(&mut store, &mut model, &request)?,
            Step::Checkpoint { back, leases } => {
                let request = Request::LeaseCheckpoint {
                    computed_at_index: (store.next_index as i64 - back).max(0) as u64,
                    leases: leases
                        .into_iter()
                        .map(|(id, remaining_ttl_ms)| CheckpointedLease {
                            id,
                            remaining_ttl_ms,
                        })
                        .collect(),
                };
                apply_both(&mut store, &mut model, &request)?;
            }
            Step::CompactBack(back) => {
                let request = Request::Compact {
                    revision: relative(model.current(), back),
                };
                apply_both(&mut store, &mut model, &request)?;
            }
            Step::Read { range, back, limit } => {
                let revision = back.map(|back| relative(model.current(), back));
                check_read(&store, &model, &range, revision, limit)?;
            }
            Step::Events { back } => {
                let from = relative(model.current(), back);
                let actual = store.store.events_since(from, usize::MAX, true);
                // The bounded read answers exactly as the unbounded one, or not at all when the
                // slice holds more entries than it may visit.
                let bounded = store
                    .store
                    .events_since_if_at_most(from, usize::MAX, true, 4);
                match (&actual, bounded) {
                    (Ok(actual), Ok(Some(bounded))) => prop_assert_eq!(&bounded, actual),
                    (Ok(actual), Ok(None)) => prop_assert!(
                        actual.events.len() > 4,
                        "the bounded read refused {} events",
                        actual.events.len()
                    ),
                    (Err(_), Err(_)) => {}
                    (actual, bounded) => prop_assert!(false, "bounded: {bounded:?} vs {actual:?}"),
                }
                match (actual, model.events_since(from)) {
                    (Ok(actual), Ok(expected)) => prop_assert_eq!(actual.events, expected),
                    (Err(actual), Err(expected)) => prop_assert!(same_error(actual, &expected)),
                    (actual, expected) => prop_assert!(false, "events: {actual:?} vs {expected:?}"),
                }
            }
            Step::Reopen => store.reopen(StoreOptions::default()),
        }
        prop_assert_eq!(store.revision(), model.current());
        let stats = store.store.stats().unwrap();
        prop_assert_eq!(stats.compact_revision, model.compact_revision);
        prop_assert_eq!(stats.live_keys, model.states.last().unwrap().len() as u64);
        prop_assert_eq!(stats.history_entries, model.retained_history_entries());
        check_leases(&store, &model)?;
    }
    check_snapshot_copy(&store, &model)
}

/// The store lists the model's leases, each with exactly the keys that name it.
fn check_leases(store: &TestStore, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(store.store.leases().unwrap(), model.lease_infos());
    for id in LEASE_IDS {
        let expected = model
            .leases
            .contains_key(&id)
            .then(|| model.lease_infos().into_iter().find(|lease| lease.id == id))
            .flatten();
        prop_assert_eq!(store.store.lease(id).unwrap(), expected);
        let keys = if model.leases.contains_key(&id) {
            model.attached_keys(id)
        } else {
            Vec::new()
        };
        prop_assert_eq!(store.store.lease_keys(id).unwrap(), keys);
    }
    Ok(())
}

fn apply_both(
    store: &mut TestStore,
    model: &mut Model,
    request: &Request,
) -> Result<(), TestCaseError> {
    let log_index = store.next_index;
    // A txn that only reads is also answered from a read snapshot (`MvccStore::read_txn`, how the
    // gRPC port answers it): the same answer as through the log, at the same revision.
    let read_only = match request {
        Request::Txn(txn) if txn.reads_only() => Some(store.store.read_txn(txn)),
        _ => None,
    };
    let actual = store.apply(request.clone());
    let expected = model.apply(request, log_index);
    prop_assert_eq!(actual.revision, model.current());
    match (read_only, &actual.result) {
        (Some(Ok(read)), Ok(Response::Txn(applied))) => {
            prop_assert_eq!(&read.response, applied);
            prop_assert_eq!(read.revision, model.current());
        }
        (Some(read), applied) => {
            prop_assert!(read.is_err() && applied.is_err(), "{read:?} vs {applied:?}")
        }
        (None, _) => {}
    }
    match (actual.result, expected) {
        (Ok(actual), Ok(expected)) => prop_assert_eq!(actual, expected),
        (Err(actual), Err(expected)) => {
            let shown = format!("{actual:?} vs {expected:?}");
            prop_assert!(same_error(actual, &expected), "{}", shown)
        }
        (actual, expected) => {
            prop_assert!(false, "{request:?}: store {actual:?}, model {expected:?}")
        }
    }
    Ok(())
}

/// A snapshot of the store, imported elsewhere, answers every readable revision like the model.
fn check_snapshot_copy(store: &TestStore, model: &Model) -> Result<(), TestCaseError> {
    let mut stream = Vec::new();
    store.store.export_snapshot(&mut stream).unwrap();
    let copy = TestStore::new();
    copy.store.import_snapshot(&mut stream.as_slice()).unwrap();
    prop_assert_eq!(
        copy.store.hash(None).unwrap(),
        store.store.hash(None).unwrap()
    );
    check_leases(&copy, model)?;
    let everything = KeyRange::prefix("");
    for revision in model.compact_revision.max(1)..=model.current() {
        check_read(&copy, model, &everything, Some(revision), None)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn the_store_behaves_like_the_model(steps in prop::collection::vec(step(), 1..60)) {
        run(steps)?;
    }
}
