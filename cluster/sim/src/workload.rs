//! The clients of a run: each sends puts, deletes, compare-and-swaps, linearizable and
//! serializable reads on a few shared keys through a member the seed picks, with a deadline on
//! each request; another request after a timeout goes through whichever member the seed picks
//! next, as a client that retries through its endpoint list does. An update (a compare-and-swap
//! on a key's mod revision) whose answer did not come is often sent again, the same request
//! through another member, as client-go retries an update after a timeout: it must not apply
//! twice. Every request and answer is recorded for the checks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::{KvBackend, MemberBackend, NodeError, ReadConsistency};
use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyRange, PutRequest, RangeRequest,
    Request, Response, TxnOp, TxnRequest,
};

use crate::cluster::Cluster;
use crate::history::{Observed, Operation, Outcome, Record};
use crate::trace::Trace;

/// The prefix every key of the workload lives under (and the watches watch).
pub const KEY_PREFIX: &str = "sim/";

/// How long a client waits for one answer before it counts the outcome unknown.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// The most a client waits between two requests.
const MAX_THINK_TIME: Duration = Duration::from_millis(50);

/// The keys of a run with `count` keys.
pub fn keys(count: u64) -> Vec<String> {
    (0..count)
        .map(|index| format!("{KEY_PREFIX}{index}"))
        .collect()
}

/// One client: its own generator and what it last saw of each key, for its compare-and-swaps.
pub struct Client {
    pub id: u64,
    random: StdRng,
    keys: Vec<String>,
    last_seen_mod_revision: BTreeMap<String, u64>,
    requests_sent: u64,
}

impl Client {
    pub fn new(id: u64, seed: u64, keys: Vec<String>) -> Self {
        Client {
            id,
            random: StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            keys,
            last_seen_mod_revision: BTreeMap::new(),
            requests_sent: 0,
        }
    }

    /// Sends requests until the trace's clock reaches `until`, appending each to `records`.
    pub async fn run(
        mut self,
        cluster: Arc<Cluster>,
        trace: Trace,
        until: Duration,
        records: Arc<Mutex<Vec<Record>>>,
    ) {
        while trace.elapsed() < until {
            let think = self
                .random
                .random_range(0..=MAX_THINK_TIME.as_micros() as u64);
            tokio::time::sleep(Duration::from_micros(think)).await;
            let members = cluster.running_ids();
            if members.is_empty() {
                continue;
            }
            let member = members[self.random.random_range(0..members.len())];
            let Some(backend) = cluster.backend(member) else {
                continue;
            };
            let operation = self.next_operation();
            let sent = self.send(&backend, member, operation, &trace);
            let mut record = cluster.on_member(member, sent).await;
            drop(backend);
            if self.retries(&record) {
                record = self.retry(record, &cluster, &trace).await;
            }
            records
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(record);
        }
    }

    /// Whether to send `record`'s request again: an update (never a create, whose compare on an
    /// absent key could hold again after a delete) that got no answer, half the time.
    fn retries(&mut self, record: &Record) -> bool {
        let update = matches!(
            record.operation,
            Operation::CompareAndSwap { expected_mod_revision, .. } if expected_mod_revision > 0
        );
        update && record.outcome == Outcome::Unknown && self.random.random_bool(0.5)
    }

    /// Sends `first`'s request again through another member and answers the two as one
    /// operation, from the first invocation to the retry's answer. A retry that lost its compare
    /// may have lost to the first attempt, so that outcome stays unknown.
    async fn retry(&mut self, first: Record, cluster: &Cluster, trace: &Trace) -> Record {
        let others: Vec<u64> = cluster
            .running_ids()
            .into_iter()
            .filter(|id| *id != first.member)
            .collect();
        if others.is_empty() {
            return first;
        }
        let member = others[self.random.random_range(0..others.len())];
        let Some(backend) = cluster.backend(member) else {
            return first;
        };
        let again = first.operation.clone();
        trace.record(
            Some(member),
            Some(again.key()),
            format!("client {} retries", self.id),
        );
        let sent = self.send(&backend, member, again, trace);
        let retried = cluster.on_member(member, sent).await;
        let outcome = match retried.outcome {
            Outcome::Changed { revision } => Outcome::Changed { revision },
            Outcome::Observed { .. } | Outcome::Unknown => Outcome::Unknown,
        };
        Record {
            member,
            outcome,
            answered_at: retried.answered_at,
            ..first
        }
    }

    fn next_operation(&mut self) -> Operation {
        self.requests_sent += 1;
        let key = self.keys[self.random.random_range(0..self.keys.len())].clone();
        let value = format!("c{}-{}", self.id, self.requests_sent);
        match self.random.random_range(0..100) {
            0..30 => Operation::Put { key, value },
            30..55 => Operation::Get { key },
            55..65 => Operation::SerializableGet { key },
            65..90 => Operation::CompareAndSwap {
                expected_mod_revision: self.last_seen_mod_revision.get(&key).copied().unwrap_or(0),
                key,
                value,
            },
            _ => Operation::Delete { key },
        }
    }

    async fn send(
        &mut self,
        backend: &MemberBackend,
        member: u64,
        operation: Operation,
        trace: &Trace,
    ) -> Record {
        let key = operation.key().to_owned();
        let invoked_at = trace.elapsed();
        trace.record(
            Some(member),
            Some(&key),
            format!("client {} sends {operation:?}", self.id),
        );
        let answer = tokio::time::timeout(REQUEST_DEADLINE, execute(backend, &operation)).await;
        let outcome = match answer {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(error)) => {
                trace.record(
                    Some(member),
                    Some(&key),
                    format!("client {} error: {error}", self.id),
                );
                Outcome::Unknown
            }
            Err(_elapsed) => Outcome::Unknown,
        };
        self.remember(&key, &outcome);
        trace.record(
            Some(member),
            Some(&key),
            format!("client {} got {outcome:?}", self.id),
        );
        Record {
            client: self.id,
            member,
            operation,
            invoked_at,
            answered_at: Some(trace.elapsed()),
            outcome,
        }
    }

    /// Keeps the key's mod revision the client last learned, as a Kubernetes client keeps an
    /// object's resourceVersion for its next update.
    fn remember(&mut self, key: &str, outcome: &Outcome) {
        let mod_revision = match outcome {
            Outcome::Changed { revision } => *revision,
            Outcome::Observed { value, .. } => value.as_ref().map_or(0, |seen| seen.mod_revision),
            Outcome::Unknown => return,
        };
        self.last_seen_mod_revision
            .insert(key.to_owned(), mod_revision);
    }
}

/// Sends one operation and turns its answer into an outcome.
async fn execute(backend: &MemberBackend, operation: &Operation) -> Result<Outcome, NodeError> {
    match operation {
        Operation::Put { key, value } => {
            let written = backend.write(Request::Put(put(key, value))).await?;
            Ok(Outcome::Changed {
                revision: written.header.revision,
            })
        }
        Operation::Delete { key } => {
            let delete = DeleteRangeRequest {
                range: KeyRange::single(key.as_bytes()),
                prev_kv: false,
            };
            let written = backend.write(Request::DeleteRange(delete)).await?;
            let revision = written.header.revision;
            match written.response {
                Response::DeleteRange(deleted) if deleted.deleted > 0 => {
                    Ok(Outcome::Changed { revision })
                }
                Response::DeleteRange(_) => Ok(Outcome::Observed {
                    revision,
                    value: None,
                }),
                other => Err(unexpected(other)),
            }
        }
        Operation::CompareAndSwap {
            key,
            expected_mod_revision,
            value,
        } => compare_and_swap(backend, key, *expected_mod_revision, value).await,
        Operation::Get { key } => read(backend, key, ReadConsistency::Linearizable).await,
        Operation::SerializableGet { key } => {
            let consistency = ReadConsistency::Serializable { min_revision: None };
            read(backend, key, consistency).await
        }
    }
}

async fn read(
    backend: &MemberBackend,
    key: &str,
    consistency: ReadConsistency,
) -> Result<Outcome, NodeError> {
    let request = RangeRequest::of(KeyRange::single(key.as_bytes()));
    let answer = backend.read(request, consistency).await?;
    Ok(Outcome::Observed {
        revision: answer.header.revision,
        value: answer.response.kvs.first().map(observed),
    })
}

/// A put of `value` if the key's mod revision is `expected`; on failure, the key as it is, as
/// a Kubernetes update reads the object it lost to.
async fn compare_and_swap(
    backend: &MemberBackend,
    key: &str,
    expected: u64,
    value: &str,
) -> Result<Outcome, NodeError> {
    let txn = TxnRequest {
        compare: vec![Compare {
            key: key.as_bytes().to_vec(),
            range_end: revkv_storage::RangeEnd::Single,
            target: CompareTarget::ModRevision(expected),
            op: CompareOp::Equal,
        }],
        success: vec![TxnOp::Put(put(key, value))],
        failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single(
            key.as_bytes(),
        )))],
    };
    let written = backend.write(Request::Txn(txn)).await?;
    let revision = written.header.revision;
    let Response::Txn(answer) = written.response else {
        return Err(unexpected(written.response));
    };
    if answer.succeeded {
        return Ok(Outcome::Changed { revision });
    }
    let value = match answer.responses.first() {
        Some(revkv_storage::TxnOpResponse::Get(read)) => read.kvs.first().map(observed),
        other => {
            return Err(NodeError::Internal(format!(
                "txn failure answered {other:?}"
            )))
        }
    };
    Ok(Outcome::Observed { revision, value })
}

fn put(key: &str, value: &str) -> PutRequest {
    PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        lease: 0,
        prev_kv: false,
    }
}

fn observed(kv: &revkv_storage::KeyValue) -> Observed {
    Observed {
        value: String::from_utf8_lossy(&kv.value).into_owned(),
        mod_revision: kv.mod_revision,
    }
}

fn unexpected(response: Response) -> NodeError {
    NodeError::Internal(format!("unexpected answer {response:?}"))
}
