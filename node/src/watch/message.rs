//! The messages a watch stream carries (contract section 5), independent of how they are written
//! (NDJSON, Server-Sent Events, or a Rust `Stream` for embedders).
//!
//! Events of one revision are shared between every watcher that sees them: a message holds an
//! `Arc` of the revision's events and, when the watcher matches only some of them, the positions
//! it matches. This keeps the memory of 10,000 watchers on one prefix at one copy per revision.

use std::sync::{Arc, Mutex};

use revkv_storage::{Event, EventKind, KeyValue};

/// One message of a watch stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchMessage {
    /// First message: the watch exists; `revision` is the member's revision when it was opened.
    Created { watch_id: u64, revision: u64 },
    /// Every matching change of one revision, in the order the request made them.
    Events(RevisionEvents),
    /// Every matching event with revision <= `revision` has been sent before this message.
    Bookmark { revision: u64 },
    /// Last message: the watch ended and sends nothing more.
    Canceled(Cancellation),
}

impl WatchMessage {
    /// The revision a client resumes after (SSE's `id`), for messages that carry one.
    pub fn resume_revision(&self) -> Option<u64> {
        match self {
            WatchMessage::Events(events) => Some(events.revision),
            WatchMessage::Bookmark { revision } => Some(*revision),
            WatchMessage::Created { .. } | WatchMessage::Canceled(_) => None,
        }
    }
}

/// What the hub puts in one watcher's buffer: a single message, or the revisions of history one
/// catch-up step read at once. A stream hands the revisions of a `History` out one message at a
/// time, but knows they arrived together, so a writer can send them in one response as etcd sends
/// a catch-up ([`crate::watch::Watch::next_of_same_delivery`]). Live events arrive one revision per
/// `Message`, as etcd sends them.
#[derive(Debug)]
pub(super) enum Delivery {
    Message(WatchMessage),
    /// Matching revisions in increasing order; never empty.
    History(Vec<RevisionEvents>),
}

/// The matching events of one revision for one watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionEvents {
    pub revision: u64,
    /// Every event of the revision, shared by all watchers.
    all_events: Arc<Vec<Event>>,
    /// The positions in `all_events` this watcher matches; `None` means all of them.
    selected: Option<Vec<u32>>,
    /// Whether this watcher asked for `prev_kv`.
    with_prev_kv: bool,
}

impl RevisionEvents {
    /// The events of `revision` that `selected` picks (`None`: all). Every selected position must
    /// be inside `all_events`, and a message is never empty.
    pub fn new(
        revision: u64,
        all_events: Arc<Vec<Event>>,
        selected: Option<Vec<u32>>,
        with_prev_kv: bool,
    ) -> Self {
        debug_assert!(selected.as_ref().is_none_or(|positions| positions
            .iter()
            .all(|&position| (position as usize) < all_events.len())));
        let message = RevisionEvents {
            revision,
            all_events,
            selected,
            with_prev_kv,
        };
        assert!(
            !message.is_empty(),
            "a watch message never carries no events"
        );
        message
    }

    /// How many events this message carries.
    pub fn len(&self) -> usize {
        self.selected
            .as_ref()
            .map_or(self.all_events.len(), Vec::len)
    }

    /// Never true: a message without events is not sent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events this watcher sees, in request order. `prev_kv` is left out unless the watch
    /// asked for it (the shared events carry it when any watcher did).
    pub fn events(&self) -> Box<dyn Iterator<Item = WatchEvent<'_>> + '_> {
        let with_prev_kv = self.with_prev_kv;
        let all_events: &[Event] = &self.all_events;
        match &self.selected {
            None => Box::new(
                all_events
                    .iter()
                    .map(move |event| WatchEvent::of(event, with_prev_kv)),
            ),
            Some(positions) => Box::new(positions.iter().map(move |&position| {
                WatchEvent::of(&all_events[position as usize], with_prev_kv)
            })),
        }
    }
}

/// One event as a watcher sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    pub kind: EventKind,
    pub kv: &'a KeyValue,
    pub prev_kv: Option<&'a KeyValue>,
}

impl<'a> WatchEvent<'a> {
    fn of(event: &'a Event, with_prev_kv: bool) -> Self {
        WatchEvent {
            kind: event.kind,
            kv: &event.kv,
            prev_kv: event.prev_kv.as_ref().filter(|_| with_prev_kv),
        }
    }
}

/// Why a watch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancellation {
    pub reason: CancelReason,
    /// Set when the watch fell behind a compaction: resume is impossible below this revision.
    pub compact_revision: Option<u64>,
    /// Every matching event with revision <= this was sent; resume from `last_revision + 1`.
    pub last_revision: Option<u64>,
}

/// The reasons a member ends a watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// The client did not read fast enough and the stream's buffer filled.
    SlowConsumer,
    /// The history the watch needs was compacted.
    Compacted,
    /// The member is shutting down; resume on another member.
    MemberStopping,
    /// The member could not read its own history; resume on another member.
    Internal,
}

impl CancelReason {
    /// The wire name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::SlowConsumer => "slow_consumer",
            CancelReason::Compacted => "compacted",
            CancelReason::MemberStopping => "member_stopping",
            CancelReason::Internal => "internal",
        }
    }
}

/// Why the hub ended a watch, written by the hub before it drops its sender and read by the stream
/// once the buffer is drained.
#[derive(Debug, Default)]
pub(super) struct Ending {
    cancellation: Mutex<Option<Cancellation>>,
}

impl Ending {
    /// Records the first reason given; later ones do not replace it.
    pub fn set(&self, cancellation: Cancellation) {
        let mut slot = self
            .cancellation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        slot.get_or_insert(cancellation);
    }

    pub fn take(&self) -> Option<Cancellation> {
        self.cancellation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}
