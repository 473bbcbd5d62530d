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

/// Decodes JSON, naming the line and column of the first problem.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, NodeError> {
    serde_json::from_slice(bytes)
        .map_err(|error| NodeError::Invalid(format!("the request body is not valid: {error}")))
}
