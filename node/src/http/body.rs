//! Request bodies: read with this API's own size limit (so an oversized body is a JSON
//! `413 too_large`, not axum's plain-text rejection) and decoded as JSON with a clear message.

use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use crate::error::NodeError;

/// Reads the whole body, refusing one over `max_body_bytes` without buffering past the limit.
pub async fn read_body(body: Body, max_body_bytes: usize) -> Result<Bytes, NodeError> {
    match Limited::new(body, max_body_bytes).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(NodeError::TooLarge(format!(
            "the request body is over the limit of {max_body_bytes} bytes"
        ))),
        Err(error) => Err(NodeError::Invalid(format!(
            "could not read the request body: {error}"
        ))),
    }
}

/// Reads the body and decodes it as the JSON object `T`.
pub async fn read_json<T: DeserializeOwned>(
    body: Body,
    max_body_bytes: usize,
) -> Result<T, NodeError> {
    let bytes = read_body(body, max_body_bytes).await?;
    decode_json(&bytes)
}

/// Decodes a JSON object, naming the line and column of the first problem. serde would also
/// read a struct from an array of its fields in order (`[[]]` as a txn with no compares), which
/// no client means; every body this API reads is an object, so anything else is refused.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, NodeError> {
    let first = bytes.iter().find(|byte| !byte.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(NodeError::Invalid(
            "the request body must be a JSON object".into(),
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|error| NodeError::Invalid(format!("the request body is not valid: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        #[serde(default)]
        items: Vec<u64>,
    }

    #[test]
    fn an_object_is_read_and_anything_else_is_refused() {
        assert!(decode_json::<Body>(b" {\"items\": [1]}").is_ok());
        for not_an_object in [&b"[[]]"[..], b"[]", b"1", b"\"text\"", b"null", b"", b"  "] {
            let error = decode_json::<Body>(not_an_object).unwrap_err();
            assert!(matches!(error, NodeError::Invalid(_)), "{error:?}");
        }
    }
}
