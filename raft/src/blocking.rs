//! Running the synchronous storage layer from async code without blocking the runtime's workers.

use std::io;

/// Runs `work` on tokio's blocking pool (through `runtime::offload`, so inline on a thread a
/// simulation marked) and turns the storage operation's own error (and a panicked task) into
/// `io::Error`, which is what openraft's storage traits speak.
pub(crate) async fn run_blocking<T, E, F>(work: F) -> io::Result<T>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    crate::runtime::offload(work)
        .await
        .map_err(|join_error| io::Error::other(format!("storage task failed: {join_error}")))?
        .map_err(io::Error::other)
}

/// A decoding failure of something read from the log or a snapshot, as an `io::Error`.
pub(crate) fn invalid_data(detail: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, detail.to_string())
}
