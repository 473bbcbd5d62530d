//! The client's one error enum, and how an error answer (`{"error": {"code", "message"}, ...}`,
//! `docs/API.md` section 3) becomes one of its variants.

use serde::Deserialize;
use thiserror::Error;

use super::types::KeyValue;

/// Everything a [`Client`](super::Client) call can fail with.
///
/// The first group are the member's answers to the request (deterministic: repeating the same
/// request gets the same answer). `Unavailable`, `Timeout` and `OutcomeUnknown` say the cluster did
/// not answer in time; only `OutcomeUnknown` leaves open whether a write happened.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ClientError {
    /// 404: the key (single-key read), member or endpoint does not exist.
    #[error("not found: {message}")]
    NotFound { message: String },
    /// 409: a revision precondition failed; `current` is the key-value now (None: absent). After
    /// a three-way merge, `conflicting_fields` names the overlapping changes (JSON Pointers).
    #[error("conflict: {message}")]
    Conflict {
        current: Option<Box<KeyValue>>,
        message: String,
        conflicting_fields: Vec<String>,
    },
    /// 410: the revision asked for is below the compact revision.
    #[error("compacted at revision {compact_revision}: {message}")]
    Compacted {
        compact_revision: u64,
        message: String,
    },
    /// 400 `invalid`: a malformed request or a limit (ops, key size).
    #[error("invalid request: {message}")]
    Invalid { message: String },
    /// 400 `future_revision`: a revision above the current one.
    #[error("future revision: {message}")]
    FutureRevision { message: String },
    /// 413: a body or value over the limit.
    #[error("too large: {message}")]
    TooLarge { message: String },
    /// No member could take the request: every attempt met a connection failure or a 503.
    /// Nothing was done.
    #[error("cluster unavailable after {attempts} attempts: {message}")]
    Unavailable { attempts: u32, message: String },
    /// A read (or a write known not to have been sent) ran out of its time budget.
    #[error("timed out: {message}")]
    Timeout { message: String },
    /// A write was sent and then the answer was lost (504, connection lost or time out after
    /// sending): it may or may not have happened. Never retried by the client; read to find out.
    #[error("outcome unknown at {endpoint}: {message}")]
    OutcomeUnknown { endpoint: String, message: String },
    /// A request that could not be built or sent for a reason other than the cluster (bad URL).
    #[error("transport: {message}")]
    Transport { message: String },
    /// Another status (401, 403, 500, ...), with the answer's error code.
    /// 401: auth is enabled and the call carried no valid token, or the user name or password
    /// was wrong.
    #[error("unauthenticated: {message}")]
    Unauthenticated { message: String },
    /// 403: the user lacks the permission the call needs.
    #[error("forbidden: {message}")]
    Forbidden { message: String },
    #[error("member answered {status} {code}: {message}")]
    Server {
        status: u16,
        code: String,
        message: String,
    },
    /// A success status whose body this client could not read.
    #[error("unreadable answer: {message}")]
    UnreadableAnswer { message: String },
    /// A watch ended by the member for a reason other than compaction (after resume attempts).
    #[error("watch canceled: {reason}")]
    WatchCanceled { reason: String },
    /// A recipe's session lost its lease (expired, revoked, or not renewed in time), so a lock
    /// or a leadership held through it is gone.
    #[error("session lost: lease {lease} is no longer kept alive")]
    SessionExpired { lease: i64 },
    /// An election call that needs the leadership (proclaim) made by a candidate that does not
    /// hold it.
    #[error("not the leader: {message}")]
    NotLeader { message: String },
    /// A bound of this client's own was reached (an informer's cache, a work queue): nothing was
    /// changed; raise the limit or narrow what is kept.
    #[error("limit exceeded: {message}")]
    LimitExceeded { message: String },
}

impl ClientError {
    /// Whether this is a failed revision precondition, the only error `retry_on_conflict` retries.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ClientError::Conflict { .. })
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::NotFound { .. })
    }
}

/// The body of an error answer, with the extra fields some codes carry.
#[derive(Deserialize, Default)]
struct ErrorAnswer {
    #[serde(default)]
    error: ErrorDetail,
    #[serde(default)]
    current: Option<KeyValue>,
    #[serde(default)]
    compact_revision: Option<u64>,
    #[serde(default)]
    conflicting_fields: Vec<String>,
}

#[derive(Deserialize, Default)]
struct ErrorDetail {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// The error a non-success answer stands for. 503 and 504 are decided by the caller (failover and
/// outcome rules); here they map to `Unavailable` and `Timeout` for completeness.
pub fn error_from_answer(status: u16, body: &[u8]) -> ClientError {
    let answer: ErrorAnswer = serde_json::from_slice(body).unwrap_or_default();
    let message = if answer.error.message.is_empty() {
        String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
    } else {
        without_code_prefix(&answer.error.message, &answer.error.code)
    };
    match (status, answer.error.code.as_str()) {
        (404, _) => ClientError::NotFound { message },
        (409, _) => ClientError::Conflict {
            current: answer.current.map(Box::new),
            message,
            conflicting_fields: answer.conflicting_fields,
        },
        (410, _) => ClientError::Compacted {
            compact_revision: answer.compact_revision.unwrap_or(0),
            message,
        },
        (400, "future_revision") => ClientError::FutureRevision { message },
        (400, _) => ClientError::Invalid { message },
        (413, _) => ClientError::TooLarge { message },
        (401, _) => ClientError::Unauthenticated { message },
        (403, _) => ClientError::Forbidden { message },
        (503, _) => ClientError::Unavailable {
            attempts: 1,
            message,
        },
        (504, _) => ClientError::Timeout { message },
        (_, code) => ClientError::Server {
            status,
            code: code.to_string(),
            message,
        },
    }
}

/// A member's message often starts with its code in words (`not found: key ...`); the variant's
/// own text says that already.
fn without_code_prefix(message: &str, code: &str) -> String {
    let code_in_words = format!("{}: ", code.replace('_', " "));
    [code_in_words.as_str(), "invalid request: "]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .unwrap_or(message)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_carries_the_current_key_value() {
        let body = br#"{"error": {"code": "conflict", "message": "mod_revision is 7"},
            "current": {"key": "k", "value": "v", "create_revision": 2, "mod_revision": 7,
            "version": 3, "lease": 0}}"#;
        let ClientError::Conflict {
            current, message, ..
        } = error_from_answer(409, body)
        else {
            panic!("not a conflict");
        };
        assert_eq!(current.unwrap().mod_revision, 7);
        assert_eq!(message, "mod_revision is 7");
        let absent = br#"{"error": {"code": "conflict", "message": "m"}, "current": null}"#;
        assert!(matches!(
            error_from_answer(409, absent),
            ClientError::Conflict { current: None, .. }
        ));
    }

    #[test]
    fn codes_map_to_their_variants() {
        let compacted =
            br#"{"error": {"code": "compacted", "message": "m"}, "compact_revision": 9}"#;
        assert!(matches!(
            error_from_answer(410, compacted),
            ClientError::Compacted {
                compact_revision: 9,
                ..
            }
        ));
        let future = br#"{"error": {"code": "future_revision", "message": "m"}}"#;
        assert!(matches!(
            error_from_answer(400, future),
            ClientError::FutureRevision { .. }
        ));
        assert!(matches!(
            error_from_answer(400, b"{}"),
            ClientError::Invalid { .. }
        ));
        assert!(matches!(
            error_from_answer(413, b""),
            ClientError::TooLarge { .. }
        ));
        assert!(matches!(
            error_from_answer(500, br#"{"error": {"code": "internal", "message": "m"}}"#),
            ClientError::Server { status: 500, .. }
        ));
    }

    #[test]
    fn the_code_is_not_repeated_in_the_message() {
        let body = br#"{"error": {"code": "not_found", "message": "not found: key k"}}"#;
        assert_eq!(error_from_answer(404, body).to_string(), "not found: key k");
        let body = br#"{"error": {"code": "invalid", "message": "invalid request: bad"}}"#;
        assert_eq!(
            error_from_answer(400, body).to_string(),
            "invalid request: bad"
        );
    }

    #[test]
    fn a_body_that_is_not_json_becomes_the_message() {
        let error = error_from_answer(404, b"no such page");
        assert_eq!(
            error,
            ClientError::NotFound {
                message: "no such page".into()
            }
        );
    }
}
