//! The [`LeaseKeeper`] against stub members on loopback that speak the streaming keep-alive
//! (`POST /v1/leases/keepalive`): renewals at a third of the TTL over one long request, loss on
//! `not_found` and on a deadline passed without answers, and reopening on another member when
//! a member refuses or ends the stream; a `Session` that revokes on close and reports its loss. Waits poll a condition with a deadline.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use revkv_client::concurrency::Session;
use revkv_client::{Client, LeaseKeeper, LeaseLoss, LeaseState};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How a stub treats a keep-alive stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answer every renewal.
    Serve,
    /// Refuse the stream with 503 (no leader).
    Unavailable,
    /// Open the stream and never answer.
    Silent,
    /// Answer this many renewals per stream, then end it.
    EndAfter(u64),
}

#[derive(Clone)]
struct Stub {
    mode: Mode,
    /// Leases that exist; a renewal of any other is `not_found`.
    alive: Arc<Mutex<HashSet<i64>>>,
    renewals: Arc<AtomicU64>,
    streams: Arc<AtomicU64>,
}

impl Stub {
    fn new(mode: Mode, alive: &Arc<Mutex<HashSet<i64>>>) -> Stub {
        Stub {
            mode,
            alive: Arc::clone(alive),
            renewals: Arc::new(AtomicU64::new(0)),
            streams: Arc::new(AtomicU64::new(0)),
        }
    }

    fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::SeqCst)
    }

    fn streams(&self) -> u64 {
        self.streams.load(Ordering::SeqCst)
    }
}

async fn grant(State(stub): State<Stub>, Json(body): Json<Value>) -> Response {
    let id = 40 + stub.alive.lock().unwrap().len() as i64;
    stub.alive.lock().unwrap().insert(id);
    let header = json!({ "revision": 1, "member_id": 1, "raft_term": 1 });
    Json(json!({ "header": header, "id": id, "ttl": body["ttl"] })).into_response()
}

async fn revoke(State(stub): State<Stub>, Path(id): Path<i64>) -> Response {
    match stub.alive.lock().unwrap().remove(&id) {
        true => Json(json!({ "header": { "revision": 2, "member_id": 1, "raft_term": 1 } }))
            .into_response(),
        false => {
            let error = json!({ "error": { "code": "not_found", "message": "gone" } });
            (StatusCode::NOT_FOUND, Json(error)).into_response()
        }
    }
}

async fn keep_alive_stream(State(stub): State<Stub>, body: Body) -> Response {
    if stub.mode == Mode::Unavailable {
        let error = json!({ "error": { "code": "unavailable", "message": "no leader" } });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(error)).into_response();
    }
    stub.streams.fetch_add(1, Ordering::SeqCst);
    let (answers, receiver) = mpsc::channel::<Bytes>(16);
    tokio::spawn(answer_renewals(stub, body, answers));
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let line = receiver.recv().await?;
        Some((Ok::<_, std::io::Error>(line), receiver))
    });
    Body::from_stream(stream).into_response()
}

/// Reads renewal lines and answers them as the stub's mode says.
async fn answer_renewals(stub: Stub, body: Body, answers: mpsc::Sender<Bytes>) {
    let mut body = body.into_data_stream();
    let mut pending = Vec::new();
    let mut answered = 0;
    while let Some(Ok(chunk)) = body.next().await {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let id = serde_json::from_slice::<Value>(&line).unwrap()["id"]
                .as_i64()
                .unwrap();
            if stub.mode == Mode::Silent {
                continue;
            }
            stub.renewals.fetch_add(1, Ordering::SeqCst);
            let answer = match stub.alive.lock().unwrap().contains(&id) {
                true => json!({ "header": { "revision": 1, "member_id": 1, "raft_term": 1 },
                                "id": id, "ttl": 1 }),
                false => json!({ "id": id, "error": { "code": "not_found", "message": "gone" } }),
            };
            if answers
                .send(Bytes::from(format!("{answer}\n")))
                .await
                .is_err()
            {
                return;
            }
            answered += 1;
            if stub.mode == Mode::EndAfter(answered) {
                return;
            }
        }
    }
}

async fn start(stub: Stub) -> String {
    let router = Router::new()
        .route("/v1/leases", post(grant))
        .route("/v1/leases/keepalive", post(keep_alive_stream))
        .route("/v1/leases/{id}", delete(revoke))
        .with_state(stub);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

/// Polls `condition` every 20 ms until it holds, failing the test after `limit`.
async fn wait_until<F: Future<Output = bool>>(
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + limit;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn renews_at_a_third_of_the_ttl_over_one_stream() {
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let stub = Stub::new(Mode::Serve, &alive);
    let client = Client::new([start(stub.clone()).await]).unwrap();
    let keeper = LeaseKeeper::start(&client);
    let lease = keeper.grant(1).await.unwrap();
    // A 1 s TTL renews about every 333 ms: five renewals take about 1.7 s, longer than the TTL.
    wait_until("five renewals", Duration::from_secs(5), || async {
        stub.renewals() >= 5
    })
    .await;
    assert!(
        matches!(lease.state(), LeaseState::Alive { ttl_seconds: 1, .. }),
        "{:?}",
        lease.state()
    );
    assert_eq!(stub.streams(), 1, "every renewal went over one stream");
}

#[tokio::test]
async fn a_lease_gone_from_the_cluster_is_reported_not_found() {
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let stub = Stub::new(Mode::Serve, &alive);
    let client = Client::new([start(stub.clone()).await]).unwrap();
    let keeper = LeaseKeeper::start(&client);
    let kept = keeper.grant(1).await.unwrap();
    let other = keeper.grant(1).await.unwrap();
    alive.lock().unwrap().remove(&kept.id());
    let loss = tokio::time::timeout(Duration::from_secs(5), kept.lost())
        .await
        .expect("the loss is reported");
    assert_eq!(loss, LeaseLoss::NotFound);
    let renewals = stub.renewals();
    wait_until(
        "the other lease renewed on",
        Duration::from_secs(5),
        || async { stub.renewals() >= renewals + 2 },
    )
    .await;
    assert!(!other.is_lost(), "{:?}", other.state());
}

#[tokio::test]
async fn a_lease_without_answers_is_lost_at_its_deadline() {
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let stub = Stub::new(Mode::Silent, &alive);
    let client = Client::new([start(stub.clone()).await]).unwrap();
    let keeper = LeaseKeeper::start(&client);
    let started = tokio::time::Instant::now();
    let lease = keeper.grant(1).await.unwrap();
    let loss = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the loss is reported");
    assert_eq!(loss, LeaseLoss::DeadlinePassed);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before the TTL"
    );
    assert!(stub.streams() >= 1, "a renewal was sent");
}

#[tokio::test]
async fn a_refused_or_ended_stream_is_reopened_on_another_member() {
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let refusing = Stub::new(Mode::Unavailable, &alive);
    let ending = Stub::new(Mode::EndAfter(1), &alive);
    let serving = Stub::new(Mode::Serve, &alive);
    let endpoints = [
        start(refusing.clone()).await,
        start(ending.clone()).await,
        start(serving.clone()).await,
    ];
    let client = Client::new(endpoints).unwrap();
    let keeper = LeaseKeeper::start(&client);
    let lease = keeper.grant(1).await.unwrap();
    wait_until(
        "renewals on the serving member",
        Duration::from_secs(5),
        || async { serving.renewals() >= 4 },
    )
    .await;
    assert!(ending.streams() >= 1, "the ending member was tried");
    assert!(!lease.is_lost(), "{:?}", lease.state());
}

#[tokio::test]
async fn dropping_the_keeper_reports_its_leases_lost() {
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let stub = Stub::new(Mode::Serve, &alive);
    let client = Client::new([start(stub).await]).unwrap();
    let keeper = LeaseKeeper::start(&client);
    let lease = keeper.grant(1).await.unwrap();
    drop(keeper);
    let loss = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the loss is reported");
    assert_eq!(loss, LeaseLoss::KeeperStopped);
}

#[tokio::test]
async fn a_session_revokes_on_close_and_reports_a_lost_lease() {
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let stub = Stub::new(Mode::Serve, &alive);
    let client = Client::new([start(stub).await]).unwrap();
    let keeper = LeaseKeeper::start(&client);
    let closing = Session::with_keeper(&keeper, 1).await.unwrap();
    let closed_id = closing.lease_id();
    assert!(alive.lock().unwrap().contains(&closed_id));
    closing.close().await.unwrap();
    assert!(
        !alive.lock().unwrap().contains(&closed_id),
        "close revoked the lease"
    );

    let session = Session::with_keeper(&keeper, 1).await.unwrap();
    assert!(!session.is_done());
    alive.lock().unwrap().remove(&session.lease_id());
    let loss = tokio::time::timeout(Duration::from_secs(5), session.done())
        .await
        .expect("the loss is reported");
    assert_eq!(loss, LeaseLoss::NotFound);
    assert!(session.is_done());
    session
        .close()
        .await
        .expect("closing a lost session is fine");
}
