//! The OpenAPI 3.1 document of the client API, generated from the handlers' own annotations and
//! answer types (utoipa), served on `GET /v1/openapi.json` and kept in the repository as
//! `docs/openapi.json`. A test compares the two, so the published schema cannot drift from the
//! code; schemathesis fuzzes a running member against it (`scripts/fuzz-http.sh`).
//!
//! The parameter groups below are shared by several operations. They describe the query
//! parameters the handlers take through [`super::query::QueryParams`], which refuses any other
//! parameter with `400 invalid`: a parameter documented here but not taken would be refused, and
//! schemathesis' positive-data check would catch it.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use utoipa::{IntoParams, OpenApi, ToSchema};

use super::state::ApiState;
use crate::backend::{KvBackend, MemberInfo, MemberStatus, ResponseHeader};

/// The document, assembled from every annotated handler and answer type.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "revkv client API",
        description = "The HTTP API of a revkv member: a replicated, revisioned key-value store \
                       with etcd v3 semantics. The reference is docs/API.md.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        super::kv_read::get_key,
        super::kv_read::get_range,
        super::kv_write::put_key,
        super::kv_write::delete_key,
        super::kv_patch::patch_key,
        super::txn::post_txn,
        super::watch::open_watch,
        super::watch::request_progress,
        super::leases::grant,
        super::leases::list,
        super::leases::time_to_live,
        super::leases::revoke,
        super::leases::keep_alive,
        super::lease_stream::keep_alive_stream,
        super::cluster::get_status,
        super::cluster_status::cluster_status,
        super::cluster::post_compact,
        super::cluster::get_hash,
        super::cluster::get_health,
        super::cluster::get_ready,
        super::alarms::get_alarms,
        super::alarms::delete_alarms,
        super::alarms::post_defragment,
        super::members::list_members,
        super::members::add_learner,
        super::members::promote_member,
        super::members::remove_member,
        super::members::transfer_leader,
        super::snapshot::get_snapshot,
        super::metrics_route::get_metrics,
        super::hot_keys_route::hot_keys,
        super::hot_keys_route::conflict_rates,
        super::auth_routes::authenticate,
        super::auth_routes::status,
        super::auth_routes::enable,
        super::auth_routes::disable,
        super::auth_admin::list_users,
        super::auth_admin::get_user,
        super::auth_admin::add_user,
        super::auth_admin::change_password,
        super::auth_admin::delete_user,
        super::auth_admin::grant_role,
        super::auth_admin::revoke_role,
        super::auth_admin::list_roles,
        super::auth_admin::get_role,
        super::auth_admin::add_role,
        super::auth_admin::delete_role,
        super::auth_admin::grant_permission,
        super::auth_admin::revoke_permission,
        get_openapi_document,
    ),
    components(schemas(ResponseHeader, MemberInfo, MemberStatus, ErrorBody, ErrorDetail, QueryFlag)),
    tags(
        (name = "kv", description = "Keys and values, ranges, transactions and a key's history"),
        (name = "watch", description = "Streams of changes with bookmarks"),
        (name = "lease", description = "Leases, as in etcd 3.4"),
        (name = "cluster", description = "Status, membership, compaction and health"),
        (name = "maintenance", description = "Backups, alarms, defragmentation, metrics"),
        (name = "auth", description = "Tokens, users, roles and permissions, as in etcd"),
    ),
    modifiers(&BearerTokens)
)]
pub struct ApiDocument;

/// Declares the bearer tokens of `POST /v1/auth/authenticate`: every operation takes one, and
/// needs one only while auth is enabled (hence the empty alternative).
struct BearerTokens;

impl utoipa::Modify for BearerTokens {
    fn modify(&self, document: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("JWT")
            .description(Some(
                "A token from POST /v1/auth/authenticate; needed only while auth is enabled",
            ))
            .build();
        document
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
        document.security = Some(vec![
            SecurityRequirement::default(),
            SecurityRequirement::new("bearer", Vec::<String>::new()),
        ]);
    }
}

/// The document as pretty JSON with a final newline, exactly as `docs/openapi.json` holds it.
pub fn openapi_document_json() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let text = ApiDocument::openapi()
            .to_pretty_json()
            .expect("the generated document serializes");
        // utoipa spells the unsigned formats in kebab case ("u-int64"); the usual names are
        // "uint64" and so on. Revisions and member ids are unsigned 64-bit, as the member parses
        // them, so an int64 format would make valid ids above 2^63 look invalid.
        let mut text = text.replace("\"format\": \"u-int", "\"format\": \"uint");
        text.push('\n');
        text
    })
}

/// The route that serves the document.
pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new().route("/v1/openapi.json", get(get_openapi_document))
}

/// `GET /v1/openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "maintenance",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json", body = Object))
)]
async fn get_openapi_document() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        openapi_document_json(),
    )
        .into_response()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed document, which users and outside tools read without running a member.
    const COMMITTED: &str = include_str!("../../../docs/openapi.json");

    /// Fails when the handlers' annotations changed and `docs/openapi.json` was not regenerated.
    /// `REVKV_WRITE_OPENAPI=1 cargo test -p revkv-node openapi` rewrites it.
    #[test]
    fn committed_document_matches_the_generated_one() {
        let generated = openapi_document_json();
        if std::env::var_os("REVKV_WRITE_OPENAPI").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
            std::fs::write(path, generated).expect("docs/openapi.json is writable");
            return;
        }
        assert!(
            generated == COMMITTED,
            "docs/openapi.json is stale: run REVKV_WRITE_OPENAPI=1 cargo test -p revkv-node openapi"
        );
    }

    #[test]
    fn document_is_openapi_3_1_and_names_every_route_family() {
        let document: serde_json::Value = serde_json::from_str(openapi_document_json()).unwrap();
        assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
        let paths = document["paths"].as_object().unwrap();
        for path in [
            "/v1/kv/{key}",
            "/v1/kv",
            "/v1/txn",
            "/v1/watch",
            "/v1/leases",
            "/v1/status",
            "/v1/members",
            "/v1/snapshot",
            "/v1/alarms",
            "/v1/conflicts",
            "/v1/openapi.json",
        ] {
            assert!(paths.contains_key(path), "the document lacks {path}");
        }
        let put = &paths["/v1/kv/{key}"]["put"];
        assert_eq!(
            put["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/PutBody"
        );
    }
}
