//! The JSON shapes shared by several routes: the `kv` object and the `ETag` of a revision.
//!
//! A `kv` is `{"key", "value", "create_revision", "mod_revision", "version", "lease"}`. Keys and
//! values are UTF-8 strings, or base64 with `?encoding=base64`.
//!
//! Non-UTF-8 data asked for as text: a read answers `400 invalid` (nothing happened, and the client
//! can repeat it with `encoding=base64`). A write has already been applied when its answer is
//! written, so failing it would misreport the outcome; instead each key-value in the answer that is
//! not UTF-8 (a `prev_kv`, a txn get result, a conflict's `current`) is written in base64 and marked
//! with `"encoding": "base64"` on that object. This keeps every byte and never hides the write.

use axum::http::{header, HeaderValue};
use revkv_storage::KeyValue;
use serde::{Deserialize, Serialize};

use super::keys::{base64_encode, describe_key, TextEncoding};
use crate::backend::ResponseHeader;
use crate::error::NodeError;
pub use crate::writes::unexpected_response;

/// The answer of a request whose only result is that it happened: `{"header"}`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct HeaderAnswer {
    pub header: ResponseHeader,
}

/// One key-value as JSON.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct KvJson {
    pub key: String,
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
    pub lease: i64,
    /// Present only when this object fell back to base64 although the request did not ask for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<&'static str>,
}

/// A key-value for a read answer: refuses non-UTF-8 data unless base64 was asked for.
pub fn kv_json(kv: &KeyValue, encoding: TextEncoding) -> Result<KvJson, NodeError> {
    Ok(KvJson {
        key: encoding
            .encode(&kv.key)
            .ok_or_else(|| not_utf8("key", &kv.key))?,
        value: encoding
            .encode(&kv.value)
            .ok_or_else(|| not_utf8("the value of key", &kv.key))?,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
        encoding: None,
    })
}

/// The refusal of a read whose answer holds bytes that are not UTF-8.
fn not_utf8(what: &str, key: &[u8]) -> NodeError {
    NodeError::Invalid(format!(
        "{what} {} is not valid UTF-8; repeat the request with encoding=base64",
        describe_key(key)
    ))
}

/// Every key-value of a read answer, or the first refusal.
pub fn kvs_json(kvs: &[KeyValue], encoding: TextEncoding) -> Result<Vec<KvJson>, NodeError> {
    kvs.iter().map(|kv| kv_json(kv, encoding)).collect()
}

/// A key-value for the answer of a write that has already happened: never fails, falling back to
/// base64 (and saying so) for data that is not UTF-8.
pub fn kv_json_after_write(kv: &KeyValue, encoding: TextEncoding) -> KvJson {
    kv_json(kv, encoding).unwrap_or_else(|_| KvJson {
        key: base64_encode(&kv.key),
        value: base64_encode(&kv.value),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
        encoding: Some("base64"),
    })
}

/// Every key-value of a write's answer.
pub fn kvs_json_after_write(kvs: &[KeyValue], encoding: TextEncoding) -> Vec<KvJson> {
    kvs.iter()
        .map(|kv| kv_json_after_write(kv, encoding))
        .collect()
}

/// The strong entity tag of a key at a mod revision: the revision in quotes.
pub fn etag_header(mod_revision: u64) -> (header::HeaderName, HeaderValue) {
    let value = HeaderValue::from_str(&format!("\"{mod_revision}\""))
        .expect("a quoted decimal number is a valid header value");
    (header::ETAG, value)
}

/// The body of `PUT /v1/kv/{key}`.
/// Shared by `kv_write` (plain puts) and `kv_merge` (three-way merges, which take the same body).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// The value: UTF-8 text, or base64 with `encoding=base64`.
    pub value: String,
    /// The lease to attach the key to (0 or absent: none).
    #[serde(default)]
    pub lease: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary_kv() -> KeyValue {
        KeyValue {
            key: b"k".to_vec(),
            value: vec![0xff],
            create_revision: 2,
            mod_revision: 2,
            version: 1,
            lease: 0,
        }
    }

    #[test]
    fn reads_refuse_binary_values_as_text() {
        assert!(kv_json(&binary_kv(), TextEncoding::Utf8).is_err());
        assert_eq!(
            kv_json(&binary_kv(), TextEncoding::Base64).unwrap().value,
            "/w=="
        );
    }

    #[test]
    fn write_answers_fall_back_to_marked_base64() {
        let json = kv_json_after_write(&binary_kv(), TextEncoding::Utf8);
        assert_eq!(json.key, "aw==");
        assert_eq!(json.encoding, Some("base64"));
    }
}
