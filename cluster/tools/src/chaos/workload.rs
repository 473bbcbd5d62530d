//! The randomized workload: concurrent workers that each send one operation at a time to a
//! randomly chosen member and record it (invocation, completion, outcome) for the checkers.
//!
//! The operations mix what Kubernetes-style clients do: puts, deletes, reads of both
//! consistencies, prefix ranges, compare-and-swap (a read, then a put with `If-Match` on the
//! `mod_revision` read), multi-key txns and merge patches. They go over plain HTTP rather than
//! through [`Client`](revkv_client::Client), so nothing retries or fails over behind the history's back:
//! each recorded operation is exactly one request to one member.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::history::{value_of_operation, Answer, Consistency, Kv, Operation, Outcome, Request};
use super::members::SharedEndpoints;

/// Every key the workload touches lives under this prefix.
pub const KEY_PREFIX: &str = "chaos/";
/// The keys the lease workload attaches to leases (and no other operation writes or deletes).
pub const LEASE_KEY_PREFIX: &str = "chaos/lease/";

/// The most operations one run records: the workload stops there rather than let the history
/// outgrow the machine. An hour (the longest run) records about 4.5 million.
pub const MAX_OPERATIONS: usize = 5_000_000;

/// How long the harness waits for one answer. Above the members' own request timeout, so their
/// 504 normally comes first; past it a write is recorded as outcome unknown.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What every worker shares.
#[derive(Clone)]
pub struct WorkloadContext {
    pub endpoints: SharedEndpoints,
    pub started: Instant,
    pub deadline: Instant,
    pub keys: usize,
    next_id: Arc<AtomicUsize>,
    /// The next lease id the lease workload grants (the harness picks ids, so that a grant whose
    /// answer was lost still names its lease).
    next_lease_id: Arc<AtomicI64>,
    recorded: Arc<Mutex<Vec<Operation>>>,
    http: reqwest::Client,
}

impl WorkloadContext {
    pub fn new(
        endpoints: SharedEndpoints,
        started: Instant,
        deadline: Instant,
        keys: usize,
    ) -> Self {
        WorkloadContext {
            endpoints,
            started,
            deadline,
            keys,
            next_id: Arc::new(AtomicUsize::new(0)),
            next_lease_id: Arc::new(AtomicI64::new(1)),
            recorded: Arc::new(Mutex::new(Vec::new())),
            http: reqwest::Client::builder()
                .timeout(CALL_TIMEOUT)
                .connect_timeout(Duration::from_secs(1))
                .build()
                .expect("a plain HTTP client always builds"),
        }
    }

    /// A lease id never granted before in this run.
    pub fn new_lease_id(&self) -> i64 {
        self.next_lease_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the workload should go on: before the deadline and with room in the history.
    pub fn goes_on(&self) -> bool {
        Instant::now() < self.deadline && self.next_id.load(Ordering::Relaxed) < MAX_OPERATIONS
    }

    /// A random member: its id and client URL.
    pub fn random_member(&self, random: &mut fastrand::Rng) -> (u64, String) {
        let endpoints = self.endpoints.read().expect("endpoints lock");
        endpoints[random.usize(..endpoints.len())].clone()
    }

    /// Every operation recorded, indexed by id (taken out: call it once, after the workers end).
    pub fn take_operations(&self) -> Vec<Operation> {
        let mut operations = std::mem::take(&mut *self.recorded.lock().expect("history lock"));
        operations.sort_by_key(|operation| operation.id);
        operations
    }
}

/// One worker: sends operations until the deadline (or until the history is full).
pub async fn run_worker(context: WorkloadContext, worker: usize, seed: u64) {
    let mut random = fastrand::Rng::with_seed(seed);
    while context.goes_on() {
        let (member, url) = context.random_member(&mut random);
        let key = format!("{KEY_PREFIX}k{}", random.usize(..context.keys));
        let request = match random.u32(..100) {
            0..=19 => Request::Put {
                key,
                if_mod_revision: None,
            },
            20..=29 => Request::Delete { key },
            30..=44 => Request::Get {
                key,
                consistency: Consistency::Linearizable,
            },
            45..=54 => Request::Get {
                key,
                consistency: Consistency::Serializable,
            },
            55..=62 => Request::Range {
                prefix: KEY_PREFIX.into(),
                consistency: if random.bool() {
                    Consistency::Linearizable
                } else {
                    Consistency::Serializable
                },
            },
            63..=79 => {
                compare_and_swap(&context, worker, member, &url, key).await;
                continue;
            }
            80..=91 => Request::Txn {
                keys: distinct_keys(&mut random, context.keys),
            },
            _ => Request::Patch { key },
        };
        record(&context, worker, member, &url, request).await;
    }
}

/// A read, then a put conditional on the `mod_revision` read (or on absence).
async fn compare_and_swap(
    context: &WorkloadContext,
    worker: usize,
    member: u64,
    url: &str,
    key: String,
) {
    let read = Request::Get {
        key: key.clone(),
        consistency: Consistency::Linearizable,
    };
    let expected = match record(context, worker, member, url, read).await {
        Outcome::Ok {
            answer: Answer::Value(kv),
            ..
        } => kv.mod_revision,
        Outcome::NotFound => 0,
        _ => return,
    };
    let write = Request::Put {
        key,
        if_mod_revision: Some(expected),
    };
    record(context, worker, member, url, write).await;
}

/// Two or three different keys for a txn.
fn distinct_keys(random: &mut fastrand::Rng, keys: usize) -> Vec<String> {
    let count = random.usize(2..=3).min(keys);
    let mut chosen: Vec<usize> = Vec::with_capacity(count);
    while chosen.len() < count {
        let key = random.usize(..keys);
        if !chosen.contains(&key) {
            chosen.push(key);
        }
    }
    chosen
        .into_iter()
        .map(|key| format!("{KEY_PREFIX}k{key}"))
        .collect()
}

/// Sends one operation, records it, and returns its outcome.
pub(super) async fn record(
    context: &WorkloadContext,
    worker: usize,
    member: u64,
    url: &str,
    request: Request,
) -> Outcome {
    let id = context.next_id.fetch_add(1, Ordering::SeqCst);
    let invoked = context.started.elapsed();
    let outcome = send(&context.http, url, id, &request).await;
    let completed = context.started.elapsed();
    let operation = Operation {
        id,
        worker,
        member,
        request,
        invoked,
        completed,
        outcome: outcome.clone(),
    };
    context
        .recorded
        .lock()
        .expect("history lock")
        .push(operation);
    outcome
}

/// The HTTP request of one operation, and its answer as an [`Outcome`].
async fn send(http: &reqwest::Client, url: &str, id: usize, request: &Request) -> Outcome {
    let builder = http_request_of(http, url, id, request);
    let answer = match builder.send().await {
        Ok(answer) => answer,
        Err(error) => return transport_outcome(request, &error),
    };
    let status = answer.status();
    let body: Value = match answer.json().await {
        Ok(body) => body,
        Err(error) => return transport_outcome(request, &error),
    };
    outcome_of_answer(request, status, &body)
}

/// The one HTTP request to the member at `url` that performs operation `id`. Every value it
/// writes is the operation's own ([`value_of_operation`]), so the checkers can tell which
/// operation wrote what they see.
fn http_request_of(
    http: &reqwest::Client,
    url: &str,
    id: usize,
    request: &Request,
) -> reqwest::RequestBuilder {
    let value = value_of_operation(id);
    match request {
        Request::Put {
            key,
            if_mod_revision,
        } => conditional_put(http, url, key, &value, *if_mod_revision),
        Request::Delete { key } => http.delete(format!("{url}/v1/kv/{key}")),
        Request::Get { key, consistency } => http.get(format!(
            "{url}/v1/kv/{key}?consistency={}",
            consistency_name(*consistency)
        )),
        Request::Range {
            prefix,
            consistency,
        } => http.get(format!(
            "{url}/v1/kv?prefix={prefix}&consistency={}",
            consistency_name(*consistency)
        )),
        Request::Txn { keys } => txn_putting_every_key(http, url, keys, &value),
        Request::Patch { key } => http
            .request(Method::PATCH, format!("{url}/v1/kv/{key}?create=true"))
            .header("content-type", "application/merge-patch+json")
            .body(json!({ "tag": format!("o{id}") }).to_string()),
        Request::LeasedPut { key, lease } => http
            .put(format!("{url}/v1/kv/{key}"))
            .json(&json!({ "value": value, "lease": lease })),
        Request::LeaseGrant { lease, ttl_seconds } => http
            .post(format!("{url}/v1/leases"))
            .json(&json!({ "ttl": ttl_seconds, "id": lease })),
        Request::LeaseKeepAlive { lease } => {
            http.post(format!("{url}/v1/leases/{lease}/keepalive"))
        }
        Request::LeaseRevoke { lease } => http.delete(format!("{url}/v1/leases/{lease}")),
    }
}

/// A `PUT` of `value` to `key`: unconditional without `if_mod_revision`, only if the key is
/// absent for revision 0 (`If-None-Match: *`), otherwise only if the key's `mod_revision` is that
/// revision (`If-Match`).
fn conditional_put(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    value: &str,
    if_mod_revision: Option<u64>,
) -> reqwest::RequestBuilder {
    let builder = http
        .put(format!("{url}/v1/kv/{key}"))
        .json(&json!({ "value": value }));
    match if_mod_revision {
        None => builder,
        Some(0) => builder.header("if-none-match", "*"),
        Some(revision) => builder.header("if-match", format!("\"{revision}\"")),
    }
}

/// A txn with no compare that puts `value` to every one of `keys` at one revision.
fn txn_putting_every_key(
    http: &reqwest::Client,
    url: &str,
    keys: &[String],
    value: &str,
) -> reqwest::RequestBuilder {
    let puts: Vec<Value> = keys
        .iter()
        .map(|key| json!({ "put": { "key": key, "value": value } }))
        .collect();
    http.post(format!("{url}/v1/txn"))
        .json(&json!({ "compare": [], "success": puts, "failure": [] }))
}

fn consistency_name(consistency: Consistency) -> &'static str {
    match consistency {
        Consistency::Linearizable => "linearizable",
        Consistency::Serializable => "serializable",
    }
}

/// A request that got no answer: a write (or keep-alive) that may have been sent has an unknown
/// outcome; a refused connection, or any read, did nothing.
fn transport_outcome(request: &Request, error: &reqwest::Error) -> Outcome {
    let reason = transport_reason(error);
    if request.may_change_state() && !error.is_connect() {
        Outcome::Unknown { reason }
    } else {
        Outcome::Failed { reason }
    }
}

/// What went wrong, by kind and innermost cause (the outer layers only repeat the URL).
fn transport_reason(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "connect"
    } else if error.is_timeout() {
        "timeout"
    } else {
        "transport"
    };
    let mut cause: &dyn std::error::Error = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    format!("{kind} error: {cause}")
}

fn outcome_of_answer(request: &Request, status: StatusCode, body: &Value) -> Outcome {
    let revision = body["header"]["revision"].as_u64();
    match (status.as_u16(), revision) {
        (200, Some(revision)) => match answer_of(request, body) {
            Some(answer) => Outcome::Ok { revision, answer },
            None => Outcome::Failed {
                reason: format!("unreadable answer {body}"),
            },
        },
        (404, _)
            if matches!(
                request,
                Request::Get { .. } | Request::LeaseKeepAlive { .. } | Request::LeaseRevoke { .. }
            ) =>
        {
            Outcome::NotFound
        }
        (409, _) => Outcome::Conflict {
            current: body
                .get("current")
                .filter(|kv| !kv.is_null())
                .map(Kv::from_json),
        },
        (504, _) if request.may_change_state() => Outcome::Unknown {
            reason: format!("504 {body}"),
        },
        (status, _) => Outcome::Failed {
            reason: format!("{status} {body}"),
        },
    }
}

fn answer_of(request: &Request, body: &Value) -> Option<Answer> {
    Some(match request {
        Request::Put { .. } | Request::Txn { .. } | Request::LeasedPut { .. } => Answer::Written,
        Request::LeaseGrant { .. } | Request::LeaseKeepAlive { .. } => Answer::Lease {
            ttl_seconds: body["ttl"].as_i64()?,
        },
        Request::LeaseRevoke { .. } => Answer::Revoked,
        Request::Delete { .. } => Answer::Deleted {
            deleted: body["deleted"].as_u64()?,
        },
        Request::Get { .. } => Answer::Value(Kv::from_json(&body["kv"])),
        Request::Patch { .. } => Answer::Patched(Kv::from_json(&body["kv"])),
        Request::Range { .. } => Answer::Range(
            body["kvs"]
                .as_array()?
                .iter()
                .map(|kv| Some((kv["key"].as_str()?.to_string(), Kv::from_json(kv))))
                .collect::<Option<Vec<_>>>()?,
        ),
    })
}
