//! One watcher's channel from the hub to its stream, bounded twice: by messages
//! (`WatchLimits::stream_buffer_messages`) and by the bytes of the key-values they carry
//! (`WatchLimits::stream_buffer_bytes`), so that a reader that stops reading holds at most that
//! much, whatever the size of the revisions written meanwhile (issue 65, item 3).
//!
//! The bytes of a message are counted when it enters the channel and uncounted when the stream
//! takes it out, or when the stream is dropped with messages still queued, so the hub's total
//! (`revkv_watch_buffered_bytes`) is what every watcher's channel holds now. A message always
//! enters an empty channel, so one revision larger than the bound still reaches a reader that
//! keeps up; a live message that would take a non-empty channel past the bound is refused as a
//! full channel is, and the registry cancels the watcher `slow_consumer`. A catch-up's history
//! is flow-controlled instead (it waits until the reader has emptied the channel), so it is
//! counted but never refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use revkv_metrics::WatchBufferBound;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::{SendError, TryRecvError, TrySendError};

use super::message::{Delivery, RevisionEvents, WatchMessage};

/// The bytes every watcher's channel of one hub holds, read by its gauge before each scrape.
#[derive(Debug, Default)]
pub(super) struct BufferedBytes {
    total: AtomicUsize,
}

impl BufferedBytes {
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    fn add(&self, bytes: usize) {
        self.total.fetch_add(bytes, Ordering::AcqRel);
    }

    fn subtract(&self, bytes: usize) {
        let before = self.total.fetch_sub(bytes, Ordering::AcqRel);
        assert!(before >= bytes, "a watcher's bytes were uncounted twice");
    }
}

/// What one watcher's channel holds in bytes, shared by its two ends.
#[derive(Debug)]
struct Queued {
    bytes: AtomicUsize,
    max_bytes: usize,
    hub_total: Arc<BufferedBytes>,
}

impl Queued {
    fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        self.hub_total.add(bytes);
    }

    fn subtract(&self, bytes: usize) {
        let before = self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        assert!(before >= bytes, "a message's bytes were uncounted twice");
        self.hub_total.subtract(bytes);
    }
}

/// A channel of `messages` deliveries and at most `max_bytes` of key-values once non-empty.
pub(super) fn channel(
    messages: usize,
    max_bytes: usize,
    hub_total: Arc<BufferedBytes>,
) -> (DeliverySender, DeliveryReceiver) {
    let (sender, receiver) = mpsc::channel(messages);
    let queued = Arc::new(Queued {
        bytes: AtomicUsize::new(0),
        max_bytes,
        hub_total,
    });
    (
        DeliverySender {
            sender,
            queued: queued.clone(),
        },
        DeliveryReceiver { receiver, queued },
    )
}

/// Why a delivery did not enter a watcher's channel.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The channel is full by this bound: the watcher is too far behind.
    Full(WatchBufferBound),
    /// The stream has gone.
    Closed,
}

/// The hub's end of a watcher's channel.
#[derive(Clone, Debug)]
pub(super) struct DeliverySender {
    sender: mpsc::Sender<Delivery>,
    queued: Arc<Queued>,
}

impl DeliverySender {
    /// Enqueues `delivery` if it fits both bounds; `Full` with the bound it would pass when it
    /// does not (the caller cancels the watcher), `Closed` when the stream has gone. A message
    /// that carries no key-values (a bookmark) is held to the message bound only.
    pub fn try_send(&self, delivery: Delivery) -> Result<(), Refused> {
        let bytes = delivery_bytes(&delivery);
        let queued = self.queued.bytes.load(Ordering::Acquire);
        if bytes > 0 && queued > 0 && queued.saturating_add(bytes) > self.queued.max_bytes {
            return Err(Refused::Full(WatchBufferBound::Bytes));
        }
        // Counted before it can be received, so the receiver never uncounts what was not counted.
        self.queued.add(bytes);
        self.sender.try_send(delivery).map_err(|refused| {
            self.queued.subtract(bytes);
            match refused {
                TrySendError::Full(_) => Refused::Full(WatchBufferBound::Messages),
                TrySendError::Closed(_) => Refused::Closed,
            }
        })
    }

    /// Enqueues a catch-up's history, waiting for room: flow-controlled by the catch-up, which
    /// sends only into an empty channel, so it is counted but not held to the byte bound.
    pub async fn send(&self, delivery: Delivery) -> Result<(), SendError<Delivery>> {
        let bytes = delivery_bytes(&delivery);
        self.queued.add(bytes);
        self.sender.send(delivery).await.inspect_err(|_| {
            self.queued.subtract(bytes);
        })
    }

    /// Waits until the reader has taken every message out (`Err` once the stream has gone).
    pub async fn wait_until_empty(&self) -> Result<(), ()> {
        let whole_buffer = self.sender.max_capacity();
        match self.sender.reserve_many(whole_buffer).await {
            Ok(permits) => {
                drop(permits);
                Ok(())
            }
            Err(_) => Err(()),
        }
    }
}

/// The stream's end of a watcher's channel.
#[derive(Debug)]
pub(super) struct DeliveryReceiver {
    receiver: mpsc::Receiver<Delivery>,
    queued: Arc<Queued>,
}

impl DeliveryReceiver {
    pub async fn recv(&mut self) -> Option<Delivery> {
        let delivery = self.receiver.recv().await?;
        self.queued.subtract(delivery_bytes(&delivery));
        Some(delivery)
    }

    pub fn try_recv(&mut self) -> Result<Delivery, TryRecvError> {
        let delivery = self.receiver.try_recv()?;
        self.queued.subtract(delivery_bytes(&delivery));
        Ok(delivery)
    }
}

impl Drop for DeliveryReceiver {
    /// Uncounts what the stream leaves unread, so the hub's total falls back when a slow reader
    /// goes away.
    fn drop(&mut self) {
        self.receiver.close();
        while let Ok(delivery) = self.receiver.try_recv() {
            self.queued.subtract(delivery_bytes(&delivery));
        }
    }
}

/// The bytes of key-values a delivery carries for its watcher (keys, values and previous values
/// of the events it selects); the fixed parts of a message are not counted.
fn delivery_bytes(delivery: &Delivery) -> usize {
    match delivery {
        Delivery::Message(WatchMessage::Events(events)) => revision_bytes(events),
        Delivery::Message(_) => 0,
        Delivery::History(revisions) => revisions.iter().map(revision_bytes).sum(),
    }
}

fn revision_bytes(events: &RevisionEvents) -> usize {
    events
        .events()
        .map(|event| {
            let previous = event.prev_kv.map_or(0, |kv| kv.key.len() + kv.value.len());
            event.kv.key.len() + event.kv.value.len() + previous
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use revkv_storage::{Event, EventKind, KeyValue};

    fn events_of(revision: u64, value_bytes: usize) -> Delivery {
        let kv = KeyValue {
            key: b"k".to_vec(),
            value: vec![0; value_bytes],
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            lease: 0,
        };
        let event = Event {
            kind: EventKind::Put,
            kv,
            prev_kv: None,
        };
        let events = RevisionEvents::new(revision, Arc::new(vec![event]), None, false);
        Delivery::Message(WatchMessage::Events(events))
    }

    fn bookmark(revision: u64) -> Delivery {
        Delivery::Message(WatchMessage::Bookmark { revision })
    }

    #[tokio::test]
    async fn the_message_bound_is_named_when_it_is_the_one_hit() {
        let hub_total = Arc::new(BufferedBytes::default());
        let (sender, _receiver) = channel(2, 1000, hub_total);
        sender.try_send(bookmark(1)).unwrap();
        sender.try_send(events_of(2, 1)).unwrap();
        assert_eq!(
            sender.try_send(bookmark(3)),
            Err(Refused::Full(WatchBufferBound::Messages))
        );
    }

    #[tokio::test]
    async fn the_byte_bound_refuses_only_a_non_empty_channel_and_every_byte_is_uncounted() {
        let hub_total = Arc::new(BufferedBytes::default());
        let (sender, mut receiver) = channel(16, 100, hub_total.clone());
        // Larger than the bound, into an empty channel: admitted.
        sender.try_send(events_of(2, 149)).unwrap();
        assert_eq!(hub_total.total(), 150);
        let full_by_bytes = Err(Refused::Full(WatchBufferBound::Bytes));
        assert_eq!(sender.try_send(events_of(3, 9)), full_by_bytes);
        assert_eq!(
            sender.try_send(bookmark(3)),
            Ok(()),
            "a bookmark carries no key-values and is held to the message bound only"
        );
        assert_eq!(receiver.recv().await.map(|_| ()), Some(()));
        assert!(receiver.recv().await.is_some());
        assert_eq!(hub_total.total(), 0);
        sender.try_send(events_of(3, 59)).unwrap();
        sender.try_send(events_of(4, 39)).unwrap();
        assert_eq!(
            sender.try_send(events_of(5, 0)),
            full_by_bytes,
            "100 bytes queued: one more byte is past the bound"
        );
        assert_eq!(hub_total.total(), 100);
        drop(receiver);
        assert_eq!(
            hub_total.total(),
            0,
            "a dropped stream uncounts what it left"
        );
        assert_eq!(sender.try_send(events_of(6, 0)), Err(Refused::Closed));
        assert_eq!(hub_total.total(), 0);
    }
}
