//! Waiting without sleeping a fixed time: a condition polled until it holds or a deadline passes.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How often [`wait_until`] re-checks its condition.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Polls `probe` until it answers `Some`, and returns that; `Err` naming `what` if `timeout`
/// passes first.
pub async fn poll_until<T>(
    what: impl Display,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("gave up after {timeout:?} waiting for: {what}"));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// [`poll_until`] for tests: fails the test with what never happened.
pub async fn wait_until<T>(
    what: impl Display,
    timeout: Duration,
    probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    poll_until(what, timeout, probe)
        .await
        .unwrap_or_else(|problem| panic!("{problem}"))
}
