//! The router served by hyper on a real loopback socket, driven by hand-written HTTP/1.1 requests:
//! checks what the in-process tests cannot, such as raw request lines reaching the handlers intact
//! and a declared-oversized body being refused as JSON.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use revkv_node::http::{client_router, HttpLimits};
use serde_json::Value;
use support::StoreBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves a fresh backend on 127.0.0.1 at a free port until the test ends.
async fn serve(limits: HttpLimits) -> SocketAddr {
    let backend = Arc::new(StoreBackend::new(Duration::from_secs(5)));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("local address");
    let router = client_router(backend, limits);
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

/// Sends one request on its own connection and returns the status code and the JSON body.
async fn exchange(address: SocketAddr, method: &str, target: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("receive");
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).expect("a status").parse().unwrap();
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "JSON answers have a length: {head}"
    );
    (status, serde_json::from_str(body).expect("a JSON body"))
}

#[tokio::test]
async fn requests_over_a_socket_reach_the_handlers_intact() {
    let address = serve(HttpLimits::default()).await;
    let (status, put) = exchange(address, "PUT", "/v1/kv/a%20b/c", r#"{"value":"v"}"#).await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(put["header"]["revision"], 2);
    let (status, got) = exchange(address, "GET", "/v1/kv/a%20b/c", "").await;
    assert_eq!(status, 200);
    assert_eq!(got["kv"]["key"], "a b/c");
    let (status, listed) = exchange(address, "GET", "/v1/kv?prefix=a+b", "").await;
    assert_eq!(status, 200);
    assert_eq!(listed["count"], 1);
}

#[tokio::test]
async fn an_oversized_body_over_a_socket_is_too_large_as_json() {
    let address = serve(HttpLimits {
        max_body_bytes: 64,
        ..HttpLimits::default()
    })
    .await;
    let body = format!(r#"{{"value":"{}"}}"#, "x".repeat(100));
    let (status, answer) = exchange(address, "PUT", "/v1/kv/k", &body).await;
    assert_eq!(status, 413);
    assert_eq!(answer["error"]["code"], "too_large");
}
