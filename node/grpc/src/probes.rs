//! etcd's liveness and readiness probes on the client port, `GET /livez` and `GET /readyz`
//! (etcd 3.6, backported to late 3.5 releases), answered as etcd answers them
//! (`server/etcdserver/api/etcdhttp/health.go`): each probe runs a fixed list of named checks;
//! `?exclude=NAME` (repeatable) leaves a check out, `?verbose` lists every check's outcome before
//! the closing `ok`, and `/livez/NAME` or `/readyz/NAME` runs one check alone. A failed check makes
//! the answer 503 with every check's outcome, verbose or not. Orchestrators probe these rather than
//! `/health`: liveness asks only whether the member can read its own store, readiness also whether
//! the cluster can agree (a linearizable read), whether its data is known to be corrupt, and
//! whether it is a voting member.
//!
//! etcd lists the checks in the order of a Go map, which differs from process to process; revkv
//! lists them in the order etcd registers them.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::header::{ALLOW, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use revkv_node::backend::ReadConsistency;
use revkv_node::KvBackend;
use revkv_storage::{AlarmKind, KeyRange, RangeRequest};

use crate::error;

/// The key the read checks read, keys only; whether it exists does not matter.
const PROBE_KEY: &str = "health";

/// One of etcd's named checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// No CORRUPT alarm is raised.
    DataCorruption,
    /// The member's own store answers a read.
    SerializableRead,
    /// The cluster answers a read through its leader (a quorum agrees).
    LinearizableRead,
    /// The member votes: a learner is not ready, since it serves no reads of its own.
    NonLearner,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::DataCorruption => "data_corruption",
            Check::SerializableRead => "serializable_read",
            Check::LinearizableRead => "linearizable_read",
            Check::NonLearner => "non_learner",
        }
    }
}

/// The two probes and the checks each runs, in etcd's order of registration.
#[derive(Clone, Copy, Debug)]
enum Probe {
    Livez,
    Readyz,
}

impl Probe {
    fn checks(self) -> &'static [Check] {
        match self {
            Probe::Livez => &[Check::SerializableRead],
            Probe::Readyz => &[
                Check::DataCorruption,
                Check::SerializableRead,
                Check::LinearizableRead,
                Check::NonLearner,
            ],
        }
    }
}

/// `/livez`, `/readyz` and each check's own path under them.
pub fn routes<B: KvBackend>(backend: Arc<B>) -> Router {
    Router::new()
        .route("/livez", any(probe::<B, LivezProbe>))
        .route("/readyz", any(probe::<B, ReadyzProbe>))
        .route("/livez/{check}", any(one_check::<B, LivezProbe>))
        .route("/readyz/{check}", any(one_check::<B, ReadyzProbe>))
        .with_state(backend)
}

/// Which probe a handler serves, as a type, so one generic handler serves both paths.
trait ProbeKind {
    const PROBE: Probe;
}
struct LivezProbe;
impl ProbeKind for LivezProbe {
    const PROBE: Probe = Probe::Livez;
}
struct ReadyzProbe;
impl ProbeKind for ReadyzProbe {
    const PROBE: Probe = Probe::Readyz;
}

/// The whole probe: every check but the excluded ones (a name that is no check is ignored, as
/// etcd ignores it after a warning).
async fn probe<B: KvBackend, P: ProbeKind>(
    State(backend): State<Arc<B>>,
    method: Method,
    RawQuery(query): RawQuery,
) -> Response {
    if method != Method::GET {
        return method_not_allowed();
    }
    let query = ProbeQuery::parse(query.as_deref());
    let checks: Vec<Check> = P::PROBE
        .checks()
        .iter()
        .copied()
        .filter(|check| !query.excluded.iter().any(|name| name == check.name()))
        .collect();
    answer(backend.as_ref(), &checks, query.verbose).await
}

/// One check of the probe, by name; a name the probe does not run is not found.
async fn one_check<B: KvBackend, P: ProbeKind>(
    State(backend): State<Arc<B>>,
    method: Method,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(check) = P::PROBE.checks().iter().find(|check| check.name() == name) else {
        return go_http_error(StatusCode::NOT_FOUND, "404 page not found");
    };
    if method != Method::GET {
        return method_not_allowed();
    }
    let query = ProbeQuery::parse(query.as_deref());
    answer(backend.as_ref(), &[*check], query.verbose).await
}

/// What a probe's query asks: checks to leave out, and whether to list every outcome.
struct ProbeQuery {
    excluded: Vec<String>,
    verbose: bool,
}

impl ProbeQuery {
    fn parse(query: Option<&str>) -> ProbeQuery {
        let mut parsed = ProbeQuery {
            excluded: Vec::new(),
            verbose: false,
        };
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match name.as_ref() {
                // etcd skips an empty `exclude=`.
                "exclude" if !value.is_empty() => parsed.excluded.push(value.into_owned()),
                // Present at all, with any value or none, as etcd reads it.
                "verbose" => parsed.verbose = true,
                _ => {}
            }
        }
        parsed
    }
}

/// Runs `checks` in order and answers as etcd does: `[+]NAME ok` or `[-]NAME failed: WHY` per
/// check; 200 with `ok` (after the outcomes when verbose), or 503 with the outcomes.
async fn answer<B: KvBackend>(backend: &B, checks: &[Check], verbose: bool) -> Response {
    let mut outcomes = String::new();
    let mut failed = false;
    for check in checks {
        match run(backend, *check).await {
            Ok(()) => outcomes.push_str(&format!("[+]{} ok\n", check.name())),
            Err(why) => {
                failed = true;
                outcomes.push_str(&format!("[-]{} failed: {why}\n", check.name()));
            }
        }
    }
    if failed {
        return go_http_error(StatusCode::SERVICE_UNAVAILABLE, &outcomes);
    }
    let mut body = if verbose { outcomes } else { String::new() };
    body.push_str("ok\n");
    (StatusCode::OK, text_headers(), body).into_response()
}

/// One check's outcome, with etcd's words for a failure.
async fn run<B: KvBackend>(backend: &B, check: Check) -> Result<(), String> {
    match check {
        Check::DataCorruption => {
            let alarms = backend
                .alarms()
                .map_err(|failure| error::status(failure).message().to_string())?;
            match alarms.iter().any(|alarm| alarm.kind == AlarmKind::Corrupt) {
                true => Err("alarm activated: CORRUPT".into()),
                false => Ok(()),
            }
        }
        Check::SerializableRead => {
            read(
                backend,
                ReadConsistency::Serializable { min_revision: None },
            )
            .await
        }
        Check::LinearizableRead => read(backend, ReadConsistency::Linearizable).await,
        Check::NonLearner => match backend.status().await {
            Ok(status) if status.role == "learner" => Err("not supported for learner".into()),
            Ok(_) => Ok(()),
            Err(failure) => Err(error::status(failure).message().to_string()),
        },
    }
}

/// A keys-only read of one key, as etcd's read checks make (with root's rights, so auth never
/// fails them: revkv's backend read is below the auth gate).
async fn read<B: KvBackend>(backend: &B, consistency: ReadConsistency) -> Result<(), String> {
    let mut probe = RangeRequest::of(KeyRange::single(PROBE_KEY));
    probe.keys_only = true;
    probe.limit = Some(1);
    match backend.read(probe, consistency).await {
        Ok(_) => Ok(()),
        Err(failure) => Err(error::status(failure).message().to_string()),
    }
}

/// The headers of etcd's text answers.
fn text_headers() -> [(axum::http::HeaderName, &'static str); 2] {
    [
        (CONTENT_TYPE, "text/plain; charset=utf-8"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ]
}

/// What Go's `http.Error` writes: the text and a newline, with the text headers.
fn go_http_error(status: StatusCode, text: &str) -> Response {
    (status, text_headers(), format!("{text}\n")).into_response()
}

/// etcd's answer to any method but GET.
fn method_not_allowed() -> Response {
    let mut answer = go_http_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    answer
        .headers_mut()
        .insert(ALLOW, axum::http::HeaderValue::from_static("GET"));
    answer
}
