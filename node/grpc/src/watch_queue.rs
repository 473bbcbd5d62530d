//! The queue of one gRPC `Watch` stream's responses, between its watches' forwarders and tonic,
//! bounded twice: by responses and by their encoded bytes (`--watch-buffer-bytes`, the bound the
//! hub keeps on each watch's own buffer). A client that stops reading therefore holds at most that
//! many bytes here, however large the revisions written meanwhile (issue 65, item 3): once the
//! queue is full a forwarder waits, its watch's buffer in the hub fills, and the hub cancels the
//! watch `slow_consumer`. A response larger than the bound still passes once the queue is empty,
//! so one large revision reaches a client that keeps up.

use std::sync::Arc;

use prost::Message;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::proto::etcdserverpb as pb;

/// A response in the queue, with the bytes of room it holds until tonic takes it.
struct Queued {
    response: pb::WatchResponse,
    _room: OwnedSemaphorePermit,
}

/// The queue is closed: the client has gone.
#[derive(Debug)]
pub(crate) struct QueueClosed;

/// A queue of at most `responses` responses and `max_bytes` of them once non-empty.
pub(crate) fn response_queue(
    responses: usize,
    max_bytes: usize,
) -> (ResponseSender, ResponseReceiver) {
    assert!(
        responses > 0 && max_bytes > 0,
        "a watch response queue holds something"
    );
    // A semaphore's permits are counted in `u32` when taken many at once; four GiB is beyond any
    // bound a member is given (the flag's check), so clamping changes nothing in practice.
    let max_permits = u32::try_from(max_bytes).unwrap_or(u32::MAX);
    let (sender, receiver) = mpsc::channel(responses);
    let sender = ResponseSender {
        sender,
        room: Arc::new(Semaphore::new(max_permits as usize)),
        max_permits,
    };
    (sender, ResponseReceiver { receiver })
}

/// The forwarders' (and the stream's own) end of the queue.
#[derive(Clone)]
pub(crate) struct ResponseSender {
    sender: mpsc::Sender<Queued>,
    /// The bytes of room left; each queued response holds its encoded length of it.
    room: Arc<Semaphore>,
    max_permits: u32,
}

impl ResponseSender {
    /// Queues `response`, waiting for room in bytes and in responses.
    pub async fn send(&self, response: pb::WatchResponse) -> Result<(), QueueClosed> {
        let encoded = u32::try_from(response.encoded_len()).unwrap_or(u32::MAX);
        // At most the whole bound, so a larger response waits only for an empty queue.
        let wanted = encoded.min(self.max_permits);
        let room = self.room.clone().acquire_many_owned(wanted).await;
        let room = room.map_err(|_| QueueClosed)?;
        let queued = Queued {
            response,
            _room: room,
        };
        self.sender.send(queued).await.map_err(|_| QueueClosed)
    }

    /// Completes when the client has gone.
    pub async fn closed(&self) {
        self.sender.closed().await;
    }
}

/// tonic's end of the queue.
pub(crate) struct ResponseReceiver {
    receiver: mpsc::Receiver<Queued>,
}

impl ResponseReceiver {
    /// The next response; its room is given back as tonic takes it.
    pub async fn recv(&mut self) -> Option<pb::WatchResponse> {
        let queued = self.receiver.recv().await?;
        Some(queued.response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mvccpb;
    use futures_util::FutureExt;

    fn response_with_value(value_bytes: usize) -> pb::WatchResponse {
        pb::WatchResponse {
            events: vec![mvccpb::Event {
                kv: Some(mvccpb::KeyValue {
                    key: b"k".to_vec(),
                    value: vec![7; value_bytes],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn value_len(response: pb::WatchResponse) -> usize {
        response.events[0].kv.as_ref().unwrap().value.len()
    }

    /// Whether a send completes at once, without the queue being read: one with room does (its
    /// room and its slot are free), one without waits for the reader, who never reads meanwhile.
    async fn send_completes(sender: &ResponseSender, response: pb::WatchResponse) -> bool {
        match sender.send(response).now_or_never() {
            Some(sent) => {
                sent.expect("the reader is still there");
                true
            }
            None => false,
        }
    }

    #[tokio::test]
    async fn the_byte_bound_holds_back_a_sender_until_the_reader_takes_responses() {
        let (sender, mut receiver) = response_queue(128, 1000);
        assert!(send_completes(&sender, response_with_value(600)).await);
        assert!(
            !send_completes(&sender, response_with_value(600)).await,
            "1,200 bytes do not fit a 1,000-byte queue"
        );
        assert_eq!(value_len(receiver.recv().await.unwrap()), 600);
        assert!(send_completes(&sender, response_with_value(600)).await);
    }

    #[tokio::test]
    async fn a_response_larger_than_the_bound_passes_an_empty_queue_only() {
        let (sender, mut receiver) = response_queue(128, 1000);
        assert!(send_completes(&sender, response_with_value(10)).await);
        assert!(
            !send_completes(&sender, response_with_value(5000)).await,
            "a large response waits while anything is queued"
        );
        assert_eq!(value_len(receiver.recv().await.unwrap()), 10);
        assert!(send_completes(&sender, response_with_value(5000)).await);
        assert_eq!(value_len(receiver.recv().await.unwrap()), 5000);
    }

    #[tokio::test]
    async fn a_dropped_reader_closes_the_queue() {
        let (sender, receiver) = response_queue(1, 1000);
        drop(receiver);
        assert!(sender.send(response_with_value(1)).await.is_err());
        sender.closed().await;
    }
}
