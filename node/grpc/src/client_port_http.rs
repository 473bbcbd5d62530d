//! What etcd serves over plain HTTP (HTTP/1.1, or HTTP/2 without gRPC's content type) on its
//! client port beside gRPC, answered as etcd answers it: `GET /version`, which clients read
//! to pick the API prefix; `GET /health`, which load balancers and orchestrators probe; and
//! `GET /metrics`, the member's Prometheus registry (the same one the HTTP port serves), and the
//! probes `GET /livez` and `GET /readyz` (`probes.rs`). None
//! needs a token, as on etcd. (The v3 JSON gateway under `/v3/` is `gateway.rs`'s.)

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use revkv_metrics::Metrics;
use revkv_node::backend::ReadConsistency;
use revkv_node::KvBackend;
use revkv_storage::{KeyRange, RangeRequest};
use serde::Serialize;

use crate::etcd_version::EtcdVersion;

/// The `Content-Type` of `/metrics` as etcd 3.6 and 3.7 send it (Prometheus' client 1.20 and
/// later name how metric names outside the classic character set were escaped; revkv's are all
/// inside it, so escaping them with underscores changes nothing). The text is the registry's
/// own ([`revkv_metrics::TEXT_CONTENT_TYPE`]), which etcd 3.5 labelled without the parameter.
const ETCD_METRICS_CONTENT_TYPE: &str =
    "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";

/// The key `/health` reads, as etcd's probe does; whether it exists does not matter.
const HEALTH_PROBE_KEY: &str = "health";

struct ClientPort<B> {
    backend: Arc<B>,
    metrics: Option<Arc<Metrics>>,
    etcd_version: EtcdVersion,
}

// By hand: a derive would ask for `B: Clone`, and only the `Arc` is cloned.
impl<B> Clone for ClientPort<B> {
    fn clone(&self) -> Self {
        ClientPort {
            backend: self.backend.clone(),
            metrics: self.metrics.clone(),
            etcd_version: self.etcd_version,
        }
    }
}

/// `/version` (reporting `etcd_version`), `/health`, the probes `/livez` and `/readyz`
/// (`probes.rs`) and, with a registry, `/metrics`.
pub fn routes<B: KvBackend>(
    backend: Arc<B>,
    metrics: Option<Arc<Metrics>>,
    etcd_version: EtcdVersion,
) -> Router {
    let serves_metrics = metrics.is_some();
    let router = Router::new()
        .route("/version", get(version::<B>))
        .route("/health", get(health::<B>));
    let router = if serves_metrics {
        router.route("/metrics", get(metrics_text::<B>))
    } else {
        router
    };
    let probes = crate::probes::routes(backend.clone());
    router
        .with_state(ClientPort {
            backend,
            metrics,
            etcd_version,
        })
        .merge(probes)
}

/// `{"etcdserver": ..., "etcdcluster": ...}`: the version `Maintenance.Status` reports, and the
/// cluster version etcd pairs with it (its minor release), so a client picks the `/v3` prefix;
/// from 3.6 on also the storage version, as etcd answers.
async fn version<B: KvBackend>(State(port): State<ClientPort<B>>) -> Response {
    let body = VersionAnswer {
        etcdserver: port.etcd_version.to_string(),
        etcdcluster: port.etcd_version.cluster_version().to_string(),
        storage: port
            .etcd_version
            .storage_version()
            .map(|version| version.to_string()),
    };
    ([(CONTENT_TYPE, "application/json")], json_text(&body)).into_response()
}

/// `/version`'s answer, its fields in etcd's order; `storage` only where the release reported
/// names one (from 3.6 on, `etcd_version.rs`).
#[derive(Serialize)]
struct VersionAnswer {
    etcdserver: String,
    etcdcluster: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage: Option<String>,
}

/// `/health`'s answer, as etcd 3.5 writes it (3.4 leaves out `reason`).
#[derive(Serialize)]
struct HealthAnswer {
    health: &'static str,
    reason: String,
}

fn json_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// etcd's health check: unhealthy (503) while any alarm not named in `exclude` is raised, while
/// the member knows no leader, or when a read of one key fails (linearizable unless
/// `serializable=true`); each with etcd 3.5's reason.
async fn health<B: KvBackend>(
    State(port): State<ClientPort<B>>,
    RawQuery(query): RawQuery,
) -> Response {
    let mut excluded = BTreeSet::new();
    let mut serializable = false;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "exclude" => {
                excluded.insert(value.into_owned());
            }
            "serializable" => serializable = value == "true",
            // etcd ignores what it does not know, and so does this.
            _ => {}
        }
    }
    let reason = unhealthy_because(port.backend.as_ref(), &excluded, serializable).await;
    let (status, healthy) = match reason {
        None => (StatusCode::OK, "true"),
        Some(_) => (StatusCode::SERVICE_UNAVAILABLE, "false"),
    };
    let body = HealthAnswer {
        health: healthy,
        reason: reason.unwrap_or_default(),
    };
    // etcd labels this JSON as text, and writes an unhealthy answer through Go's `http.Error`,
    // which ends it with a newline.
    let content_type = [(CONTENT_TYPE, "text/plain; charset=utf-8")];
    let mut text = json_text(&body);
    if status != StatusCode::OK {
        text.push('\n');
    }
    (status, content_type, text).into_response()
}

async fn unhealthy_because<B: KvBackend>(
    backend: &B,
    excluded: &BTreeSet<String>,
    serializable: bool,
) -> Option<String> {
    let alarms = match backend.alarms() {
        Ok(alarms) => alarms,
        Err(error) => return Some(format!("ALARM ERROR:{error}")),
    };
    if let Some(alarm) = alarms
        .iter()
        .map(|alarm| alarm.kind.name())
        .find(|name| !excluded.contains(*name))
    {
        return Some(format!("ALARM {alarm}"));
    }
    match backend.status().await {
        Ok(status) if status.leader_id.is_none() => return Some("RAFT NO LEADER".into()),
        Ok(_) => {}
        Err(error) => return Some(format!("STATUS ERROR:{error}")),
    }
    let consistency = if serializable {
        ReadConsistency::Serializable { min_revision: None }
    } else {
        ReadConsistency::Linearizable
    };
    let probe = RangeRequest::of(KeyRange::single(HEALTH_PROBE_KEY));
    match backend.read(probe, consistency).await {
        Ok(_) => None,
        Err(error) => Some(format!("QGET ERROR:{error}")),
    }
}

async fn metrics_text<B: KvBackend>(State(port): State<ClientPort<B>>) -> Response {
    let Some(metrics) = port.metrics else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // Rendering reads the store's statistics (a redb read transaction): off the async workers.
    match tokio::task::spawn_blocking(move || metrics.render()).await {
        Ok(Ok(text)) => ([(CONTENT_TYPE, ETCD_METRICS_CONTENT_TYPE)], text).into_response(),
        Ok(Err(error)) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}
