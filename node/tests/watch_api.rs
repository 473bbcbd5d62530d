//! `GET /v1/watch` and `POST /v1/watch/{id}/progress` over a real socket: the NDJSON and
//! Server-Sent Events framings, `Last-Event-ID` resume, on-request bookmarks, and the errors
//! (410 below the compact revision, 400 for bad parameters, 404 for an unknown watch).

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use revkv_node::http::{client_router, HttpLimits};
use serde_json::{json, Value};
use support::StoreBackend;

const DEADLINE: Duration = Duration::from_secs(20);

async fn serve() -> SocketAddr {
    let backend = Arc::new(StoreBackend::new(Duration::from_secs(5)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = client_router(backend, HttpLimits::default());
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

async fn put(client: &reqwest::Client, address: SocketAddr, key: &str, value: &str) -> u64 {
    let answer: Value = client
        .put(format!("http://{address}/v1/kv/{key}"))
        .json(&json!({ "value": value }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["header"]["revision"].as_u64().unwrap()
}

/// Reads a streamed body and splits it into frames (lines for NDJSON, blank-line separated
/// blocks for SSE), each read with a deadline.
struct FrameReader {
    response: reqwest::Response,
    buffered: String,
    separator: &'static str,
}

impl FrameReader {
    fn new(response: reqwest::Response, separator: &'static str) -> Self {
        FrameReader {
            response,
            buffered: String::new(),
            separator,
        }
    }

    async fn next(&mut self) -> String {
        loop {
            if let Some(end) = self.buffered.find(self.separator) {
                let frame = self.buffered[..end].to_string();
                self.buffered.drain(..end + self.separator.len());
                if frame.trim().is_empty() || frame.starts_with(':') {
                    continue; // SSE keep-alive comments carry nothing.
                }
                return frame;
            }
            let chunk = tokio::time::timeout(DEADLINE, self.response.chunk())
                .await
                .expect("a chunk within the deadline")
                .expect("the stream stays readable")
                .expect("the stream has not ended");
            self.buffered.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    async fn next_json(&mut self) -> Value {
        serde_json::from_str(&self.next().await).unwrap()
    }
}

#[tokio::test]
async fn ndjson_streams_created_events_and_requested_bookmarks() {
    let address = serve().await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!(
            "http://{address}/v1/watch?key=app/&prefix=true&prev_kv=true"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut frames = FrameReader::new(response, "\n");
    let created = frames.next_json().await;
    assert_eq!(created["type"], "CREATED");
    assert_eq!(created["revision"], 1);
    let watch_id = created["watch_id"].as_str().unwrap().to_string();

    put(&client, address, "app/a", "1").await;
    put(&client, address, "elsewhere", "x").await;
    let revision = put(&client, address, "app/a", "2").await;
    let first = frames.next_json().await;
    assert_eq!(
        first,
        json!({"type": "EVENTS", "revision": 2, "events": [{"type": "PUT",
            "kv": {"key": "app/a", "value": "1", "create_revision": 2, "mod_revision": 2,
                   "version": 1, "lease": 0}}]})
    );
    let second = frames.next_json().await;
    assert_eq!(second["revision"], revision);
    assert_eq!(second["events"][0]["prev_kv"]["value"], "1");

    let progress: Value = client
        .post(format!("http://{address}/v1/watch/{watch_id}/progress"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(progress["revision"], revision);
    let bookmark = frames.next_json().await;
    assert_eq!(bookmark, json!({"type": "BOOKMARK", "revision": revision}));
}

#[tokio::test]
async fn server_sent_events_carry_revision_ids_and_resume_from_last_event_id() {
    let address = serve().await;
    let client = reqwest::Client::new();
    for value in ["1", "2", "3"] {
        put(&client, address, "k", value).await;
    }
    let response = client
        .get(format!("http://{address}/v1/watch?key=k&start_revision=2"))
        .header("accept", "text/event-stream")
        .header("last-event-id", "3")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut frames = FrameReader::new(response, "\n\n");
    let created = frames.next().await;
    assert!(
        created.starts_with("data: {\"type\":\"CREATED\""),
        "{created}"
    );
    // Last-Event-ID 3 overrides start_revision 2: the stream resumes at revision 4.
    let event = frames.next().await;
    let (id_line, data_line) = sse_fields(&event);
    assert_eq!(id_line, "4");
    let data: Value = serde_json::from_str(data_line).unwrap();
    assert_eq!(data["revision"], 4);
    assert_eq!(data["events"][0]["kv"]["value"], "3");
}

/// The `id` and `data` of one SSE frame, in whichever order the framing put them.
fn sse_fields(frame: &str) -> (&str, &str) {
    let field = |name: &str| {
        frame
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {frame:?}"))
    };
    (field("id: "), field("data: "))
}

#[tokio::test]
async fn periodic_bookmarks_follow_progress_notify_ms() {
    let address = serve().await;
    let client = reqwest::Client::new();
    let revision = put(&client, address, "p", "v").await;
    let response = client
        .get(format!(
            "http://{address}/v1/watch?key=p&progress_notify_ms=50"
        ))
        .send()
        .await
        .unwrap();
    let mut frames = FrameReader::new(response, "\n");
    assert_eq!(frames.next_json().await["type"], "CREATED");
    for _ in 0..2 {
        assert_eq!(
            frames.next_json().await,
            json!({"type": "BOOKMARK", "revision": revision})
        );
    }
}

#[tokio::test]
async fn bad_watches_are_refused_with_the_contract_codes() {
    let address = serve().await;
    let client = reqwest::Client::new();
    for _ in 0..5 {
        put(&client, address, "c", "v").await;
    }
    let compact = client
        .post(format!("http://{address}/v1/compact"))
        .json(&json!({"revision": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(compact.status(), 200);
    let cases = [
        ("key=c&start_revision=3", 410, "compacted"),
        ("prefix=true", 400, "invalid"),
        ("key=c&filter=noget", 400, "invalid"),
        ("key=c&progress_notify_ms=1", 400, "invalid"),
        ("key=c&start_revisoin=5", 400, "invalid"),
        ("key=c&prefix=true&range_end=d", 400, "invalid"),
    ];
    for (query, status, code) in cases {
        let answer = client
            .get(format!("http://{address}/v1/watch?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{query}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{query}: {body}");
        if code == "compacted" {
            assert_eq!(body["compact_revision"], 4);
        }
    }
    let overflowing = client
        .get(format!("http://{address}/v1/watch?key=c"))
        .header("accept", "text/event-stream")
        .header("last-event-id", u64::MAX.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        overflowing.status(),
        400,
        "Last-Event-ID at the largest revision"
    );
    let unknown = client
        .post(format!("http://{address}/v1/watch/999/progress"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}
