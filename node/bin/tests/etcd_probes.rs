//! etcd's liveness and readiness probes, `GET /livez` and `GET /readyz`, on revkv's gRPC port,
//! compared with real etcd 3.6.16 and 3.7.3 (built by `scripts/go-tools.sh`): the whole probes,
//! verbose or not, with checks excluded (one that exists and one that does not), each check's own
//! path, a check the probe does not run, a method other than GET, and readiness once a CORRUPT
//! alarm is raised through the Alarm API. Compared: status, content type, `Allow` and the body;
//! the order of a verbose body's check lines is not (etcd lists them in a Go map's order, which
//! changes from process to process), their text is.
//!
//! Then what a single etcd member cannot show: a revkv member cut off from the other two is live
//! (it reads its own store) and not ready (its linearizable read fails), with etcd's wording.
//!
//! Without the Go tool sets for 3.6 and 3.7 the test passes with a note, except under `CI=true`.

use crate::etcd_history;
use crate::process_cluster;

use std::time::Duration;

use etcd_history::etcd_3_minor;
use process_cluster::{cluster_options, wait_until, ProcessCluster};
use reqwest::{Method, StatusCode};
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The probe requests, each compared whole.
const PATHS: &[&str] = &[
    "/livez",
    "/livez?verbose",
    "/readyz",
    "/readyz?verbose",
    "/readyz?verbose=1&exclude=linearizable_read&exclude=no_such_check",
    "/readyz?exclude=",
    "/readyz/linearizable_read",
    "/readyz/non_learner?verbose",
    "/livez/serializable_read?verbose",
    "/livez/data_corruption",
    "/readyz/no_such_check",
];

/// One answer: status, content type, `Allow`, and the body with its check lines sorted.
#[derive(Debug, PartialEq, Eq)]
struct Probed {
    status: StatusCode,
    content_type: String,
    allow: String,
    body: Vec<String>,
}

async fn probe(method: Method, base: &str, path: &str) -> Probed {
    let answer = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .send()
        .await
        .unwrap_or_else(|error| panic!("{base}{path}: {error}"));
    let header = |name: &str| {
        let value = answer.headers().get(name);
        value
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (content_type, allow) = (header("content-type"), header("allow"));
    let status = answer.status();
    let text = answer.text().await.expect("a body");
    // Check lines in any order, the rest (`ok`, blank lines, a 404's text) where it stands.
    let (mut checks, rest): (Vec<String>, Vec<String>) = text
        .split_inclusive('\n')
        .map(str::to_string)
        .partition(|line| line.starts_with("[+]") || line.starts_with("[-]"));
    checks.sort();
    checks.extend(rest);
    Probed {
        status,
        content_type,
        allow,
        body: checks,
    }
}

/// Every answer of `PATHS`, a POST, and `/readyz?verbose` once CORRUPT is raised.
async fn answers(base: &str) -> Vec<(String, Probed)> {
    let mut answers = Vec::new();
    for path in PATHS {
        answers.push((path.to_string(), probe(Method::GET, base, path).await));
    }
    answers.push((
        "POST /readyz".into(),
        probe(Method::POST, base, "/readyz").await,
    ));
    let client = reqwest::Client::new();
    let status: Value = client
        .post(format!("{base}/v3/maintenance/status"))
        .body("{}")
        .send()
        .await
        .expect("Status")
        .json()
        .await
        .expect("Status as JSON");
    let member = status["header"]["member_id"].as_str().expect("a member id");
    let raise = json!({ "action": "ACTIVATE", "memberID": member, "alarm": "CORRUPT" });
    let raised = client
        .post(format!("{base}/v3/maintenance/alarm"))
        .json(&raise)
        .send()
        .await
        .expect("Alarm");
    assert!(raised.status().is_success(), "{raised:?}");
    for path in ["/readyz?verbose", "/readyz/data_corruption", "/livez"] {
        let seen = probe(Method::GET, base, path).await;
        answers.push((format!("{path} with CORRUPT raised"), seen));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_as_etcd_3_6s_and_3_7s_do() {
    let (Some(etcd_36), Some(etcd_37)) = (etcd_3_minor(6), etcd_3_minor(7)) else {
        return;
    };
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let from_revkv = answers(&format!("http://{}", revkv.grpc_endpoints()[0])).await;
    // The answers say something: healthy probes, a refused method, a failed check.
    let (_, ready) = &from_revkv[3];
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(
        ready.body.last().map(String::as_str),
        Some("ok\n"),
        "{ready:?}"
    );
    assert_eq!(ready.body.len(), 5, "{ready:?}");
    let corrupt = &from_revkv[PATHS.len() + 1].1;
    assert_eq!(corrupt.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        corrupt
            .body
            .contains(&"[-]data_corruption failed: alarm activated: CORRUPT\n".to_string()),
        "{corrupt:?}"
    );
    for (name, release) in [("etcd 3.6", etcd_36), ("etcd 3.7", etcd_37)] {
        let etcd = EtcdServer::start(&release.etcd).await;
        let from_etcd = answers(&etcd.client_url).await;
        for ((path, in_etcd), (_, in_revkv)) in from_etcd.iter().zip(&from_revkv) {
            assert_eq!(in_revkv, in_etcd, "{path}: revkv differs from {name}");
        }
        assert_eq!(from_revkv.len(), from_etcd.len());
    }
}

/// A member cut off from the other two (both stopped) is live but not ready: its own store
/// answers, the cluster does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_a_quorum_is_live_and_not_ready() {
    let mut revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let leader = revkv.leader().await;
    let ids = revkv.ids();
    let survivor_index = ids.iter().position(|id| *id != leader).expect("a follower");
    let survivor = format!("http://{}", revkv.grpc_endpoints()[survivor_index]);
    for id in ids.iter().copied().filter(|id| *id != ids[survivor_index]) {
        revkv.stop(id);
    }
    let not_ready = wait_until("/readyz fails", TIMEOUT, async || {
        let seen = probe(Method::GET, &survivor, "/readyz").await;
        (seen.status == StatusCode::SERVICE_UNAVAILABLE).then_some(seen)
    })
    .await;
    // Sorted: the passed checks (`[+]`) before the failed one (`[-]`).
    let [corruption, learner, serializable, linearizable, closing] = not_ready.body.as_slice()
    else {
        panic!("four check lines and a blank one: {not_ready:?}");
    };
    assert_eq!(corruption, "[+]data_corruption ok\n");
    assert!(
        linearizable.starts_with("[-]linearizable_read failed: etcdserver: "),
        "{linearizable}"
    );
    assert_eq!(learner, "[+]non_learner ok\n");
    assert_eq!(serializable, "[+]serializable_read ok\n");
    assert_eq!(closing, "\n");
    let live = probe(Method::GET, &survivor, "/livez").await;
    assert_eq!(
        (live.status, live.body),
        (StatusCode::OK, vec!["ok\n".to_string()])
    );
}
