//! The client HTTP API of a member (`docs/API.md`, section 4), as an axum router
//! generic over the [`KvBackend`] that serves it, so the same routes run on the replicated member and
//! on a plain store in tests.
//!
//! Layout: `kv_read` (with `kv_history`) and `kv_write` (with `precondition`) serve `/v1/kv`, `txn` (with
//! `txn_request`) serves `/v1/txn`, `cluster` and
//! `members` serve the status, maintenance, membership and health routes, and `watch` serves the
//! watch streams, and `leases` serves `/v1/leases` (with `lease_stream`, the streaming
//! keep-alive). `cluster_status` serves every member's status as this member sees it, and
//! `console` the web console's static files at `/ui/`. `openapi` lists every handler in the API
//! document; `openapi_shapes` holds the shapes the handlers' annotations share, so that no handler
//! imports the list of all handlers. `opening` is the one opening every write handler shares (query, key,
//! precondition), after which the wire-free `crate::writes` does the write; `state` holds what
//! every handler receives (`ApiState`, `HttpLimits`). Every handler turns its
//! failures into a [`NodeError`](crate::NodeError); `error` is the one place that picks HTTP status
//! codes and error bodies. `query`, `body`, `keys` and `wire` hold the parsing and JSON shapes the
//! handlers share.
//!
//! Metrics: `metrics_route` serves `GET /metrics`; every route is wrapped in the metrics crate's
//! HTTP layer (requests and durations by route template) and in `client_retries` (the
//! `X-Retry-Attempt` header); `conflicts` counts the conflicts handlers answer (metrics and the hot-key top-k that
//! `hot_keys_route` serves on `GET /v1/conflicts`); `kv_patch` (with
//! `guaranteed_update`) serves `PATCH /v1/kv/{key}`, and `kv_merge` (on the same loop, with
//! `crate::three_way_merge`) the `PUT ...?merge=three-way` that `kv_write` hands it.
//!
//! Strictness: unknown query parameters, unknown JSON fields, malformed numbers, flags, base64 and
//! preconditions are all answered `400 invalid` with a message naming the culprit, because a typo
//! such as `prefx=a` silently ignored would turn a listing into a single-key read.

mod alarms;
mod auth_admin;
mod auth_gate;
mod auth_routes;
mod body;
mod client_retries;
mod cluster;
mod cluster_status;
mod conflicts;
mod console;
mod error;
mod guaranteed_update;
mod hot_keys_route;
mod keys;
mod kv_history;
mod kv_merge;
mod kv_patch;
mod kv_read;
mod kv_write;
mod lease_stream;
mod leases;
mod members;
mod metrics_route;
mod openapi;
mod openapi_shapes;
mod opening;
mod precondition;
mod query;
mod snapshot;
mod state;
mod txn;
mod txn_request;
mod watch;
mod wire;

use std::sync::Arc;
use std::time::Instant;

use axum::http::{Method, Uri};
use axum::middleware::from_fn_with_state;
use axum::Router;
use revkv_metrics::{Metrics, PrefixLabelConfig};
use tokio::sync::Semaphore;

use crate::backend::KvBackend;
use crate::conflict_rates::ConflictRates;
use crate::error::{Missing, NodeError};
use crate::hot_keys::HotKeys;
pub use error::ApiError;
pub use openapi::openapi_document_json;
use state::{ApiShared, ApiState};
pub use state::{
    HttpLimits, LeaseStreamLimits, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SNAPSHOT_STREAMS,
};

/// Builds the client API router over `backend`, with metrics of its own (for tests and embedders
/// that do not scrape them).
pub fn client_router<B: KvBackend>(backend: Arc<B>, limits: HttpLimits) -> Router {
    let metrics = Metrics::new(PrefixLabelConfig::default())
        .expect("a fresh registry accepts every metric once");
    client_router_with_metrics(backend, limits, Arc::new(metrics))
}

/// Builds the client API router over `backend` with bounds of its own on the streaming
/// keep-alive (tests and embedders), and metrics of its own.
pub fn client_router_with_lease_stream<B: KvBackend>(
    backend: Arc<B>,
    limits: HttpLimits,
    lease_stream: LeaseStreamLimits,
) -> Router {
    client_router(
        backend,
        HttpLimits {
            lease_stream,
            ..limits
        },
    )
}

/// Builds the client API router over `backend`, recording into `metrics` and serving them on
/// `GET /metrics`.
pub fn client_router_with_metrics<B: KvBackend>(
    backend: Arc<B>,
    limits: HttpLimits,
    metrics: Arc<Metrics>,
) -> Router {
    build_router(backend, limits, metrics)
}

fn build_router<B: KvBackend>(
    backend: Arc<B>,
    limits: HttpLimits,
    metrics: Arc<Metrics>,
) -> Router {
    let http_metrics_layer = metrics.http.layer();
    let lease_stream = limits.lease_stream.clone();
    let lease_streams = Arc::new(Semaphore::new(lease_stream.max_streams));
    let snapshot_streams = Arc::new(Semaphore::new(limits.max_snapshot_streams));
    let hot_keys = Arc::new(HotKeys::new(limits.hot_keys.clone(), Instant::now()));
    let conflict_rates = Arc::new(ConflictRates::new(limits.conflict_rates));
    let password_checks = Arc::new(Semaphore::new(
        limits.auth.max_concurrent_password_checks.max(1),
    ));
    let state = ApiState::new(
        backend,
        ApiShared {
            limits,
            lease_stream,
            metrics,
            lease_streams,
            snapshot_streams,
            hot_keys,
            conflict_rates,
            password_checks,
        },
    );
    let retries_layer =
        from_fn_with_state(state.clone(), client_retries::record_client_retries::<B>);
    let auth_layer = from_fn_with_state(state.clone(), auth_gate::gate::<B>);
    Router::new()
        .merge(kv_read::routes::<B>())
        .merge(kv_write::routes::<B>())
        .merge(kv_patch::routes::<B>())
        .merge(txn::routes::<B>())
        .merge(leases::routes::<B>())
        .merge(cluster::routes::<B>())
        .merge(cluster_status::routes::<B>())
        .merge(console::routes::<B>())
        .merge(alarms::routes::<B>())
        .merge(members::routes::<B>())
        .merge(watch::routes::<B>())
        .merge(snapshot::routes::<B>())
        .merge(metrics_route::routes::<B>())
        .merge(hot_keys_route::routes::<B>())
        .merge(openapi::routes::<B>())
        .merge(auth_routes::routes::<B>())
        .merge(auth_admin::routes::<B>())
        .fallback(unknown_route)
        .method_not_allowed_fallback(unsupported_method)
        .layer(auth_layer)
        .layer(retries_layer)
        .layer(http_metrics_layer)
        .with_state(state)
}

/// Unknown paths answer a JSON `not_found` rather than axum's empty 404, so clients can always parse
/// the body of an error.
async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    NodeError::NotFound(Missing::Other(format!(
        "no endpoint {method} {}",
        uri.path()
    )))
    .into()
}

/// A known path with a method it does not serve. The contract has no code for this, so it is a
/// malformed request (`invalid`).
async fn unsupported_method(method: Method, uri: Uri) -> ApiError {
    NodeError::Invalid(format!(
        "method {method} is not supported on {}",
        uri.path()
    ))
    .into()
}
