//! The client against stub members (small axum servers on loopback that answer what each test
//! needs and record what they receive): failover on refused connections and 503, no silent retry of
//! a write whose outcome is unknown, per-call timeouts, `X-Retry-Attempt` inside
//! `retry_on_conflict`, paging, and watches that resume on another member. Nothing here sleeps:
//! failover delays go to a sleeper that returns at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use revkv_client::backoff::SleepFuture;
use revkv_client::controller::InformerEvent;
use revkv_client::{
    retry_on_conflict, Client, ClientError, Informer, KeyValue, PutRequest, RangeRequest, Sleeper,
    WatchRequest, WatchUpdate, DEFAULT_RETRY,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request a stub received.
#[derive(Debug, Clone)]
struct Received {
    method: Method,
    uri: Uri,
    retry_attempt: Option<String>,
}

/// What a stub answers: (status, body) for a request.
type Responder =
    Arc<dyn Fn(&Method, &Uri, &HashMap<String, String>) -> (u16, String) + Send + Sync>;

#[derive(Clone)]
struct Stub {
    received: Arc<Mutex<Vec<Received>>>,
    responder: Responder,
}

async fn stub_handler(
    State(stub): State<Stub>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let retry_attempt = headers
        .get("x-retry-attempt")
        .map(|value| value.to_str().unwrap().to_string());
    stub.received.lock().unwrap().push(Received {
        method: method.clone(),
        uri: uri.clone(),
        retry_attempt,
    });
    let (status, body) = (stub.responder)(&method, &uri, &query);
    (StatusCode::from_u16(status).unwrap(), body).into_response()
}

/// Starts a stub member; answers its URL and what it received.
async fn start_stub(
    responder: impl Fn(&Method, &Uri, &HashMap<String, String>) -> (u16, String) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Received>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let stub = Stub {
        received: Arc::clone(&received),
        responder: Arc::new(responder),
    };
    let router = Router::new().fallback(stub_handler).with_state(stub);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, received)
}

/// A URL nothing listens on (a port bound and released).
async fn refusing_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// A member that reads a request and closes the connection without answering.
async fn hanging_up_endpoint() -> (String, Arc<Mutex<u32>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            *counter.lock().unwrap() += 1;
            let mut buffer = [0u8; 4096];
            let _ = socket.read(&mut buffer).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, accepted)
}

/// Records failover delays and returns at once.
#[derive(Clone, Default)]
struct NoWaitSleeper {
    delays: Arc<Mutex<Vec<Duration>>>,
}

impl Sleeper for NoWaitSleeper {
    fn sleep(&self, delay: Duration) -> SleepFuture {
        self.delays.lock().unwrap().push(delay);
        Box::pin(async {})
    }
}

fn client_of(endpoints: &[&String], sleeper: NoWaitSleeper) -> Client {
    Client::builder(endpoints.iter().map(|endpoint| endpoint.to_string()))
        .sleeper(Box::new(sleeper))
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn kv_json(key: &str, value: &str, mod_revision: u64) -> serde_json::Value {
    json!({"key": key, "value": value, "create_revision": 2, "mod_revision": mod_revision,
           "version": 1, "lease": 0})
}

/// `kv_json` as the client parses it.
fn kv(key: &str, value: &str, mod_revision: u64) -> KeyValue {
    serde_json::from_value(kv_json(key, value, mod_revision)).unwrap()
}

fn header_json(revision: u64) -> serde_json::Value {
    json!({"revision": revision, "member_id": 1, "raft_term": 2})
}

fn get_answer(value: &str, mod_revision: u64) -> (u16, String) {
    let body =
        json!({"header": header_json(mod_revision), "kv": kv_json("k", value, mod_revision)});
    (200, body.to_string())
}

fn error_answer(status: u16, code: &str) -> (u16, String) {
    let body = json!({"error": {"code": code, "message": format!("stub says {code}")}});
    (status, body.to_string())
}

#[tokio::test]
async fn a_refused_connection_fails_over_and_later_calls_start_at_the_member_that_answered() {
    let dead = refusing_endpoint().await;
    let (alive, received) = start_stub(|_, _, _| get_answer("v", 5)).await;
    let sleeper = NoWaitSleeper::default();
    let client = client_of(&[&dead, &alive], sleeper.clone());
    assert_eq!(client.get("k").await.unwrap().kv.value, "v");
    assert_eq!(client.get("k").await.unwrap().kv.value, "v");
    assert_eq!(received.lock().unwrap().len(), 2);
    assert_eq!(
        sleeper.delays.lock().unwrap().len(),
        1,
        "only the first call failed over"
    );
}

#[tokio::test]
async fn a_write_refused_with_503_is_sent_to_another_member() {
    let (busy, busy_received) = start_stub(|_, _, _| error_answer(503, "unavailable")).await;
    let (alive, alive_received) =
        start_stub(|_, _, _| (200, json!({"header": header_json(9)}).to_string())).await;
    let client = client_of(&[&busy, &alive], NoWaitSleeper::default());
    let answer = client.put("k", "v").await.unwrap();
    assert_eq!(answer.header.revision, 9);
    assert_eq!(busy_received.lock().unwrap().len(), 1);
    assert_eq!(alive_received.lock().unwrap()[0].method, Method::PUT);
}

#[tokio::test]
async fn a_write_answered_504_is_outcome_unknown_and_never_sent_again() {
    let (slow, slow_received) = start_stub(|_, _, _| error_answer(504, "timeout")).await;
    let (alive, alive_received) =
        start_stub(|_, _, _| (200, json!({"header": header_json(9)}).to_string())).await;
    let client = client_of(&[&slow, &alive], NoWaitSleeper::default());
    let error = client.put("k", "v").await.unwrap_err();
    assert!(
        matches!(error, ClientError::OutcomeUnknown { .. }),
        "{error:?}"
    );
    assert_eq!(slow_received.lock().unwrap().len(), 1);
    assert!(alive_received.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_write_whose_connection_is_lost_after_sending_is_outcome_unknown() {
    let (hanging_up, accepted) = hanging_up_endpoint().await;
    let (alive, alive_received) = start_stub(|_, _, _| get_answer("v", 5)).await;
    let client = client_of(&[&hanging_up, &alive], NoWaitSleeper::default());
    let error = client.put("k", "v").await.unwrap_err();
    assert!(
        matches!(error, ClientError::OutcomeUnknown { .. }),
        "{error:?}"
    );
    assert!(alive_received.lock().unwrap().is_empty());
    // A read in the same situation is simply repeated on the next member.
    assert_eq!(client.get("k").await.unwrap().kv.value, "v");
    assert!(*accepted.lock().unwrap() >= 1);
}

#[tokio::test]
async fn a_read_answered_504_is_repeated_on_another_member() {
    let (slow, _) = start_stub(|_, _, _| error_answer(504, "timeout")).await;
    let (alive, _) = start_stub(|_, _, _| get_answer("v", 5)).await;
    let client = client_of(&[&slow, &alive], NoWaitSleeper::default());
    assert_eq!(client.get("k").await.unwrap().kv.mod_revision, 5);
}

#[tokio::test]
async fn when_every_member_refuses_the_call_ends_unavailable_after_bounded_jittered_delays() {
    let (first, _) = start_stub(|_, _, _| error_answer(503, "unavailable")).await;
    let second = refusing_endpoint().await;
    let sleeper = NoWaitSleeper::default();
    let client = Client::builder([first.clone(), second.clone()])
        .sleeper(Box::new(sleeper.clone()))
        .max_attempts(6)
        .build()
        .unwrap();
    let error = client.get("k").await.unwrap_err();
    assert!(
        matches!(error, ClientError::Unavailable { attempts: 6, .. }),
        "{error:?}"
    );
    let delays = sleeper.delays.lock().unwrap().clone();
    assert_eq!(delays.len(), 5);
    // 25 ms doubling, each plus at most 50 %, capped at 1 s before jitter.
    for (delay, base) in delays.iter().zip([25u64, 50, 100, 200, 400]) {
        let base = Duration::from_millis(base);
        assert!(
            *delay >= base && *delay <= base.mul_f64(1.5),
            "{delay:?} for {base:?}"
        );
    }
}

#[tokio::test]
async fn a_call_that_gets_no_answer_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = format!("http://{}", listener.local_addr().unwrap());
    // Accepts connections (the kernel does) but never answers.
    let client = Client::builder([silent])
        .request_timeout(Duration::from_millis(300))
        .sleeper(Box::new(NoWaitSleeper::default()))
        .build()
        .unwrap();
    // The call ends with a timeout rather than waiting for ever. How soon is not asserted (a
    // wall-clock bound would be a timing); the outer deadline only keeps a hang from stalling
    // the suite.
    let read_error = tokio::time::timeout(Duration::from_secs(60), client.get("k"))
        .await
        .expect("the call ends")
        .unwrap_err();
    assert!(
        matches!(read_error, ClientError::Timeout { .. }),
        "{read_error:?}"
    );
    let write_error = client.put("k", "v").await.unwrap_err();
    assert!(
        matches!(write_error, ClientError::OutcomeUnknown { .. }),
        "{write_error:?}"
    );
    drop(listener);
}

#[tokio::test]
async fn answers_become_typed_errors() {
    let (member, _) = start_stub(|method, _, _| match *method {
        Method::GET => error_answer(404, "not_found"),
        _ => {
            let body = json!({"error": {"code": "conflict", "message": "m"},
                              "current": kv_json("k", "theirs", 8)});
            (409, body.to_string())
        }
    })
    .await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    assert!(client.get("k").await.unwrap_err().is_not_found());
    let conflict = client
        .put_with(&PutRequest::new("k", "mine").if_mod_revision(3))
        .await
        .unwrap_err();
    let ClientError::Conflict { current, .. } = conflict else {
        panic!("not a conflict: {conflict:?}");
    };
    assert_eq!(current.unwrap().value, "theirs");
}

#[tokio::test]
async fn retries_inside_retry_on_conflict_carry_their_attempt_number() {
    let puts = Arc::new(Mutex::new(0u32));
    let counter = Arc::clone(&puts);
    let (member, received) = start_stub(move |method, _, _| match *method {
        Method::GET => get_answer("1", 5),
        _ => {
            let mut puts = counter.lock().unwrap();
            *puts += 1;
            if *puts < 3 {
                error_answer(409, "conflict")
            } else {
                (200, json!({"header": header_json(6)}).to_string())
            }
        }
    })
    .await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    retry_on_conflict(DEFAULT_RETRY, || async {
        let kv = client.get("k").await?.kv;
        let request = PutRequest::new("k", "2").if_mod_revision(kv.mod_revision);
        client.put_with(&request).await
    })
    .await
    .unwrap();
    let attempts: Vec<Option<String>> = received
        .lock()
        .unwrap()
        .iter()
        .map(|request| request.retry_attempt.clone())
        .collect();
    let expected = [None, None, Some("1"), Some("1"), Some("2"), Some("2")];
    assert_eq!(attempts, expected.map(|attempt| attempt.map(String::from)));
    // Outside the loop, no header.
    client.get("k").await.unwrap();
    assert_eq!(received.lock().unwrap().last().unwrap().retry_attempt, None);
}

#[tokio::test]
async fn range_pages_follow_continue_tokens_to_the_end() {
    let (member, received) = start_stub(|_, _, query| {
        let (kvs, more, token) = match query.get("continue").map(String::as_str) {
            None => (vec![kv_json("a", "1", 3)], true, Some("page2")),
            Some("page2") => (vec![kv_json("b", "2", 3)], true, Some("page3")),
            _ => (vec![kv_json("c", "3", 3)], false, None),
        };
        let body = json!({"header": header_json(3), "kvs": kvs, "count": 3, "more": more,
                          "continue": token});
        (200, body.to_string())
    })
    .await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    let mut pages = client.range_pages(RangeRequest::prefix("").limit(1));
    let mut keys = Vec::new();
    while let Some(page) = pages.next_page().await {
        keys.extend(page.unwrap().kvs.into_iter().map(|kv| kv.key));
    }
    assert_eq!(keys, ["a", "b", "c"]);
    assert_eq!(received.lock().unwrap().len(), 3);
}

fn ndjson(messages: &[serde_json::Value]) -> String {
    messages
        .iter()
        .map(|message| format!("{message}\n"))
        .collect()
}

fn events_message(revision: u64) -> serde_json::Value {
    json!({"type": "EVENTS", "revision": revision,
           "events": [{"type": "PUT", "kv": kv_json("w/k", &revision.to_string(), revision)}]})
}

/// A watch stub: answers a stream for each `start_revision` from `streams`, 503 for other starts,
/// and 200 to progress requests.
fn watch_member(
    streams: Vec<(Option<u64>, Vec<serde_json::Value>)>,
) -> impl Fn(&Method, &Uri, &HashMap<String, String>) -> (u16, String) + Send + Sync {
    move |method, _, query| {
        if *method == Method::POST {
            return (200, json!({"header": header_json(8)}).to_string());
        }
        let start = query
            .get("start_revision")
            .map(|text| text.parse::<u64>().unwrap());
        match streams.iter().find(|(from, _)| *from == start) {
            Some((_, messages)) => (200, ndjson(messages)),
            None => error_answer(503, "unavailable"),
        }
    }
}

#[tokio::test]
async fn a_broken_watch_resumes_on_another_member_from_the_next_revision_without_duplicates() {
    let created = json!({"type": "CREATED", "watch_id": "1", "revision": 4});
    let (first, first_received) = start_stub(watch_member(vec![(
        None,
        vec![created.clone(), events_message(5)],
    )]))
    .await;
    let (second, second_received) = start_stub(watch_member(vec![(
        Some(6),
        vec![
            created,
            events_message(5),
            events_message(6),
            json!({"type": "BOOKMARK", "revision": 8}),
        ],
    )]))
    .await;
    let client = client_of(&[&first, &second], NoWaitSleeper::default());
    let mut watcher = client.watch(WatchRequest::prefix("w/"));
    let mut seen = Vec::new();
    for _ in 0..3 {
        match watcher.next().await.unwrap().unwrap() {
            WatchUpdate::Events { revision, .. } => seen.push(format!("events {revision}")),
            WatchUpdate::Bookmark { revision } => seen.push(format!("bookmark {revision}")),
        }
    }
    assert_eq!(seen, ["events 5", "events 6", "bookmark 8"]);
    assert_eq!(watcher.resume_revision(), Some(9));
    watcher.request_progress().await.unwrap();
    let progress = second_received.lock().unwrap().last().unwrap().clone();
    assert_eq!(progress.method, Method::POST);
    assert_eq!(progress.uri.path(), "/v1/watch/1/progress");
    assert_eq!(first_received.lock().unwrap().len(), 1);
    let resumed = second_received.lock().unwrap()[0].uri.to_string();
    assert!(resumed.contains("start_revision=6"), "{resumed}");
}

#[tokio::test]
async fn a_watch_below_the_compact_revision_surfaces_compacted() {
    let (member, _) = start_stub(|_, _, _| {
        let body = json!({"error": {"code": "compacted", "message": "m"}, "compact_revision": 12});
        (410, body.to_string())
    })
    .await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    let mut watcher = client.watch(WatchRequest::key("k").from_revision(3));
    let error = watcher.next().await.unwrap().unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Compacted {
                compact_revision: 12,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(watcher.next().await.is_none());
}

#[tokio::test]
async fn a_canceled_message_with_a_compact_revision_ends_the_watch_with_compacted() {
    let canceled = json!({"type": "CANCELED", "reason": "compacted", "compact_revision": 7});
    let (member, _) = start_stub(watch_member(vec![(
        Some(2),
        vec![
            json!({"type": "CREATED", "watch_id": 1, "revision": 9}),
            canceled,
        ],
    )]))
    .await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    let mut watcher = client.watch(WatchRequest::key("k").from_revision(2));
    let error = watcher.next().await.unwrap().unwrap_err();
    assert!(matches!(
        error,
        ClientError::Compacted {
            compact_revision: 7,
            ..
        }
    ));
}

/// A stub of a prefix that was compacted once: the first list answers at revision 5, the watch
/// from 6 answers 410; the second list answers at revision 10 and the watch from 11 sends a put at
/// 11 and a delete at 12.
fn relisting_member(
) -> impl Fn(&Method, &Uri, &HashMap<String, String>) -> (u16, String) + Send + Sync {
    let lists = Arc::new(Mutex::new(0u32));
    move |_, uri, query| {
        if uri.path() == "/v1/kv" {
            let mut lists = lists.lock().unwrap();
            *lists += 1;
            let (revision, kvs) = if *lists == 1 {
                (5, vec![kv_json("p/a", "1", 3)])
            } else {
                (10, vec![kv_json("p/a", "1", 3), kv_json("p/b", "2", 9)])
            };
            let body = json!({"header": header_json(revision), "kvs": kvs, "count": kvs.len(),
                              "more": false});
            return (200, body.to_string());
        }
        match query.get("start_revision").map(String::as_str) {
            Some("6") => {
                let body = json!({"error": {"code": "compacted", "message": "m"},
                                  "compact_revision": 8});
                (410, body.to_string())
            }
            Some("11") => {
                let delete = json!({"type": "EVENTS", "revision": 12, "events": [
                    {"type": "DELETE", "kv": {"key": "p/a", "mod_revision": 12}}]});
                (200, ndjson(&[events_message(11), delete]))
            }
            _ => error_answer(503, "unavailable"),
        }
    }
}

#[tokio::test]
async fn an_informer_lists_watches_and_relists_after_compaction() {
    let (member, received) = start_stub(relisting_member()).await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    let mut informer = Informer::new(client, "p/");
    let listed = informer.sync().await.unwrap();
    assert_eq!(listed, [InformerEvent::Added(kv("p/a", "1", 3))]);
    assert_eq!(informer.revision(), 5);
    assert_eq!(informer.cache().len(), 1);

    // The watch from 6 is compacted: the informer lists again (revision 10), reports what the
    // relist changed, and watches from 11.
    let relisted = informer.next_events().await.unwrap();
    assert!(relisted.relisted);
    assert_eq!(relisted.revision, 10);
    assert_eq!(relisted.events, [InformerEvent::Added(kv("p/b", "2", 9))]);
    let watched = informer.next_events().await.unwrap();
    assert_eq!((watched.revision, watched.relisted), (11, false));
    assert_eq!(informer.cache().keys(), ["p/a", "p/b", "w/k"]);
    let deleted = informer.next_events().await.unwrap();
    assert_eq!(deleted.revision, 12);
    assert_eq!(deleted.events, [InformerEvent::Deleted(kv("p/a", "1", 3))]);
    assert_eq!(informer.cache().keys(), ["p/b", "w/k"]);
    let lists = received
        .lock()
        .unwrap()
        .iter()
        .filter(|request| request.uri.path() == "/v1/kv")
        .count();
    assert_eq!(lists, 2);
}

/// A stub whose watch lost revision 7's events: the store put `p/c`, deleted `p/a` and updated
/// `p/b` at 7, but the stream sends only revisions 6 and 8. Lists answer the store's state at the
/// revision asked (5 before any event; 8 for the check and the relist).
fn member_whose_watch_drops_a_revision(
) -> impl Fn(&Method, &Uri, &HashMap<String, String>) -> (u16, String) + Send + Sync {
    let current_lists = Arc::new(Mutex::new(0u32));
    move |_, uri, query| {
        if uri.path() == "/v1/kv" {
            let first_list = !query.contains_key("revision") && {
                let mut lists = current_lists.lock().unwrap();
                *lists += 1;
                *lists == 1
            };
            let (revision, kvs) = match query.get("revision").map(String::as_str) {
                _ if first_list => (5, vec![kv_json("p/a", "1", 3)]),
                Some("8") | None => (
                    8,
                    vec![
                        kv_json("p/b", "2", 7),
                        kv_json("p/c", "1", 7),
                        kv_json("p/d", "1", 8),
                    ],
                ),
                Some(_) => return error_answer(400, "unexpected"),
            };
            let body = json!({"header": header_json(revision), "kvs": kvs, "count": kvs.len(),
                              "more": false});
            return (200, body.to_string());
        }
        let put = |key: &str, revision: u64| {
            json!({"type": "EVENTS", "revision": revision,
                   "events": [{"type": "PUT", "kv": kv_json(key, "1", revision)}]})
        };
        match query.get("start_revision").map(String::as_str) {
            Some("6") => (200, ndjson(&[put("p/b", 6), put("p/d", 8)])),
            _ => error_answer(503, "unavailable"),
        }
    }
}

#[tokio::test]
async fn the_cache_check_catches_a_revision_the_watch_dropped_and_a_relist_repairs_it() {
    let (member, _) = start_stub(member_whose_watch_drops_a_revision()).await;
    let client = client_of(&[&member], NoWaitSleeper::default());
    let mut informer = Informer::new(client, "p/");
    informer.sync().await.unwrap();
    assert_eq!(informer.next_change().await.unwrap(), 6);
    assert_eq!(informer.next_change().await.unwrap(), 8);

    let check = informer.verify_against_store().await.unwrap();
    assert_eq!(check.revision, 8);
    assert!(!check.is_exact());
    assert_eq!(check.missing, ["p/c"], "the lost put");
    assert_eq!(check.stale, ["p/b"], "the lost update");
    assert_eq!(check.unexpected, ["p/a"], "the lost delete");

    let repaired = informer.sync().await.unwrap();
    assert_eq!(
        repaired.len(),
        3,
        "the relist reports the three lost changes: {repaired:?}"
    );
    assert_eq!(informer.cache().keys(), ["p/b", "p/c", "p/d"]);
    assert!(informer.verify_against_store().await.unwrap().is_exact());
}
