//! The vendored h2's write patch (node/vendor/h2/PATCHED.md, "Small DATA frames are copied into
//! the write buffer"): a gRPC-shaped answer (HEADERS, a DATA frame of a few hundred bytes,
//! trailers) goes out in one write, and answers of several streams that are ready together share
//! that write. Upstream h2 0.4.20 chains any DATA payload from 256 bytes and writes it before it
//! takes another frame, so these answers took two writes each. The test counts the writes the
//! server's connection makes on an in-memory pipe; it does not time anything.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// The size of each answer's DATA frame: above upstream's 256-byte chaining threshold, below the
/// patch's 4 KiB.
const ANSWER_BYTES: usize = 400;

/// One end of an in-memory pipe that counts the writes made on it.
struct CountingPipe {
    inner: DuplexStream,
    writes: Arc<AtomicUsize>,
}

impl AsyncRead for CountingPipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(context, buffer)
    }
}

impl AsyncWrite for CountingPipe {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(context, bytes);
        if matches!(written, Poll::Ready(Ok(count)) if count > 0) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(context, buffers);
        if matches!(written, Poll::Ready(Ok(count)) if count > 0) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        written
    }

    // Vectored, as a TCP socket is: h2 chooses its chaining threshold by this.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

/// Answers every request on `connection` like a unary gRPC call, all answers queued before the
/// connection task may write, and says how many writes the connection made for them.
async fn answer_together(
    connection: &mut h2::server::Connection<CountingPipe, Bytes>,
    requests: usize,
    writes: &AtomicUsize,
) -> usize {
    let mut waiting = Vec::new();
    for _ in 0..requests {
        let (_request, respond) = connection
            .accept()
            .await
            .expect("the client opens a stream")
            .expect("the stream opens");
        waiting.push(respond);
    }
    let before = writes.load(Ordering::SeqCst);
    for mut respond in waiting {
        let answer = http::Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let mut stream = respond.send_response(answer, false).unwrap();
        stream.reserve_capacity(ANSWER_BYTES);
        stream
            .send_data(Bytes::from(vec![7u8; ANSWER_BYTES]), false)
            .unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        stream.send_trailers(trailers).unwrap();
    }
    // Nothing has been written yet: the connection writes when it is polled.
    assert_eq!(writes.load(Ordering::SeqCst), before);
    std::future::poll_fn(|context| {
        let _ = connection.poll_closed(context);
        Poll::Ready(())
    })
    .await;
    writes.load(Ordering::SeqCst) - before
}

/// Sends `requests` requests on one connection and reads every answer to its trailers.
async fn ask_and_read(client: h2::client::SendRequest<Bytes>, requests: usize) {
    let mut client = client.ready().await.expect("the connection is ready");
    let mut answers = Vec::new();
    for _ in 0..requests {
        let request = http::Request::post("http://revkv.test/etcdserverpb.KV/Range")
            .body(())
            .unwrap();
        let (answer, _) = client
            .send_request(request, true)
            .expect("the request is sent");
        answers.push(answer);
    }
    for answer in answers {
        let mut body = answer.await.expect("an answer").into_body();
        let mut received = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("a DATA frame");
            received += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        assert_eq!(received, ANSWER_BYTES);
        let trailers = body.trailers().await.expect("trailers").expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn answers_ready_together_go_out_in_one_write() {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let writes = Arc::new(AtomicUsize::new(0));
    let server_pipe = CountingPipe {
        inner: server_end,
        writes: Arc::clone(&writes),
    };
    let (client, client_connection) = h2::client::handshake(client_end).await.unwrap();
    tokio::spawn(async move {
        let _ = client_connection.await;
    });
    let mut server = h2::server::handshake(server_pipe).await.unwrap();

    // One answer alone: its HEADERS, DATA and trailers in one write (upstream: two).
    let asking = tokio::spawn(ask_and_read(client.clone(), 1));
    let one = answer_together(&mut server, 1, &writes).await;
    drive_until_finished(&mut server, asking).await;
    assert_eq!(one, 1, "one answer took {one} writes");

    // Eight answers queued together share one write (upstream: sixteen).
    let asking = tokio::spawn(ask_and_read(client, 8));
    let eight = answer_together(&mut server, 8, &writes).await;
    drive_until_finished(&mut server, asking).await;
    assert_eq!(eight, 1, "eight answers took {eight} writes");
}

/// Keeps polling the server's connection (window updates, acknowledgements) until the client
/// task has read everything it asked for.
async fn drive_until_finished(
    server: &mut h2::server::Connection<CountingPipe, Bytes>,
    mut asking: tokio::task::JoinHandle<()>,
) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    tokio::select! {
        biased;
        finished = &mut asking => finished.expect("the client read every answer"),
        opened = server.accept() => match opened {
            Some(_) => panic!("the client opened a stream it was not asked to"),
            // The client hung up (it drops its handle when done): only its task is left.
            None => asking.await.expect("the client read every answer"),
        },
        () = tokio::time::sleep_until(deadline) => panic!("the client did not finish in 30 s"),
    }
}
