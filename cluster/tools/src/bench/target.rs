//! The systems `revkv bench` can drive, and how each speaks HTTP: an [`Operation`] becomes a
//! [`PlannedRequest`] (method, URL, JSON body), and an answer (status and body) is judged a success
//! or a [`FailureKind`]. Pure functions, so the wire format is tested without a server.
//!
//! - revkv (`docs/API.md` section 4): `PUT /v1/kv/{key}` with `{"value": "..."}`, and
//!   `GET /v1/kv/{key}?consistency=linearizable|serializable`; 404 means the key is missing.
//! - etcd 3.4's v3 JSON gateway: `POST /v3/kv/put` with `{"key": b64, "value": b64}`, and
//!   `POST /v3/kv/range` with `{"key": b64}` plus `"serializable": true` for serializable reads;
//!   a range answer without `kvs` means the key is missing.
//!
//! `--target etcd-grpc` (etcd's native gRPC API) is not HTTP: `etcd_grpc` performs its operations.
//!
//! An `Increment` (the cas workload) is several requests; its first, the read, is planned here
//! like a linearizable get, and `cas` plans the conditional write.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::workload::{Operation, ReadConsistency};

/// The system under test.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// revkv's HTTP/JSON API.
    Revkv,
    /// etcd's v3 JSON (grpc-gateway) API on its client port.
    Etcd,
    /// etcd's native gRPC API (what Kubernetes uses) on its client port, through the tools' etcd
    /// client; see [`super::etcd_grpc`]. Not HTTP/JSON: the request planning and
    /// answer judging below are for the two other targets only.
    #[serde(rename = "etcd-grpc")]
    #[value(name = "etcd-grpc")]
    EtcdGrpc,
}

/// Why the HTTP/JSON functions refuse `--target etcd-grpc`: the driver sends its operations
/// through [`super::etcd_grpc`] and never asks for an HTTP request for it.
pub const ETCD_GRPC_IS_NOT_HTTP: &str =
    "--target etcd-grpc speaks gRPC through bench::etcd_grpc, not HTTP/JSON";

/// The HTTP methods the workloads use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    Get,
    Put,
    Post,
}

/// A request ready to send: the driver only copies these fields into its HTTP client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRequest {
    pub method: HttpMethod,
    pub url: String,
    /// A JSON document, sent with `Content-Type: application/json`.
    pub json_body: Option<Vec<u8>>,
}

/// Why an operation failed, grouped coarsely enough that the report's failure table stays short.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailureKind {
    /// The request did not complete within `--request-timeout`.
    Timeout,
    /// No connection could be made.
    Connect,
    /// The connection failed in another way (reset, closed early, ...).
    Transport,
    /// A non-success status; `reason` is the error code (revkv) or message (etcd) of the body.
    /// Over gRPC (`--target etcd-grpc`), `status` is the gRPC status code (0 to 16, so never an
    /// HTTP status, which starts at 100) and `reason` the status message.
    Status { status: u16, reason: String },
    /// A read found no value for a key the setup wrote.
    MissingKey,
    /// A success status whose body could not be understood.
    UnreadableAnswer,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::Timeout => write!(formatter, "timeout"),
            FailureKind::Connect => write!(formatter, "connect"),
            FailureKind::Transport => write!(formatter, "transport"),
            FailureKind::Status { status, reason } => {
                let protocol = if *status < LOWEST_HTTP_STATUS {
                    "grpc"
                } else {
                    "http"
                };
                write!(formatter, "{protocol} {status}")?;
                if !reason.is_empty() {
                    write!(formatter, " {reason}")?;
                }
                Ok(())
            }
            FailureKind::MissingKey => write!(formatter, "missing key"),
            FailureKind::UnreadableAnswer => write!(formatter, "unreadable answer"),
        }
    }
}

/// HTTP statuses start here; gRPC status codes (0 to 16) are all below it.
const LOWEST_HTTP_STATUS: u16 = 100;

/// The longest error reason kept from an answer (etcd's messages are free text).
const LONGEST_FAILURE_REASON: usize = 60;

impl TargetKind {
    /// The client URLs of the local three-member cluster each start script makes.
    pub fn default_endpoints(self) -> Vec<String> {
        let ports: [u16; 3] = match self {
            TargetKind::Revkv => [7001, 7002, 7003],
            TargetKind::Etcd | TargetKind::EtcdGrpc => [12379, 22379, 32379],
        };
        ports
            .iter()
            .map(|port| format!("http://127.0.0.1:{port}"))
            .collect()
    }

    /// The name the report gives the target (the one `--target` takes).
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Revkv => "revkv",
            TargetKind::Etcd => "etcd",
            TargetKind::EtcdGrpc => "etcd-grpc",
        }
    }

    /// The request that performs `operation` on the member at `endpoint` (no trailing slash).
    pub fn plan_request(self, endpoint: &str, operation: &Operation) -> PlannedRequest {
        match (self, operation) {
            (TargetKind::EtcdGrpc, _) => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
            (TargetKind::Revkv, Operation::Put { key, value }) => PlannedRequest {
                method: HttpMethod::Put,
                url: format!("{endpoint}/v1/kv/{key}"),
                json_body: Some(json_bytes(&json!({
                    "value": String::from_utf8_lossy(value),
                }))),
            },
            (target, Operation::Increment { key }) => target.plan_request(
                endpoint,
                &Operation::Get {
                    key: key.clone(),
                    consistency: ReadConsistency::Linearizable,
                },
            ),
            (TargetKind::Revkv, Operation::Get { key, consistency }) => PlannedRequest {
                method: HttpMethod::Get,
                url: format!(
                    "{endpoint}/v1/kv/{key}?consistency={}",
                    consistency.as_query_value()
                ),
                json_body: None,
            },
            (TargetKind::Etcd, Operation::Put { key, value }) => PlannedRequest {
                method: HttpMethod::Post,
                url: format!("{endpoint}/v3/kv/put"),
                json_body: Some(json_bytes(&json!({
                    "key": BASE64.encode(key),
                    "value": BASE64.encode(value),
                }))),
            },
            (TargetKind::Etcd, Operation::Get { key, consistency }) => {
                let body = match consistency {
                    ReadConsistency::Linearizable => json!({ "key": BASE64.encode(key) }),
                    ReadConsistency::Serializable => {
                        json!({ "key": BASE64.encode(key), "serializable": true })
                    }
                };
                PlannedRequest {
                    method: HttpMethod::Post,
                    url: format!("{endpoint}/v3/kv/range"),
                    json_body: Some(json_bytes(&body)),
                }
            }
        }
    }

    /// Whether the answer `status` / `body` to `operation` is a success.
    pub fn judge_answer(
        self,
        operation: &Operation,
        status: u16,
        body: &[u8],
    ) -> Result<(), FailureKind> {
        let is_read = matches!(
            operation,
            Operation::Get { .. } | Operation::Increment { .. }
        );
        match self {
            TargetKind::Revkv => match status {
                200 => Ok(()),
                404 if is_read => Err(FailureKind::MissingKey),
                _ => Err(FailureKind::Status {
                    status,
                    reason: revkv_error_code(body),
                }),
            },
            TargetKind::Etcd => match status {
                200 if is_read => etcd_range_found_a_value(body),
                200 => Ok(()),
                _ => Err(FailureKind::Status {
                    status,
                    reason: etcd_error_message(body),
                }),
            },
            TargetKind::EtcdGrpc => unreachable!("{ETCD_GRPC_IS_NOT_HTTP}"),
        }
    }
}

pub fn json_bytes(document: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(document).expect("a JSON value always serialises")
}

/// `error.code` of a revkv error body (`{"error": {"code", "message"}}`), or empty.
pub fn revkv_error_code(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: ErrorDetail,
    }
    #[derive(Deserialize)]
    struct ErrorDetail {
        code: String,
    }
    serde_json::from_slice::<ErrorBody>(body)
        .map(|parsed| shortened(&parsed.error.code))
        .unwrap_or_default()
}

/// `message` (or `error`) of an etcd gateway error body, or empty.
pub fn etcd_error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        message: Option<String>,
        error: Option<String>,
    }
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|parsed| parsed.message.or(parsed.error))
        .map(|message| shortened(&message))
        .unwrap_or_default()
}

/// A successful etcd range answer lists the key in `kvs`; etcd leaves `kvs` out when none matched.
fn etcd_range_found_a_value(body: &[u8]) -> Result<(), FailureKind> {
    #[derive(Deserialize)]
    struct RangeAnswer {
        #[serde(default)]
        kvs: Vec<serde::de::IgnoredAny>,
    }
    match serde_json::from_slice::<RangeAnswer>(body) {
        Ok(answer) if !answer.kvs.is_empty() => Ok(()),
        Ok(_) => Err(FailureKind::MissingKey),
        Err(_) => Err(FailureKind::UnreadableAnswer),
    }
}

/// `text` cut to the length the report keeps of an error reason.
pub fn shortened(text: &str) -> String {
    text.chars().take(LONGEST_FAILURE_REASON).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn put_of(key: &str, value: &[u8]) -> Operation {
        Operation::Put {
            key: key.to_string(),
            value: Arc::from(value),
        }
    }

    fn get_of(key: &str, consistency: ReadConsistency) -> Operation {
        Operation::Get {
            key: key.to_string(),
            consistency,
        }
    }

    fn body_json(request: &PlannedRequest) -> serde_json::Value {
        serde_json::from_slice(request.json_body.as_ref().expect("a body")).unwrap()
    }

    #[test]
    fn revkv_puts_the_value_as_a_json_string_under_the_key_path() {
        let request = TargetKind::Revkv.plan_request("http://m:1", &put_of("a/b", b"xyz"));
        assert_eq!(request.method, HttpMethod::Put);
        assert_eq!(request.url, "http://m:1/v1/kv/a/b");
        assert_eq!(body_json(&request), json!({"value": "xyz"}));
    }

    #[test]
    fn revkv_reads_name_their_consistency_in_the_query() {
        let request = TargetKind::Revkv
            .plan_request("http://m:1", &get_of("k", ReadConsistency::Serializable));
        assert_eq!(request.method, HttpMethod::Get);
        assert_eq!(request.url, "http://m:1/v1/kv/k?consistency=serializable");
        assert_eq!(request.json_body, None);
    }

    #[test]
    fn etcd_puts_post_base64_key_and_value_to_the_gateway() {
        let request = TargetKind::Etcd.plan_request("http://e:2", &put_of("foo", b"bar"));
        assert_eq!(request.method, HttpMethod::Post);
        assert_eq!(request.url, "http://e:2/v3/kv/put");
        assert_eq!(body_json(&request), json!({"key": "Zm9v", "value": "YmFy"}));
    }

    #[test]
    fn etcd_ranges_ask_for_serializable_only_when_the_workload_does() {
        let linearizable = TargetKind::Etcd
            .plan_request("http://e:2", &get_of("foo", ReadConsistency::Linearizable));
        assert_eq!(linearizable.url, "http://e:2/v3/kv/range");
        assert_eq!(body_json(&linearizable), json!({"key": "Zm9v"}));
        let serializable = TargetKind::Etcd
            .plan_request("http://e:2", &get_of("foo", ReadConsistency::Serializable));
        assert_eq!(
            body_json(&serializable),
            json!({"key": "Zm9v", "serializable": true})
        );
    }

    #[test]
    fn revkv_answers_are_judged_by_status_and_error_code() {
        let get = get_of("k", ReadConsistency::Linearizable);
        let put = put_of("k", b"v");
        assert_eq!(TargetKind::Revkv.judge_answer(&put, 200, b"{}"), Ok(()));
        assert_eq!(
            TargetKind::Revkv.judge_answer(&get, 404, b"{}"),
            Err(FailureKind::MissingKey)
        );
        let unavailable = br#"{"error": {"code": "unavailable", "message": "no leader"}}"#;
        let failure = TargetKind::Revkv
            .judge_answer(&put, 503, unavailable)
            .unwrap_err();
        assert_eq!(failure.to_string(), "http 503 unavailable");
        let unparsable = TargetKind::Revkv
            .judge_answer(&put, 502, b"<html>")
            .unwrap_err();
        assert_eq!(unparsable.to_string(), "http 502");
    }

    #[test]
    fn etcd_reads_without_kvs_are_missing_keys_and_errors_keep_their_message() {
        let get = get_of("k", ReadConsistency::Linearizable);
        let found = br#"{"header": {"revision": "3"}, "kvs": [{"key": "aw=="}], "count": "1"}"#;
        assert_eq!(TargetKind::Etcd.judge_answer(&get, 200, found), Ok(()));
        assert_eq!(
            TargetKind::Etcd.judge_answer(&get, 200, br#"{"header": {}}"#),
            Err(FailureKind::MissingKey)
        );
        assert_eq!(
            TargetKind::Etcd.judge_answer(&get, 200, b"not json"),
            Err(FailureKind::UnreadableAnswer)
        );
        let timed_out =
            br#"{"error": "etcdserver: request timed out", "code": 14, "message": "etcdserver: request timed out"}"#;
        let failure = TargetKind::Etcd
            .judge_answer(&put_of("k", b"v"), 503, timed_out)
            .unwrap_err();
        assert_eq!(
            failure.to_string(),
            "http 503 etcdserver: request timed out"
        );
    }

    #[test]
    fn grpc_status_codes_show_as_grpc_and_http_statuses_as_http() {
        let unavailable = FailureKind::Status {
            status: 14,
            reason: "etcdserver: no leader".into(),
        };
        assert_eq!(unavailable.to_string(), "grpc 14 etcdserver: no leader");
        let bad_gateway = FailureKind::Status {
            status: 502,
            reason: String::new(),
        };
        assert_eq!(bad_gateway.to_string(), "http 502");
    }

    #[test]
    fn etcd_grpc_is_named_as_on_the_command_line_and_uses_the_etcd_cluster() {
        assert_eq!(TargetKind::EtcdGrpc.name(), "etcd-grpc");
        assert_eq!(
            TargetKind::from_str("etcd-grpc", false),
            Ok(TargetKind::EtcdGrpc)
        );
        assert_eq!(
            serde_json::to_value(TargetKind::EtcdGrpc).unwrap(),
            json!("etcd-grpc")
        );
        assert_eq!(
            TargetKind::EtcdGrpc.default_endpoints(),
            TargetKind::Etcd.default_endpoints()
        );
    }

    #[test]
    fn default_endpoints_are_the_local_clusters_client_ports() {
        assert_eq!(
            TargetKind::Etcd.default_endpoints()[2],
            "http://127.0.0.1:32379"
        );
        assert_eq!(
            TargetKind::Revkv.default_endpoints()[0],
            "http://127.0.0.1:7001"
        );
    }
}
