//! A member's store as an etcd snapshot, in bounded chunks: what `Maintenance.Snapshot` on the
//! gRPC port streams, so that `etcdctl snapshot save` against revkv writes a file etcd's own
//! `snapshot status` and `snapshot restore` take (revkv-etcd-snapshot writes it).
//!
//! A bolt file's meta pages come first but can only be written last, so the export goes to an
//! unnamed temporary file beside the store (removed by the system when closed, even after a
//! crash), and that file is then read back in chunks through the same bounded channel as
//! `snapshot_stream.rs`: a slow reader slows the reading, and a reader that goes away ends it.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use futures::Stream;
use revkv_storage::MvccStore;
use tokio::sync::mpsc;

use crate::snapshot_stream::ChunkLimits;

/// Why `store` cannot go out in etcd's format as it is, or None when it can: users whose
/// password hashes etcd cannot check (revkv-etcd-snapshot's `auth::etcd_refusal`).
pub fn etcd_format_refusal(store: &MvccStore) -> Option<String> {
    revkv_etcd_snapshot::auth::etcd_refusal(&store.auth())
}

/// Starts writing `store` (one consistent read) as an etcd snapshot, with etcdctl's SHA-256
/// trailer, and answers its chunks in order; an `Err` item means it failed and the stream is
/// incomplete.
pub fn etcd_snapshot_chunks(
    store: Arc<MvccStore>,
    limits: ChunkLimits,
) -> impl Stream<Item = io::Result<Vec<u8>>> + Send + 'static {
    assert!(limits.chunk_bytes > 0 && limits.chunks_in_flight > 0);
    let (sender, chunks) = mpsc::channel(limits.chunks_in_flight);
    tokio::task::spawn_blocking(move || {
        if let Err(error) = export_then_send(&store, limits.chunk_bytes, &sender) {
            let _ = sender.blocking_send(Err(error));
        }
    });
    futures::stream::unfold(chunks, |mut chunks| async move {
        chunks.recv().await.map(|chunk| (chunk, chunks))
    })
}

fn export_then_send(
    store: &MvccStore,
    chunk_bytes: usize,
    sender: &mpsc::Sender<io::Result<Vec<u8>>>,
) -> io::Result<()> {
    let directory = store.path().parent().unwrap_or(std::path::Path::new("."));
    let file = tempfile::tempfile_in(directory)?;
    let (mut file, _) = revkv_etcd_snapshot::export_store(store, file).map_err(io::Error::other)?;
    file.seek(SeekFrom::Start(0))?;
    loop {
        let mut chunk = Vec::with_capacity(chunk_bytes);
        (&mut file)
            .take(chunk_bytes as u64)
            .read_to_end(&mut chunk)?;
        if chunk.is_empty() {
            return Ok(());
        }
        sender.blocking_send(Ok(chunk)).map_err(|_| {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the reader of the snapshot stream went away",
            )
        })?;
    }
}
