//! What a client asks to watch, in the front-end-independent form the hub takes.

use std::time::Duration;

use super::filter::EventFilter;

/// What a client asks to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchRequest {
    pub filter: EventFilter,
    /// The first revision to send; `None` (or 0): the member's current revision + 1.
    pub start_revision: Option<u64>,
    /// Include each event's previous key-value.
    pub prev_kv: bool,
    /// Periodic bookmark interval: `None` for the member default, zero for none.
    pub progress_interval: Option<Duration>,
}
