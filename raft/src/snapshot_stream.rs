//! A snapshot stream produced in bounded chunks: the store's export runs on a blocking thread over
//! one read transaction and writes into a `ChunkWriter`, which hands chunks of at most
//! `ChunkLimits::chunk_bytes` through a channel of `ChunkLimits::chunks_in_flight`. So a stream of
//! any size holds at most (chunks in flight + 1) chunks plus one frame in memory, a slow reader
//! slows the export instead of growing a buffer, and a reader that goes away ends the export (and
//! its read transaction) at its next chunk.
//!
//! `GET /v1/snapshot` (backups) uses it today. Raft snapshots are meant to use the same producer:
//! the chunks can be written to a file and shipped to a follower, or sent as a peer request body.

use std::io;
use std::sync::Arc;

use futures::Stream;
use revkv_storage::{MvccStore, SnapshotError, SnapshotSummary};
use tokio::sync::{mpsc, oneshot};

/// How a stream is cut into chunks.
#[derive(Clone, Copy, Debug)]
pub struct ChunkLimits {
    /// Largest chunk handed to the reader.
    pub chunk_bytes: usize,
    /// Chunks produced and not yet taken by the reader.
    pub chunks_in_flight: usize,
}

impl Default for ChunkLimits {
    fn default() -> Self {
        ChunkLimits {
            chunk_bytes: 256 * 1024,
            chunks_in_flight: 4,
        }
    }
}

/// A running export: its chunks, and its summary once the export has finished.
pub struct ChunkedExport {
    chunks: mpsc::Receiver<io::Result<Vec<u8>>>,
    summary: oneshot::Receiver<Result<SnapshotSummary, SnapshotError>>,
}

impl ChunkedExport {
    /// Starts exporting `store` (one consistent read transaction) as a snapshot stream naming
    /// `member_id` as its writer.
    pub fn start(store: Arc<MvccStore>, member_id: Option<u64>, limits: ChunkLimits) -> Self {
        assert!(limits.chunk_bytes > 0 && limits.chunks_in_flight > 0);
        let (sender, chunks) = mpsc::channel(limits.chunks_in_flight);
        let (summary_sender, summary) = oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let mut writer = ChunkWriter::new(sender.clone(), limits.chunk_bytes);
            let result = store.export_stream(member_id, &mut writer);
            if let Err(error) = &result {
                // The reader sees the stream break rather than a clean end without a trailer.
                let _ = sender.blocking_send(Err(io::Error::other(error.to_string())));
            }
            let _ = summary_sender.send(result);
        });
        ChunkedExport { chunks, summary }
    }

    /// The chunks, in order; an `Err` item means the export failed and the stream is incomplete.
    pub fn into_stream(self) -> impl Stream<Item = io::Result<Vec<u8>>> + Send + 'static {
        futures::stream::unfold(self.chunks, |mut chunks| async move {
            chunks.recv().await.map(|chunk| (chunk, chunks))
        })
    }

    /// Takes every chunk, in order, and then the export's summary.
    pub async fn for_each_chunk(
        mut self,
        mut take: impl FnMut(Vec<u8>) -> io::Result<()>,
    ) -> io::Result<SnapshotSummary> {
        while let Some(chunk) = self.chunks.recv().await {
            take(chunk?)?;
        }
        match self.summary.await {
            Ok(result) => result.map_err(io::Error::other),
            Err(_) => Err(io::Error::other("the export task ended without a result")),
        }
    }
}

/// A `Write` that cuts what it is given into chunks and sends each through a bounded channel,
/// waiting (on its blocking thread) while the channel is full.
pub struct ChunkWriter {
    sender: mpsc::Sender<io::Result<Vec<u8>>>,
    chunk_bytes: usize,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    pub fn new(sender: mpsc::Sender<io::Result<Vec<u8>>>, chunk_bytes: usize) -> Self {
        ChunkWriter {
            sender,
            chunk_bytes,
            buffer: Vec::with_capacity(chunk_bytes),
        }
    }

    fn send_buffer(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(self.chunk_bytes));
        self.sender.blocking_send(Ok(chunk)).map_err(|_| {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the reader of the snapshot stream went away",
            )
        })
    }
}

impl io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = self.chunk_bytes - self.buffer.len();
        let taken = bytes.len().min(room);
        self.buffer.extend_from_slice(&bytes[..taken]);
        if self.buffer.len() == self.chunk_bytes {
            self.send_buffer()?;
        }
        Ok(taken)
    }

    /// Sends what is buffered; the export flushes once, after the trailer.
    fn flush(&mut self) -> io::Result<()> {
        self.send_buffer()
    }
}
