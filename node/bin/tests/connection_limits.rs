//! Limits against abuse on the client listener, against a real member process: a client that
//! trickles its headers (slowloris) is disconnected after `--header-read-timeout-ms`, one client
//! address cannot hold more than `--max-connections-per-client` connections, and a request head
//! larger than `--max-header-bytes` is answered 431. Each test also shows the member still
//! serving a well-behaved request, so the limit cut off only the abuser.

use crate::process_cluster;

use std::net::SocketAddr;
use std::time::Duration;

use process_cluster::{cluster_options, wait_until, ProcessCluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Far longer than any limit these tests set: the deadline of every wait.
const DEADLINE: Duration = Duration::from_secs(30);

/// A complete, well-behaved request on its own connection.
const STATUS_REQUEST: &[u8] =
    b"GET /v1/status HTTP/1.1\r\nHost: revkv\r\nConnection: close\r\n\r\n";

async fn start_member(flags: &[&str]) -> (ProcessCluster, SocketAddr) {
    let cluster = ProcessCluster::start(1, cluster_options().with_flags(flags)).await;
    let address = cluster.member(1).client_address;
    (cluster, address)
}

/// The address the per-client test connects from: the harness's own client (on 127.0.0.1) holds
/// pooled connections of its own, which must not count against this client's limit.
const TEST_CLIENT_ADDRESS: [u8; 4] = [127, 0, 0, 2];

/// A connection to `address` from [`TEST_CLIENT_ADDRESS`].
async fn connect_as_test_client(address: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((TEST_CLIENT_ADDRESS, 0)))?;
    socket.connect(address).await
}

/// Sends `request` on `stream` and reads the answer until the member closes the connection;
/// `None` when the member refused or reset it.
async fn exchange_on(mut stream: TcpStream, request: &[u8]) -> Option<String> {
    stream.write_all(request).await.ok()?;
    let mut answer = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("the member answers or closes the connection")
        .ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Sends `request` on a fresh connection and reads the whole answer.
async fn exchange(address: SocketAddr, request: &[u8]) -> String {
    let stream = TcpStream::connect(address).await.unwrap();
    exchange_on(stream, request)
        .await
        .expect("the member answers a well-behaved request")
}

/// Reads from `stream` until the member closes it (end of file or reset), or the deadline.
async fn closed_by_member(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 1024];
    let reading = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(DEADLINE, reading).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_headers_is_disconnected() {
    let (_cluster, address) = start_member(&["--header-read-timeout-ms", "300"]).await;
    let mut slow = TcpStream::connect(address).await.unwrap();
    // Half a request head, and then nothing: the blank line that ends the head never comes.
    slow.write_all(b"GET /v1/status HTTP/1.1\r\nHost: revkv\r\nX-Slow: ")
        .await
        .unwrap();
    assert!(
        closed_by_member(&mut slow).await,
        "the member kept a connection whose headers never ended"
    );
    let answer = exchange(address, STATUS_REQUEST).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_holds_at_most_its_connection_limit() {
    let (_cluster, address) = start_member(&["--max-connections-per-client", "2"]).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_as_test_client(address).await.unwrap();
        // A keep-alive request answered proves the member counted and serves this connection.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: revkv\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 512];
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
        held.push(stream);
    }
    let mut third = connect_as_test_client(address).await.unwrap();
    let _ = third.write_all(STATUS_REQUEST).await;
    assert!(
        closed_by_member(&mut third).await,
        "a third connection from one address was kept"
    );
    drop(held.pop());
    // Once a held connection is gone, the member counts it out and serves a new one.
    wait_until("a new connection is served again", DEADLINE, async || {
        let stream = connect_as_test_client(address).await.ok()?;
        let answer = exchange_on(stream, STATUS_REQUEST).await?;
        answer.starts_with("HTTP/1.1 200").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_the_limit_is_answered_431() {
    let (_cluster, address) = start_member(&["--max-header-bytes", "8192"]).await;
    let padding = "a".repeat(16 * 1024);
    let request = format!("GET /v1/status HTTP/1.1\r\nHost: revkv\r\nX-Padding: {padding}\r\n\r\n");
    let answer = exchange(address, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let answer = exchange(address, STATUS_REQUEST).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
