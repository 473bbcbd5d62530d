//! `--target etcd-grpc`: the bench's operations through etcd's native gRPC API (the one
//! Kubernetes' apiserver uses), with the tools' etcd client ([`crate::etcd_api`]).
//!
//! An [`EtcdGrpcConnection`] is one [`EtcdClient`] on a single endpoint, so one HTTP/2
//! connection; clones share it, and the client tasks share `--conns` of them (default 1), as
//! etcd's own benchmark and Kubernetes' apiserver multiplex many requests over few connections.
//! `--request-timeout` bounds every request twice: through `ConnectOptions` (tonic's own
//! request and connect timeouts) and through a `tokio` timeout around each call, so that a call
//! waiting on a connection that never comes up still ends.
//!
//! - `Put`: `KV.Put(key, value)`.
//! - `Get`: `KV.Range(key)`, linearizable by default, or `serializable` as etcd's clients ask for
//!   it; an answer without a key-value is [`FailureKind::MissingKey`], as for the other targets.
//! - `Increment` (the cas workload): read the counter and its mod revision, then a `Txn` that puts
//!   value + 1 only if the mod revision is unchanged (0 for a missing key, which etcd reports for
//!   keys that do not exist); a txn that did not succeed is a conflict, retried by
//!   [`cas::increment_with_retries`] exactly as the HTTP targets' increments are.
//!
//! gRPC failures map onto the report's [`FailureKind`]s: a timeout (`DEADLINE_EXCEEDED`, or
//! tonic's own "Timeout expired" cancellation) is `timeout`, `UNAVAILABLE` and transport errors
//! are `connect`, and any other status is a `Status` carrying the gRPC code and its message.

use std::future::Future;
use std::time::Duration;

use revkv_client::ClientError;
use tonic::Code;

use crate::etcd_api::pb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    request_op::Request,
    Compare, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use crate::etcd_api::{ConnectOptions, EtcdClient, EtcdError, KvClient};

use super::cas::{self, CasCounters, CounterState};
use super::target::{shortened, FailureKind};
use super::workload::{Operation, ReadConsistency};

/// The longest wait for a connection, whatever `--request-timeout` is (the HTTP targets use the
/// same ceiling), so that a member that is down is reported soon.
const LONGEST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What tonic's own request timeout says when it fires (`tonic::TimeoutExpired`), which it
/// reports as `CANCELLED` rather than `DEADLINE_EXCEEDED`.
const TONIC_TIMEOUT_MESSAGE: &str = "Timeout expired";

/// One client task's gRPC connection to one etcd member.
#[derive(Clone)]
pub struct EtcdGrpcConnection {
    kv: KvClient,
    request_timeout: Duration,
}

impl EtcdGrpcConnection {
    /// A client of the member at `endpoint` (`http://host:port`). The client connects lazily,
    /// so an unreachable member shows up as `connect` failures of the first requests.
    pub async fn connect(endpoint: &str, request_timeout: Duration) -> Result<Self, String> {
        let options = ConnectOptions::new()
            .with_timeout(request_timeout)
            .with_connect_timeout(request_timeout.min(LONGEST_CONNECT_TIMEOUT));
        let client = EtcdClient::connect(&[endpoint], options)
            .await
            .map_err(|error| format!("cannot make a gRPC client of {endpoint}: {error}"))?;
        Ok(EtcdGrpcConnection {
            kv: client.kv(),
            request_timeout,
        })
    }

    /// Performs `operation`; an increment counts its attempts and conflicts in `cas_counters`.
    pub async fn perform(
        &mut self,
        operation: &Operation,
        cas_counters: &CasCounters,
    ) -> Result<(), FailureKind> {
        match operation {
            Operation::Put { key, value } => self
                .put(key, value)
                .await
                .map_err(|error| cas::failure_of(&error)),
            Operation::Get { key, consistency } => self.get(key, *consistency).await,
            Operation::Increment { key } => {
                cas::increment_with_retries(cas_counters, key, || {
                    // Each attempt gets its own handle (a clone shares the connection), so the
                    // retry loop can hold several attempts' futures without borrowing `self`.
                    let mut attempt = self.clone();
                    async move { attempt.attempt_increment(key).await }
                })
                .await
            }
        }
    }

    async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ClientError> {
        let call = self.kv.put(put_request(key, value));
        within(self.request_timeout, call).await.map(|_| ())
    }

    async fn get(&mut self, key: &str, consistency: ReadConsistency) -> Result<(), FailureKind> {
        let read = RangeRequest {
            key: key.as_bytes().to_vec(),
            serializable: consistency == ReadConsistency::Serializable,
            ..RangeRequest::default()
        };
        let call = self.kv.range(read);
        let answer = within(self.request_timeout, call)
            .await
            .map_err(|error| cas::failure_of(&error))?;
        if answer.kvs.is_empty() {
            return Err(FailureKind::MissingKey);
        }
        Ok(())
    }

    /// One read-modify-write attempt: read the counter, then put value + 1 if it is unchanged.
    async fn attempt_increment(&mut self, key: &str) -> Result<(), ClientError> {
        let state = self.read_counter(key).await?;
        let next = (state.value + 1).to_string();
        let txn = increment_txn(key, &next, state.mod_revision)?;
        let answer = within(self.request_timeout, self.kv.txn(txn)).await?;
        if answer.succeeded {
            Ok(())
        } else {
            Err(cas::conflict())
        }
    }

    /// The counter at `key` (linearizable, as a read-modify-write needs); a missing key is 0 at
    /// mod revision 0, which is what a txn compares a missing key's mod revision with.
    async fn read_counter(&mut self, key: &str) -> Result<CounterState, ClientError> {
        let read = RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        };
        let answer = within(self.request_timeout, self.kv.range(read)).await?;
        let Some(kv) = answer.kvs.first() else {
            return Ok(CounterState {
                value: 0,
                mod_revision: 0,
            });
        };
        counter_state(&kv.value, kv.mod_revision)
    }
}

/// The counter a read found: `value` must be a decimal number, `mod_revision` non-negative.
pub fn counter_state(value: &[u8], mod_revision: i64) -> Result<CounterState, ClientError> {
    let text = String::from_utf8_lossy(value);
    let value = text
        .trim()
        .parse()
        .map_err(|_| ClientError::UnreadableAnswer {
            message: format!("the counter holds {text:?}, not a number"),
        })?;
    let mod_revision = u64::try_from(mod_revision).map_err(|_| ClientError::UnreadableAnswer {
        message: format!("the counter's mod revision {mod_revision} is negative"),
    })?;
    Ok(CounterState {
        value,
        mod_revision,
    })
}

/// A put of `value` at `key`, nothing else asked for.
fn put_request(key: &str, value: &[u8]) -> PutRequest {
    PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.to_vec(),
        ..PutRequest::default()
    }
}

/// The txn of one increment: if `mod_revision(key) == mod_revision` then put `key = value`.
fn increment_txn(key: &str, value: &str, mod_revision: u64) -> Result<TxnRequest, ClientError> {
    let mod_revision = i64::try_from(mod_revision).map_err(|_| ClientError::Invalid {
        message: format!("mod revision {mod_revision} does not fit etcd's int64"),
    })?;
    let unchanged = Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Mod.into(),
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::ModRevision(mod_revision)),
    };
    let put = RequestOp {
        request: Some(Request::RequestPut(put_request(key, value.as_bytes()))),
    };
    Ok(TxnRequest {
        compare: vec![unchanged],
        success: vec![put],
        failure: Vec::new(),
    })
}

/// Runs one gRPC `call`, giving up after `limit`, and turns its error into a [`ClientError`].
async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ClientError> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => answer
            .map(tonic::Response::into_inner)
            .map_err(|status| client_error_of(EtcdError::Status(status))),
        Err(_) => Err(ClientError::Timeout {
            message: format!("no answer within {limit:?}"),
        }),
    }
}

/// An etcd client error as the [`ClientError`] the cas machinery and [`cas::failure_of`] read:
/// a status by its code, anything else (which only connecting can give) as transport.
pub fn client_error_of(error: EtcdError) -> ClientError {
    match error {
        EtcdError::Status(status) => client_error_of_status(status.code(), status.message()),
        other => ClientError::Transport {
            message: other.to_string(),
        },
    }
}

/// A gRPC status as a [`ClientError`]: timeouts, unavailability, and every other code as a
/// `Server` error whose status is the gRPC code number (which the report shows as `grpc N`).
pub fn client_error_of_status(code: Code, message: &str) -> ClientError {
    match code {
        Code::DeadlineExceeded => ClientError::Timeout {
            message: message.to_string(),
        },
        Code::Cancelled if message == TONIC_TIMEOUT_MESSAGE => ClientError::Timeout {
            message: message.to_string(),
        },
        Code::Unavailable => ClientError::Unavailable {
            attempts: 1,
            message: message.to_string(),
        },
        other => ClientError::Server {
            status: u16::try_from(other as i32).unwrap_or(u16::MAX),
            code: shortened(message),
            message: message.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure_of_status(code: Code, message: &str) -> FailureKind {
        cas::failure_of(&client_error_of_status(code, message))
    }

    #[test]
    fn timeouts_of_the_server_and_of_tonic_are_timeouts() {
        assert_eq!(
            failure_of_status(Code::DeadlineExceeded, "context deadline exceeded"),
            FailureKind::Timeout
        );
        assert_eq!(
            failure_of_status(Code::Cancelled, "Timeout expired"),
            FailureKind::Timeout
        );
    }

    #[test]
    fn an_unavailable_member_is_a_connect_failure() {
        assert_eq!(
            failure_of_status(Code::Unavailable, "tcp connect error"),
            FailureKind::Connect
        );
    }

    #[test]
    fn other_statuses_keep_their_grpc_code_and_message() {
        let failure = failure_of_status(Code::InvalidArgument, "etcdserver: key is not provided");
        assert_eq!(
            failure,
            FailureKind::Status {
                status: 3,
                reason: "etcdserver: key is not provided".into()
            }
        );
        assert_eq!(
            failure.to_string(),
            "grpc 3 etcdserver: key is not provided"
        );
        let cancelled = failure_of_status(Code::Cancelled, "context canceled");
        assert_eq!(cancelled.to_string(), "grpc 1 context canceled");
    }

    #[test]
    fn statuses_and_other_errors_of_the_etcd_client_are_told_apart() {
        let status = EtcdError::Status(tonic::Status::unavailable("no leader"));
        assert!(matches!(
            client_error_of(status),
            ClientError::Unavailable { .. }
        ));
        let invalid = EtcdError::InvalidArgs("empty endpoints".into());
        assert!(matches!(
            client_error_of(invalid),
            ClientError::Transport { .. }
        ));
    }

    #[test]
    fn counters_are_decimal_numbers_with_their_mod_revision() {
        assert_eq!(
            counter_state(b"41", 8).unwrap(),
            CounterState {
                value: 41,
                mod_revision: 8
            }
        );
        assert!(counter_state(b"forty-one", 8).is_err());
        assert!(counter_state(b"41", -1).is_err());
    }

    #[test]
    fn the_increment_txn_needs_a_revision_that_fits_int64() {
        assert!(increment_txn("c", "42", 8).is_ok());
        assert!(increment_txn("c", "42", u64::MAX).is_err());
    }
}
