//! The cas workload's operation: add 1 to a counter by read-modify-write, retrying conflicts
//! under the run's policy (`--backoff`: client-go's [`DEFAULT_RETRY`], at most 5 attempts about
//! 10 ms apart, by default; [`DEFAULT_BACKOFF`]; or the client's adaptive backoff, whose waits
//! follow each counter's recent conflicts), counting every attempt and every conflict.
//!
//! - revkv: `GET /v1/kv/{key}`, then `PUT /v1/kv/{key}` with `If-Match: "<mod_revision>"`; a 409
//!   is a conflict. Retries carry `X-Retry-Attempt: n`.
//! - etcd (v3 JSON gateway): `POST /v3/kv/range`, then `POST /v3/kv/txn` comparing the key's
//!   `mod_revision` and putting the new value; an answer without `"succeeded": true` is a conflict.
//!
//! - etcd (native gRPC): the same read and txn through the tools' etcd client, in
//!   [`super::etcd_grpc`], which hands its attempts to [`increment_with_retries`] like the two
//!   above.
//!
//! An increment whose five attempts all conflicted is a failure (`http 409 conflict`) in the
//! report, as it would be for a client-go caller.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use reqwest::header::CONTENT_TYPE;
use serde::Deserialize;
use serde_json::json;

use super::options::CasBackoff;
use super::target::{
    etcd_error_message, json_bytes, revkv_error_code, FailureKind, TargetKind,
    ETCD_GRPC_IS_NOT_HTTP,
};
use revkv_client::retry::current_retry_attempt;
use revkv_client::{
    retry_on_conflict_adaptive, retry_on_conflict_counted, ClientError, ConflictHistory,
    TokioSleeper, DEFAULT_ADAPTIVE_BACKOFF, DEFAULT_BACKOFF, DEFAULT_RETRY, RETRY_ATTEMPT_HEADER,
};

/// Attempts and conflicts of every increment of a run, and the retry policy with its shared
/// conflict history (one for all the client tasks, as one process's clients would share it).
#[derive(Debug)]
pub struct CasCounters {
    pub attempts: AtomicU64,
    pub conflicts: AtomicU64,
    backoff: CasBackoff,
    history: ConflictHistory,
}

impl CasCounters {
    pub fn new(backoff: CasBackoff) -> CasCounters {
        CasCounters {
            attempts: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            backoff,
            history: ConflictHistory::default(),
        }
    }
}

impl Default for CasCounters {
    fn default() -> Self {
        CasCounters::new(CasBackoff::DefaultRetry)
    }
}

/// A counter as read: its value and the revision to compare against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterState {
    pub value: u64,
    pub mod_revision: u64,
}

/// Adds 1 to the counter at `key` through `endpoint`, retrying conflicts.
pub async fn increment(
    http: &reqwest::Client,
    target: TargetKind,
    endpoint: &str,
    key: &str,
    counters: &CasCounters,
) -> Result<(), FailureKind> {
    increment_with_retries(counters, key, || {
        attempt_increment(http, target, endpoint, key)
    })
    .await
}

/// Runs read-modify-write `attempt`s of `key` under the run's retry policy until one takes, one
/// fails other than by a conflict, or the attempts run out, and counts them in `counters`. Every
/// target's increment goes through here, so the retry policy and its accounting are the same
/// whichever protocol carries the requests.
pub async fn increment_with_retries<F, Fut>(
    counters: &CasCounters,
    key: &str,
    attempt: F,
) -> Result<(), FailureKind>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), ClientError>>,
{
    let (outcome, tally) = match counters.backoff {
        CasBackoff::DefaultRetry => {
            retry_on_conflict_counted(DEFAULT_RETRY, &TokioSleeper, attempt).await
        }
        CasBackoff::DefaultBackoff => {
            retry_on_conflict_counted(DEFAULT_BACKOFF, &TokioSleeper, attempt).await
        }
        CasBackoff::Adaptive => {
            retry_on_conflict_adaptive(&counters.history, key, DEFAULT_ADAPTIVE_BACKOFF, attempt)
                .await
        }
    };
    counters
        .attempts
        .fetch_add(u64::from(tally.attempts), Ordering::Relaxed);
    counters
        .conflicts
        .fetch_add(u64::from(tally.conflicts), Ordering::Relaxed);
    outcome.map_err(|error| failure_of(&error))
}

/// One attempt: read, then write value + 1 if the counter is unchanged.
async fn attempt_increment(
    http: &reqwest::Client,
    target: TargetKind,
    endpoint: &str,
    key: &str,
) -> Result<(), ClientError> {
    let read = read_request(http, target, endpoint, key);
    let (status, body) = send(read).await?;
    let state = counter_of_read_answer(target, status, &body)?;
    let write = conditional_write_request(http, target, endpoint, key, state);
    let (status, body) = send(write).await?;
    judge_write_answer(target, status, &body)
}

fn read_request(
    http: &reqwest::Client,
    target: TargetKind,
    endpoint: &str,
    key: &str,
) -> reqwest::RequestBuilder {
    let request = match target {
        TargetKind::Revkv => http.get(format!("{endpoint}/v1/kv/{key}")),
        TargetKind::Etcd => http
            .post(format!("{endpoint}/v3/kv/range"))
            .header(CONTENT_TYPE, "application/json")
            .body(json_bytes(&json!({ "key": BASE64.encode(key) }))),
        TargetKind::EtcdGrpc => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
    };
    with_retry_attempt(request)
}

fn conditional_write_request(
    http: &reqwest::Client,
    target: TargetKind,
    endpoint: &str,
    key: &str,
    state: CounterState,
) -> reqwest::RequestBuilder {
    let next = (state.value + 1).to_string();
    let request = match target {
        TargetKind::Revkv => http
            .put(format!("{endpoint}/v1/kv/{key}"))
            .header("If-Match", format!("\"{}\"", state.mod_revision))
            .body(json_bytes(&json!({ "value": next }))),
        TargetKind::Etcd => {
            http.post(format!("{endpoint}/v3/kv/txn"))
                .body(json_bytes(&etcd_increment_txn(
                    key,
                    &next,
                    state.mod_revision,
                )))
        }
        TargetKind::EtcdGrpc => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
    };
    with_retry_attempt(request.header(CONTENT_TYPE, "application/json"))
}

/// etcd's txn: if `mod_revision(key) == mod_revision` then put `key = value`.
pub fn etcd_increment_txn(key: &str, value: &str, mod_revision: u64) -> serde_json::Value {
    json!({
        "compare": [{
            "key": BASE64.encode(key),
            "target": "MOD",
            "result": "EQUAL",
            "mod_revision": mod_revision.to_string(),
        }],
        "success": [{"request_put": {"key": BASE64.encode(key), "value": BASE64.encode(value)}}],
    })
}

fn with_retry_attempt(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    match current_retry_attempt().filter(|attempt| *attempt >= 1) {
        Some(attempt) => request.header(RETRY_ATTEMPT_HEADER, attempt.to_string()),
        None => request,
    }
}

async fn send(request: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), ClientError> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(transport_error)?;
    Ok((status, body.to_vec()))
}

fn transport_error(error: reqwest::Error) -> ClientError {
    if error.is_timeout() {
        ClientError::Timeout {
            message: error.to_string(),
        }
    } else if error.is_connect() {
        ClientError::Unavailable {
            attempts: 1,
            message: error.to_string(),
        }
    } else {
        ClientError::Transport {
            message: error.to_string(),
        }
    }
}

/// The counter in a read answer.
pub fn counter_of_read_answer(
    target: TargetKind,
    status: u16,
    body: &[u8],
) -> Result<CounterState, ClientError> {
    if status != 200 {
        return Err(status_error(target, status, body));
    }
    let (value, mod_revision) = match target {
        TargetKind::Revkv => revkv_counter(body),
        TargetKind::Etcd => etcd_counter(body),
        TargetKind::EtcdGrpc => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
    }
    .ok_or_else(|| ClientError::UnreadableAnswer {
        message: "the counter's answer has no number and revision".into(),
    })?;
    let value = value
        .trim()
        .parse()
        .map_err(|_| ClientError::UnreadableAnswer {
            message: format!("the counter holds {value:?}, not a number"),
        })?;
    Ok(CounterState {
        value,
        mod_revision,
    })
}

fn revkv_counter(body: &[u8]) -> Option<(String, u64)> {
    #[derive(Deserialize)]
    struct Answer {
        kv: Kv,
    }
    #[derive(Deserialize)]
    struct Kv {
        value: String,
        mod_revision: u64,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    Some((answer.kv.value, answer.kv.mod_revision))
}

/// etcd's gateway writes int64 fields as JSON strings and leaves `kvs` out when nothing matched.
fn etcd_counter(body: &[u8]) -> Option<(String, u64)> {
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    let kv = answer.get("kvs")?.get(0)?;
    let value = BASE64
        .decode(kv.get("value")?.as_str().unwrap_or(""))
        .ok()?;
    let mod_revision = match kv.get("mod_revision")? {
        serde_json::Value::String(text) => text.parse().ok()?,
        number => number.as_u64()?,
    };
    Some((String::from_utf8(value).ok()?, mod_revision))
}

/// Whether the conditional write took: `Ok`, a conflict, or another failure.
pub fn judge_write_answer(target: TargetKind, status: u16, body: &[u8]) -> Result<(), ClientError> {
    match (target, status) {
        (TargetKind::Revkv, 200) => Ok(()),
        (TargetKind::Revkv, 409) => Err(conflict()),
        (TargetKind::Etcd, 200) => {
            let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            match answer.get("succeeded").and_then(serde_json::Value::as_bool) {
                Some(true) => Ok(()),
                _ => Err(conflict()),
            }
        }
        (TargetKind::EtcdGrpc, _) => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
        _ => Err(status_error(target, status, body)),
    }
}

/// The error of an attempt whose conditional write found the counter changed (the one error
/// [`increment_with_retries`] retries).
pub fn conflict() -> ClientError {
    ClientError::Conflict {
        current: None,
        message: "the counter changed since it was read".into(),
        conflicting_fields: Vec::new(),
    }
}

fn status_error(target: TargetKind, status: u16, body: &[u8]) -> ClientError {
    let code = match target {
        TargetKind::Revkv => revkv_error_code(body),
        TargetKind::Etcd => etcd_error_message(body),
        TargetKind::EtcdGrpc => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
    };
    ClientError::Server {
        status,
        code,
        message: String::new(),
    }
}

/// How an increment's error shows in the report.
pub fn failure_of(error: &ClientError) -> FailureKind {
    match error {
        ClientError::Conflict { .. } => FailureKind::Status {
            status: 409,
            reason: "conflict".into(),
        },
        ClientError::Server { status, code, .. } => FailureKind::Status {
            status: *status,
            reason: code.clone(),
        },
        ClientError::Timeout { .. } => FailureKind::Timeout,
        ClientError::Unavailable { .. } => FailureKind::Connect,
        ClientError::UnreadableAnswer { .. } => FailureKind::UnreadableAnswer,
        _ => FailureKind::Transport,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revkv_reads_and_writes_are_judged() {
        let read = br#"{"header": {"revision": 9, "member_id": 1, "raft_term": 2},
            "kv": {"key": "c", "value": "41", "create_revision": 2, "mod_revision": 8,
            "version": 5, "lease": 0}}"#;
        assert_eq!(
            counter_of_read_answer(TargetKind::Revkv, 200, read).unwrap(),
            CounterState {
                value: 41,
                mod_revision: 8
            }
        );
        assert!(judge_write_answer(TargetKind::Revkv, 200, b"{}").is_ok());
        assert!(judge_write_answer(TargetKind::Revkv, 409, b"{}")
            .unwrap_err()
            .is_conflict());
        let unavailable = judge_write_answer(TargetKind::Revkv, 503, b"{}").unwrap_err();
        assert_eq!(
            failure_of(&unavailable),
            FailureKind::Status {
                status: 503,
                reason: String::new()
            }
        );
    }

    #[test]
    fn etcd_reads_take_string_revisions_and_base64_values() {
        let read = br#"{"header": {}, "kvs": [{"key": "Yw==", "value": "NDE=",
            "mod_revision": "8"}], "count": "1"}"#;
        assert_eq!(
            counter_of_read_answer(TargetKind::Etcd, 200, read).unwrap(),
            CounterState {
                value: 41,
                mod_revision: 8
            }
        );
        assert!(counter_of_read_answer(TargetKind::Etcd, 200, br#"{"header": {}}"#).is_err());
    }

    #[test]
    fn an_etcd_txn_without_succeeded_is_a_conflict() {
        assert!(judge_write_answer(TargetKind::Etcd, 200, br#"{"succeeded": true}"#).is_ok());
        assert!(
            judge_write_answer(TargetKind::Etcd, 200, br#"{"header": {}}"#)
                .unwrap_err()
                .is_conflict()
        );
    }

    #[test]
    fn the_etcd_txn_compares_the_mod_revision_and_puts_the_new_value() {
        let txn = etcd_increment_txn("c", "42", 8);
        assert_eq!(txn["compare"][0]["mod_revision"], "8");
        assert_eq!(txn["compare"][0]["target"], "MOD");
        assert_eq!(
            txn["success"][0]["request_put"]["value"],
            BASE64.encode("42")
        );
    }
}
