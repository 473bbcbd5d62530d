//! The reading side of one watch: `Watch` yields the stream's messages in order (CREATED first,
//! CANCELED last), asks the hub for periodic bookmarks, and leaves the hub when dropped. The HTTP
//! layer writes its messages out; an embedding application reads them directly or as a `Stream`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use revkv_raft::clock::{Instant, Interval};
use tokio::sync::mpsc::error::TryRecvError;

use revkv_metrics::WatchMetrics;

use super::channel::DeliveryReceiver;
use super::message::{CancelReason, Cancellation, Delivery, Ending, WatchMessage};
use super::registry::StreamHandle;

/// An open watch on this member.
pub struct Watch {
    /// This watch's place in the hub; dropping it leaves the hub.
    handle: StreamHandle,
    metrics: Option<WatchMetrics>,
    receiver: DeliveryReceiver,
    /// The rest of the history delivery being handed out, one revision at a time.
    same_delivery: VecDeque<WatchMessage>,
    ending: Arc<Ending>,
    created: Option<WatchMessage>,
    progress: Option<Interval>,
    /// Every matching event at or below this has been handed to the reader.
    delivered_through: u64,
    finished: bool,
}

impl Watch {
    pub(super) fn new(
        handle: StreamHandle,
        metrics: Option<WatchMetrics>,
        receiver: DeliveryReceiver,
        ending: Arc<Ending>,
        created: WatchMessage,
        start_revision: u64,
        progress_interval: Option<Duration>,
    ) -> Watch {
        let progress = progress_interval
            .map(|period| revkv_raft::clock::interval_at(Instant::now() + period, period));
        Watch {
            handle,
            metrics,
            receiver,
            same_delivery: VecDeque::new(),
            ending,
            created: Some(created),
            progress,
            delivered_through: start_revision - 1,
            finished: false,
        }
    }

    /// This watch's id on this member (for `POST /v1/watch/{id}/progress`).
    pub fn id(&self) -> u64 {
        self.handle.id()
    }

    /// The next message, or `None` after the CANCELED message.
    pub async fn next(&mut self) -> Option<WatchMessage> {
        if let Some(created) = self.created.take() {
            return Some(created);
        }
        if self.finished {
            return None;
        }
        if let Some(message) = self.next_of_same_delivery() {
            return Some(message);
        }
        loop {
            let received = match &mut self.progress {
                Some(interval) => tokio::select! {
                    message = self.receiver.recv() => message,
                    _ = interval.tick() => {
                        // Periodic bookmarks have no minimum revision: the current broadcast
                        // point is enough, once the watch is synced.
                        self.handle.owe_bookmark(0);
                        continue;
                    }
                },
                None => self.receiver.recv().await,
            };
            return Some(self.hand_out(received));
        }
    }

    /// The next revision of the history delivery the last message came from, if any is left:
    /// what a writer adds to the response it builds, so that history the catch-up read at once
    /// leaves in one response, as etcd sends a catch-up. Live events are one delivery per
    /// revision, so they leave one response each, as in etcd.
    pub fn next_of_same_delivery(&mut self) -> Option<WatchMessage> {
        let message = self.same_delivery.pop_front()?;
        Some(self.handed_out(message))
    }

    /// The next message if one is already waiting, without waiting for one: what a writer that
    /// may group messages freely (the HTTP stream, one line per message) adds to a write.
    pub fn next_ready(&mut self) -> Option<WatchMessage> {
        if let Some(created) = self.created.take() {
            return Some(created);
        }
        if self.finished {
            return None;
        }
        if let Some(message) = self.next_of_same_delivery() {
            return Some(message);
        }
        match self.receiver.try_recv() {
            Ok(delivery) => Some(self.hand_out(Some(delivery))),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(self.hand_out(None)),
        }
    }

    /// A delivery received from the hub (`None`: the hub let go, so the stream ends): its first
    /// message, recorded as handed to the reader; the rest of a history waits in `same_delivery`.
    fn hand_out(&mut self, received: Option<Delivery>) -> WatchMessage {
        debug_assert!(self.same_delivery.is_empty());
        match received {
            Some(Delivery::Message(message)) => self.handed_out(message),
            Some(Delivery::History(revisions)) => {
                self.same_delivery
                    .extend(revisions.into_iter().map(WatchMessage::Events));
                let first = self
                    .same_delivery
                    .pop_front()
                    .expect("a history delivery is never empty");
                self.handed_out(first)
            }
            None => {
                self.finished = true;
                let message = WatchMessage::Canceled(self.final_cancellation());
                self.count(&message);
                message
            }
        }
    }

    /// Records `message` as handed to the reader.
    fn handed_out(&mut self, message: WatchMessage) -> WatchMessage {
        if let Some(revision) = message.resume_revision() {
            // The hub's ordering argument: revisions never go backwards.
            debug_assert!(revision >= self.delivered_through);
            self.delivered_through = self.delivered_through.max(revision);
        }
        self.count(&message);
        message
    }

    /// Feeds the watch metrics with a message handed to the reader.
    fn count(&self, message: &WatchMessage) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        match message {
            WatchMessage::Events(events) => metrics.record_events_sent(events.len() as u64),
            WatchMessage::Bookmark { .. } => metrics.record_bookmark_sent(),
            // A slow-consumer cancel is counted by the hub when it decides it (`registry.rs`).
            WatchMessage::Canceled(_) | WatchMessage::Created { .. } => {}
        }
    }

    /// The CANCELED message once the buffer is drained: the hub's reason, with `last_revision`
    /// raised to what this stream actually delivered (both are safe resume points).
    fn final_cancellation(&self) -> Cancellation {
        let mut cancellation = self.ending.take().unwrap_or(Cancellation {
            reason: CancelReason::Internal,
            compact_revision: None,
            last_revision: None,
        });
        let hub_said = cancellation.last_revision.unwrap_or(0);
        cancellation.last_revision = Some(hub_said.max(self.delivered_through));
        cancellation
    }

    /// The watch as a `Stream` of groups of messages: each the next message and every message
    /// already waiting behind it, at most `max_messages` (at least one), in order. A writer that
    /// writes each group at once sends the history a watch catches up on in one piece.
    pub fn into_ready_groups(
        self,
        max_messages: usize,
    ) -> impl Stream<Item = Vec<WatchMessage>> + Send + 'static {
        futures_util::stream::unfold(self, move |mut watch| async move {
            let mut group = vec![watch.next().await?];
            while group.len() < max_messages.max(1) {
                match watch.next_ready() {
                    Some(message) => group.push(message),
                    None => break,
                }
            }
            Some((group, watch))
        })
    }

    /// The watch as a `Stream` of messages, ending after CANCELED.
    pub fn into_stream(self) -> impl Stream<Item = WatchMessage> + Send + 'static {
        futures_util::stream::unfold(self, |mut watch| async move {
            let message = watch.next().await?;
            Some((message, watch))
        })
    }
}
