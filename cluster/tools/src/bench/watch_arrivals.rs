//! What one watch of the watch workload saw, shared by its HTTP side (`watch_latency`) and its
//! gRPC side (`watch_grpc`): the revisions that arrived and when, and when a watch may stop
//! waiting for more.

use std::time::Duration;

use tokio::time::Instant;

/// Longest wait for every watch to be created, and for the last events after the writes stop.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

/// One watch's arrivals: (revision, when).
pub type Arrivals = Vec<(u64, Instant)>;

/// True when the last event arrived long ago: the run is over and nothing more is coming.
pub fn stale(arrivals: &Arrivals) -> bool {
    arrivals
        .last()
        .is_none_or(|(_, at)| at.elapsed() > SETTLE_TIMEOUT / 4)
}
