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
use utoipa::OpenApi;

use super::openapi_shapes::{ErrorBody, ErrorDetail, QueryFlag};
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
