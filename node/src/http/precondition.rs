//! Conditional single-key writes over HTTP: `If-Match: "<R>"` (write only if the key's mod
//! revision is R), `If-Match: *` (only if the key exists) and `If-None-Match: *` (only if it is
//! absent), parsed into the front-end-independent [`Precondition`] of `crate::writes`, which
//! carries the write out.

use axum::http::header::{IF_MATCH, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName};

use crate::error::NodeError;
pub use crate::writes::Precondition;

/// The precondition named by the request's headers, if any.
pub fn precondition_from_headers(headers: &HeaderMap) -> Result<Option<Precondition>, NodeError> {
    let if_match = single_header(headers, &IF_MATCH)?;
    let if_none_match = single_header(headers, &IF_NONE_MATCH)?;
    match (if_match, if_none_match) {
        (None, None) => Ok(None),
        (Some(value), None) => parse_if_match(value).map(Some),
        (None, Some(value)) => parse_if_none_match(value).map(Some),
        (Some(_), Some(_)) => Err(NodeError::Invalid(
            "give either If-Match or If-None-Match, not both".into(),
        )),
    }
}

/// The one value of a header that may appear at most once.
fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a str>, NodeError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(NodeError::Invalid(format!(
            "give at most one {name} header"
        )));
    }
    first
        .to_str()
        .map(|value| Some(value.trim()))
        .map_err(|_| NodeError::Invalid(format!("the {name} header is not visible ASCII")))
}

/// `*`, or one strong entity tag holding a revision; the quotes may be left out.
fn parse_if_match(value: &str) -> Result<Precondition, NodeError> {
    if value == "*" {
        return Ok(Precondition::Exists);
    }
    let unquoted = value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(value);
    unquoted
        .parse::<u64>()
        .map(Precondition::ModRevisionIs)
        .map_err(|_| {
            NodeError::Invalid(format!(
                "If-Match must be one revision from an ETag, such as \"42\", or *; got {value:?}"
            ))
        })
}

/// Only `*` is meaningful for a write: "create, never overwrite".
fn parse_if_none_match(value: &str) -> Result<Precondition, NodeError> {
    if value == "*" {
        return Ok(Precondition::Absent);
    }
    Err(NodeError::Invalid(format!(
        "If-None-Match supports only * (write only if the key is absent); got {value:?}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_accepts_quoted_and_bare_revisions_and_a_star() {
        assert_eq!(
            parse_if_match("\"42\"").unwrap(),
            Precondition::ModRevisionIs(42)
        );
        assert_eq!(parse_if_match("7").unwrap(), Precondition::ModRevisionIs(7));
        assert_eq!(parse_if_match("*").unwrap(), Precondition::Exists);
    }

    #[test]
    fn weak_lists_and_garbage_are_invalid() {
        for value in ["W/\"1\"", "\"1\", \"2\"", "abc", "\"\"", "-1"] {
            assert!(parse_if_match(value).is_err(), "{value}");
        }
        assert!(parse_if_none_match("\"3\"").is_err());
    }
}
