//! How keys and values travel in URLs and JSON, and how key ranges are spelled.
//!
//! In a URL (the path of `/v1/kv/{key}` and the `key`, `prefix` and `range_end` query parameters)
//! a key is percent-encoded bytes: `%FF` is the byte 0xFF, so any binary key can be named without
//! base64. In a JSON body a key or value is a string: its UTF-8 bytes by default, or standard base64
//! (padding optional on input, always present on output) with `?encoding=base64`. With base64, URL
//! keys are base64 too, after percent-decoding.
//!
//! Writing a stored key or value that is not UTF-8 into a JSON string without base64 cannot be done
//! losslessly, so a read answers `400 invalid` asking for `encoding=base64`; see `wire` for what a
//! write answers, since its change has already been made.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use percent_encoding::percent_decode_str;
use revkv_storage::{KeyRange, RangeEnd};

use crate::error::NodeError;
pub use crate::writes::describe_key;

/// Standard base64 that accepts input with or without padding and always writes padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The path prefix under which single-key routes name their key.
pub const KV_PATH_PREFIX: &str = "/v1/kv/";

/// How keys and values are written as text in a request and its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TextEncoding {
    /// The bytes are UTF-8 text (the default).
    #[default]
    Utf8,
    /// The bytes are standard base64 (`?encoding=base64`).
    Base64,
}

impl TextEncoding {
    /// Parses the `encoding` query parameter.
    pub fn from_query_value(value: &str) -> Result<Self, NodeError> {
        match value {
            "utf8" | "utf-8" => Ok(TextEncoding::Utf8),
            "base64" => Ok(TextEncoding::Base64),
            other => Err(NodeError::Invalid(format!(
                "encoding must be base64 or utf8, not {other:?}"
            ))),
        }
    }

    /// Turns the text of a key or value (named `what` in error messages) into its bytes.
    pub fn decode(self, what: &str, text: &[u8]) -> Result<Vec<u8>, NodeError> {
        match self {
            TextEncoding::Utf8 => Ok(text.to_vec()),
            TextEncoding::Base64 => BASE64.decode(text).map_err(|error| {
                NodeError::Invalid(format!("{what} is not valid standard base64: {error}"))
            }),
        }
    }

    /// Writes stored bytes as text; `None` when they are not UTF-8 and base64 was not asked for.
    pub fn encode(self, bytes: &[u8]) -> Option<String> {
        match self {
            TextEncoding::Base64 => Some(BASE64.encode(bytes)),
            TextEncoding::Utf8 => String::from_utf8(bytes.to_vec()).ok(),
        }
    }
}

/// Standard base64 with padding, for answers that fall back to base64.
pub fn base64_encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// The key named by a `/v1/kv/{key}` path (still percent-encoded, as in the request line).
pub fn key_from_path(path: &str, encoding: TextEncoding) -> Result<Vec<u8>, NodeError> {
    let encoded = path.strip_prefix(KV_PATH_PREFIX).unwrap_or_default();
    let text: Vec<u8> = percent_decode_str(encoded).collect();
    let key = encoding.decode("the key in the path", &text)?;
    if key.is_empty() {
        return Err(NodeError::Invalid(
            "the key in the path must not be empty: use /v1/kv/{key}".into(),
        ));
    }
    Ok(key)
}

/// The key set named by a start key with an optional `range_end`, or a prefix flag, with etcd's
/// spelling: `range_end` = the single byte 0 means "every key from `key` on".
pub fn key_range(
    key: Vec<u8>,
    range_end: Option<Vec<u8>>,
    prefix: bool,
) -> Result<KeyRange, NodeError> {
    match (range_end, prefix) {
        (Some(_), true) => Err(NodeError::Invalid(
            "give either range_end or prefix, not both".into(),
        )),
        (None, true) => Ok(KeyRange::prefix(key)),
        (Some(end), false) if end == [0] => Ok(KeyRange {
            start: key,
            end: RangeEnd::Unbounded,
        }),
        (Some(end), false) => Ok(KeyRange::between(key, end)),
        (None, false) => Ok(KeyRange::single(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_keys_are_percent_decoded_to_raw_bytes() {
        let key = key_from_path("/v1/kv/a%2Fb%FF", TextEncoding::Utf8).unwrap();
        assert_eq!(key, b"a/b\xff");
    }

    #[test]
    fn base64_path_keys_may_contain_slashes_and_omit_padding() {
        let key = key_from_path("/v1/kv///8", TextEncoding::Base64).unwrap();
        assert_eq!(key, [0xff, 0xff]);
    }

    #[test]
    fn empty_path_keys_are_invalid() {
        assert!(key_from_path("/v1/kv/", TextEncoding::Utf8).is_err());
    }

    #[test]
    fn non_utf8_bytes_are_refused_as_text_and_accepted_as_base64() {
        assert_eq!(TextEncoding::Utf8.encode(b"\xff"), None);
        assert_eq!(TextEncoding::Base64.encode(b"\xff").unwrap(), "/w==");
    }
}
