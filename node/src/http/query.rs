//! Strict query-string parsing: each handler takes the parameters it understands, and whatever is
//! left over is an error, so a misspelt parameter is reported instead of silently ignored.
//!
//! Values are form-encoded (`+` is a space, `%XX` is a byte) and kept as raw bytes, because
//! `key`, `prefix` and `range_end` may name binary keys.

use std::collections::BTreeMap;

use percent_encoding::percent_decode;

use super::keys::TextEncoding;
use crate::backend::ReadConsistency;
use crate::error::NodeError;

/// The parameters of one request's query string, not yet consumed by the handler.
#[derive(Debug, Default)]
pub struct QueryParams {
    remaining: BTreeMap<String, Vec<u8>>,
}

impl QueryParams {
    /// Splits a raw query string; a parameter given twice is an error, since it is unclear which
    /// one the client meant.
    pub fn parse(raw: Option<&str>) -> Result<Self, NodeError> {
        let mut remaining = BTreeMap::new();
        for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = String::from_utf8(form_decode(name))
                .map_err(|_| NodeError::Invalid("a query parameter name is not UTF-8".into()))?;
            if remaining.insert(name.clone(), form_decode(value)).is_some() {
                return Err(NodeError::Invalid(format!(
                    "query parameter {name} is given more than once"
                )));
            }
        }
        Ok(QueryParams { remaining })
    }

    /// A parameter's raw bytes.
    pub fn take_bytes(&mut self, name: &str) -> Option<Vec<u8>> {
        self.remaining.remove(name)
    }

    /// A parameter that must be UTF-8 text.
    pub fn take_text(&mut self, name: &str) -> Result<Option<String>, NodeError> {
        self.take_bytes(name)
            .map(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| NodeError::Invalid(format!("query parameter {name} is not UTF-8")))
            })
            .transpose()
    }

    /// A non-negative whole number.
    pub fn take_u64(&mut self, name: &str) -> Result<Option<u64>, NodeError> {
        self.take_text(name)?
            .map(|text| {
                text.parse::<u64>().map_err(|_| {
                    NodeError::Invalid(format!(
                        "query parameter {name} must be a non-negative whole number, not {text:?}"
                    ))
                })
            })
            .transpose()
    }

    /// A flag: absent is false; `true`, `1`, or the bare name is true; `false` or `0` is false.
    pub fn take_flag(&mut self, name: &str) -> Result<bool, NodeError> {
        match self.take_text(name)?.as_deref() {
            None | Some("false") | Some("0") => Ok(false),
            Some("") | Some("true") | Some("1") => Ok(true),
            Some(other) => Err(NodeError::Invalid(format!(
                "query parameter {name} must be true or false, not {other:?}"
            ))),
        }
    }

    /// `encoding=utf8|base64` (default utf8).
    pub fn take_encoding(&mut self) -> Result<TextEncoding, NodeError> {
        match self.take_text("encoding")? {
            None => Ok(TextEncoding::Utf8),
            Some(value) => TextEncoding::from_query_value(&value),
        }
    }

    /// `consistency=linearizable|serializable` (default linearizable) with `min_revision`.
    /// A linearizable read already sees every acknowledged write, so `min_revision` is accepted
    /// there and has nothing left to wait for.
    pub fn take_consistency(&mut self) -> Result<ReadConsistency, NodeError> {
        let min_revision = self.take_u64("min_revision")?;
        match self.take_text("consistency")?.as_deref() {
            None | Some("linearizable") => Ok(ReadConsistency::Linearizable),
            Some("serializable") => Ok(ReadConsistency::Serializable { min_revision }),
            Some(other) => Err(NodeError::Invalid(format!(
                "consistency must be linearizable or serializable, not {other:?}"
            ))),
        }
    }

    /// Refuses any parameter the handler did not take.
    pub fn finish(self) -> Result<(), NodeError> {
        if self.remaining.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = self.remaining.keys().map(String::as_str).collect();
        Err(NodeError::Invalid(format!(
            "unknown query parameter(s) for this endpoint: {}",
            names.join(", ")
        )))
    }
}

/// Decodes one form-encoded component to bytes.
fn form_decode(component: &str) -> Vec<u8> {
    let spaced = component.replace('+', " ");
    percent_decode(spaced.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_form_decoded_to_raw_bytes() {
        let mut query = QueryParams::parse(Some("prefix=a+b%2B%FF&limit=3")).unwrap();
        assert_eq!(query.take_bytes("prefix").unwrap(), b"a b+\xff");
        assert_eq!(query.take_u64("limit").unwrap(), Some(3));
        query.finish().unwrap();
    }

    #[test]
    fn leftovers_duplicates_and_bad_values_are_invalid() {
        assert!(QueryParams::parse(Some("prefx=a"))
            .unwrap()
            .finish()
            .is_err());
        assert!(QueryParams::parse(Some("a=1&a=2")).is_err());
        let mut query = QueryParams::parse(Some("limit=-1&keys_only=yes")).unwrap();
        assert!(query.take_u64("limit").is_err());
        assert!(query.take_flag("keys_only").is_err());
    }

    #[test]
    fn a_bare_flag_is_true() {
        let mut query = QueryParams::parse(Some("prev_kv")).unwrap();
        assert!(query.take_flag("prev_kv").unwrap());
    }
}
