//! Waiting for the user (or a script) to stop a command that holds something until stopped:
//! SIGINT or SIGTERM. A script's background job has SIGINT ignored, so SIGTERM is the signal a
//! script sends; a terminal sends SIGINT.

/// Resolves on SIGINT or SIGTERM.
pub async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
