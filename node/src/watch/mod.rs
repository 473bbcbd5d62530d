//! Watches (contract section 5): the member's watch hub, the streams it feeds, and the messages
//! they carry. Only the `http::watch` routes know how messages are written on the wire.
//!
//! - `hub`: the watchers' registry; serves bookmarks in order; cancels slow readers; ends every
//!   stream at shutdown. `broadcast` reads each applied revision's events once and fans them out to
//!   synced watchers; `hand_over` joins a catching-up watch to them.
//! - `catch_up`: brings a watch that starts in the past up to the hub from the store's history.
//! - `stream`: the reader's side (`Watch`), with periodic bookmarks.
//! - `filter`, `message`, `feed`, `limits`: what a watch selects, what it receives, what wakes
//!   the hub, and the bounds on all of it.

mod broadcast;
mod catch_up;
mod feed;
mod filter;
mod hand_over;
mod hub;
mod limits;
mod message;
mod stream;

use std::time::Duration;

pub use feed::RevisionFeed;
pub use filter::EventFilter;
pub use hub::WatchHub;
pub use limits::WatchLimits;
pub use message::{CancelReason, Cancellation, RevisionEvents, WatchEvent, WatchMessage};
pub use stream::Watch;

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
