//! The opening every HTTP write handler shares, in one place: parse the query strictly (the
//! `encoding` parameter, then the handler's own parameters, then nothing else), then for a
//! key-addressed write the key from the path and the `If-Match` / `If-None-Match` precondition.
//! What follows the opening is the front-end-independent write in `crate::writes`, so a second
//! front-end repeats none of this.

use axum::http::{HeaderMap, Uri};

use super::error::ApiError;
use super::keys::{key_from_path, TextEncoding};
use super::precondition::{precondition_from_headers, Precondition};
use super::query::QueryParams;
use crate::error::NodeError;

/// A key-addressed write's opening: which key, how its text is encoded, and its condition.
pub struct KeyWriteOpening {
    pub key: Vec<u8>,
    pub encoding: TextEncoding,
    pub precondition: Option<Precondition>,
}

/// Parses the query (`encoding`, then `own_parameters`, then nothing may be left), the key from
/// the path and the precondition headers, in that order, so a request with several mistakes is
/// always told about the same one first.
pub fn open_key_write<T>(
    uri: &Uri,
    headers: &HeaderMap,
    raw_query: Option<&str>,
    own_parameters: impl FnOnce(&mut QueryParams) -> Result<T, NodeError>,
) -> Result<(KeyWriteOpening, T), ApiError> {
    let (encoding, own) = open_query(raw_query, own_parameters)?;
    let key = key_from_path(uri.path(), encoding)?;
    let precondition = precondition_from_headers(headers)?;
    let opening = KeyWriteOpening {
        key,
        encoding,
        precondition,
    };
    Ok((opening, own))
}

/// Parses the query alone: `encoding`, then `own_parameters`, then nothing may be left.
pub fn open_query<T>(
    raw_query: Option<&str>,
    own_parameters: impl FnOnce(&mut QueryParams) -> Result<T, NodeError>,
) -> Result<(TextEncoding, T), ApiError> {
    let mut query = QueryParams::parse(raw_query)?;
    let encoding = query.take_encoding()?;
    let own = own_parameters(&mut query)?;
    query.finish()?;
    Ok((encoding, own))
}
