//! The shapes the OpenAPI document shares between operations: the error body every handler
//! answers with, and the query, path and header parameter groups several handlers take. Their own
//! file, apart from `openapi.rs` (which lists every handler), so that a handler naming its error
//! body imports this file and not the list of all handlers, which would import it back.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

/// Every error answer: `{"error": {"code", "message"}}` plus, for some codes, fields that let
/// the client act without another round trip.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
    /// With `conflict`: the key-value now (null when the key is absent).
    #[schema(nullable, value_type = Option<Object>)]
    pub current: Option<serde_json::Value>,
    /// With a three-way merge's `conflict`: the JSON Pointers both sides changed.
    pub conflicting_fields: Option<Vec<String>>,
    /// With `compacted`: the compact revision.
    pub compact_revision: Option<u64>,
}

/// The machine-readable code and a message for people.
#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// One of the contract's codes: invalid, future_revision, not_found, conflict, compacted,
    /// too_large, unavailable, timeout, unauthenticated, forbidden, no_space, corrupt, internal.
    pub code: String,
    pub message: String,
}

/// How keys and values are written in URLs and JSON.
// Describes parameters for the document only; the handlers parse them with QueryParams.
#[allow(dead_code)]
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EncodingQuery {
    /// `utf8` (the default) or `base64` for binary keys and values.
    #[param(pattern = "^(utf8|utf-8|base64)$")]
    pub encoding: Option<String>,
}

/// How a read is served.
// Describes parameters for the document only; the handlers parse them with QueryParams.
#[allow(dead_code)]
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyQuery {
    /// `linearizable` (the default) or `serializable`.
    #[param(pattern = "^(linearizable|serializable)$")]
    pub consistency: Option<String>,
    /// With `serializable`: wait (bounded) until this member has applied this revision.
    pub min_revision: Option<u64>,
}

/// The key of a single-key route, percent-encoded in the path.
// Describes parameters for the document only; the handlers parse them with QueryParams.
#[allow(dead_code)]
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct KeyPath {
    /// The key (1 to 4096 bytes by default).
    pub key: String,
}

/// How a flag parameter may be written: `true`, `1` or the bare name (`?prefix`, an empty value)
/// turn it on; `false` or `0` (or leaving it out) turn it off. Written by hand because the
/// derive cannot spell the empty value.
pub struct QueryFlag;

impl utoipa::PartialSchema for QueryFlag {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .description(Some(
                "A flag: true, 1 or an empty value (the bare name) turn it on; false or 0 turn \
                 it off",
            ))
            .enum_values(Some(["true", "false", "1", "0", ""]))
            .into()
    }
}

impl ToSchema for QueryFlag {}

/// A flag of the `prev_kv` kind: `true` or `false`.
// Describes parameters for the document only; the handlers parse them with QueryParams.
#[allow(dead_code)]
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PrevKvQuery {
    /// Answer the key-value(s) as they were before this write.
    pub prev_kv: Option<QueryFlag>,
}

/// The headers of a conditional write.
// Describes parameters for the document only; the handlers parse them with QueryParams.
#[allow(dead_code)]
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct PreconditionHeaders {
    /// `"<R>"`: write only if the key's mod revision is R.
    #[param(rename = "If-Match", pattern = r#"^("[0-9]+"|\*)$"#)]
    pub if_match: Option<String>,
    /// `*`: write only if the key is absent.
    #[param(rename = "If-None-Match", pattern = r"^\*$")]
    pub if_none_match: Option<String>,
}
