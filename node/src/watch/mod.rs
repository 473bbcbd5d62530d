//! Watches (contract section 5): the member's watch hub, the streams it feeds, and the messages
//! they carry. Only the `http::watch` routes know how messages are written on the wire.
//!
//! - `hub`: `WatchHub`, the front door: opens watches, starts catch-ups and the broadcast loop,
//!   answers progress requests, ends every stream at shutdown. It holds no mutable state.
//! - `registry`: the watchers and the hub's one lock; serves bookmarks in order, cancels slow
//!   readers, joins a catching-up watch to the live stream (the hand-over). The only file that
//!   locks, so the ordering argument is checked in one place. Narrow handles (`CatchUpHandle`,
//!   `StreamHandle`) give a catch-up task and a stream access to their own watcher only.
//! - `broadcast`: the loop that reads each applied revision's events once and hands them to the
//!   registry to fan out.
//! - `catch_up`: brings a watch that starts in the past up to the hub from the store's history.
//! - `stream`: the reader's side (`Watch`), with periodic bookmarks.
//! - `channel`: one watcher's buffer from the hub to its stream, bounded in messages and bytes.
//! - `events`: history turned into per-revision messages (shared by broadcast and catch-up).
//! - `filter`, `message`, `feed`, `limits`: what a watch selects, what it receives, what wakes
//!   the hub, and the bounds on all of it.

mod broadcast;
mod catch_up;
mod channel;
mod events;
mod feed;
mod filter;
mod hub;
mod limits;
mod message;
mod registry;
mod request;
mod stream;

pub use feed::RevisionFeed;
pub use filter::EventFilter;
pub use hub::WatchHub;
pub use limits::WatchLimits;
pub use message::{CancelReason, Cancellation, RevisionEvents, WatchEvent, WatchMessage};
pub use request::WatchRequest;
pub use stream::Watch;
