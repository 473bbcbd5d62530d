//! etcd's Watch service: one bidirectional stream carries many watches. Each create request
//! opens a watch on the member's watch hub (the same one `GET /v1/watch` uses, so ordering,
//! resumption, slow-consumer cancels and bookmarks are the hub's, not this adapter's), and a task
//! per watch forwards its messages as `WatchResponse`s tagged with the stream's watch id.
//!
//! As in etcd: a watch id of 0 in a create request asks the stream to pick one (the lowest unused,
//! from 0); a `WatchProgressRequest` is answered once for the stream, with watch id -1, at a
//! revision every watch of the stream has sent all its events up to (`watch_progress.rs`); the
//! `created` response is sent before the next request is read, so a create followed at once by
//! its cancel answers both, in order; a start revision
//! below the compact revision answers `created` and then `canceled` with `compact_revision`.
//! A watch created with `fragment` gets responses larger than the largest request split into
//! fragments (`watch_fragment.rs`), as from etcd. The hub hands out one message per revision;
//! events of several revisions that are already waiting (the history a watch catches up on) leave
//! in one response, up to etcd's 1,000 revisions, as etcd sends them.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use prost::Message;
use revkv_node::watch::{EventFilter, WatchMessage, WatchRequest as HubRequest};
use revkv_node::{KvBackend, NodeError};
use revkv_storage::{Error as StorageError, EventKind};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status, Streaming};

use crate::convert::{self, to_i64};
use crate::error::PERMISSION_DENIED;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;
use crate::watch_progress::{ProgressOwed, ProgressRounds, RoundAnswer};
use crate::watch_queue::{response_queue, ResponseSender};

/// Responses queued for one stream's client (and at most `stream_buffer_bytes` of them); each
/// watch's own buffer is the hub's.
const RESPONSE_BUFFER: usize = 128;

pub struct WatchService<B> {
    pub backend: Arc<B>,
    /// Watches one stream may hold at once; a create beyond it is answered canceled.
    pub max_watches_per_stream: usize,
    /// Bytes of responses one stream queues for its client (`--watch-buffer-bytes`).
    pub stream_buffer_bytes: usize,
    /// A watch created with `fragment` gets responses of this many bytes or more in fragments.
    pub fragment_bytes: usize,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;
type Responses = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<B: KvBackend> pb::watch_server::Watch for WatchService<B> {
    type WatchStream = Responses;

    async fn watch(&self, request: GrpcRequest<Streaming<pb::WatchRequest>>) -> Answer<Responses> {
        // Each create on the stream is checked against the caller who opened it.
        let backend = Arc::new(crate::auth::acting_for(&self.backend, &request)?);
        let (sender, receiver) = response_queue(RESPONSE_BUFFER, self.stream_buffer_bytes);
        // Each watch reports at most one bookmark per round, so this never blocks for long.
        let (progress_reports, progress_reported) =
            mpsc::channel(self.max_watches_per_stream.max(1));
        let stream = WatchStream {
            backend,
            max_watches: self.max_watches_per_stream,
            fragment_bytes: self.fragment_bytes,
            sender,
            watches: HashMap::new(),
            forwarders: JoinSet::new(),
            progress: ProgressRounds::default(),
            progress_reports,
            progress_reported,
        };
        tokio::spawn(stream.run(request.into_inner()));
        let responses = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let response = receiver.recv().await?;
            Some((Ok(response), receiver))
        });
        Ok(GrpcResponse::new(Box::pin(responses)))
    }
}

/// One client stream: its watches by stream watch id, and the tasks forwarding them.
struct WatchStream<B> {
    backend: Arc<B>,
    max_watches: usize,
    fragment_bytes: usize,
    sender: ResponseSender,
    /// Stream watch id → the hub's id of that watch, its forwarder, and the bookmark it owes
    /// the progress round under way.
    watches: HashMap<i64, StreamWatch>,
    /// Each forwarder ends with its stream watch id when its watch ended on its own.
    forwarders: JoinSet<i64>,
    /// The progress request being answered, if any.
    progress: ProgressRounds,
    /// Where forwarders hand the bookmarks that answer a progress request.
    progress_reports: mpsc::Sender<(i64, u64)>,
    progress_reported: mpsc::Receiver<(i64, u64)>,
}

struct StreamWatch {
    hub_id: u64,
    forwarder: AbortHandle,
    progress_owed: ProgressOwed,
}

/// The client went away: nothing more can be sent on this stream.
struct ClientGone;

impl<B: KvBackend> WatchStream<B> {
    /// Serves requests until the client goes away (a half-close ends only the requests);
    /// dropping `self` then aborts every forwarder, which drops its watch and leaves the hub.
    async fn run(mut self, mut requests: Streaming<pb::WatchRequest>) {
        // A client that half-closes (ends its requests) keeps its watches, as on etcd, whose
        // watch server goes on sending until the client goes away.
        let mut requests_open = true;
        loop {
            let served = tokio::select! {
                request = requests.message(), if requests_open => match request {
                    Ok(Some(request)) => self.handle(request).await,
                    Ok(None) => {
                        requests_open = false;
                        Ok(())
                    }
                    Err(_) => return,
                },
                () = self.sender.closed() => return,
                Some(Ok(ended)) = self.forwarders.join_next(), if !self.forwarders.is_empty() => {
                    self.watch_ended(ended).await
                }
                Some((id, revision)) = self.progress_reported.recv() => {
                    let answer = self.progress.report(id, revision);
                    self.answer_progress(answer).await
                }
            };
            if served.is_err() {
                return;
            }
        }
    }

    /// A watch ended on its own (its forwarder returned).
    async fn watch_ended(&mut self, id: i64) -> Result<(), ClientGone> {
        self.watches.remove(&id);
        let answer = self.progress.forget(id);
        self.answer_progress(answer).await
    }

    async fn handle(&mut self, request: pb::WatchRequest) -> Result<(), ClientGone> {
        use pb::watch_request::RequestUnion;
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => self.cancel(cancel.watch_id).await,
            Some(RequestUnion::ProgressRequest(_)) => self.request_progress().await,
            None => Ok(()),
        }
    }

    async fn create(&mut self, create: pb::WatchCreateRequest) -> Result<(), ClientGone> {
        let Some(id) = self.choose_id(create.watch_id) else {
            let reason = format!("watch id {} is already in use", create.watch_id);
            return self.refuse(create.watch_id, reason, 0).await;
        };
        if self.watches.len() >= self.max_watches {
            let reason = format!("this stream already holds {} watches", self.max_watches);
            return self.refuse(id, reason, 0).await;
        }
        // Fragments are etcd's `fragment` flag; without it every response goes whole.
        let fragment_bytes = create.fragment.then_some(self.fragment_bytes);
        let request = match hub_request(create) {
            Ok(request) => request,
            Err(reason) => return self.refuse(id, reason, 0).await,
        };
        if self.backend.authorize_watch(&request.filter.range).is_err() {
            return self.refuse(id, PERMISSION_DENIED.to_string(), 0).await;
        }
        match self.backend.watch_hub().open(request) {
            Ok(mut watch) => {
                let hub_id = watch.id();
                // The hub hands out `created` first and at once; sending it here, before the next
                // request is read, keeps it ahead of a cancel or progress answer for this watch.
                if let Some(created) = watch.next().await {
                    self.send(response_of(&created, id, self.backend.as_ref()))
                        .await?;
                }
                let progress_owed = ProgressOwed::default();
                let forwarder = Forwarder {
                    id,
                    backend: self.backend.clone(),
                    sender: self.sender.clone(),
                    fragment_bytes,
                    progress_owed: progress_owed.clone(),
                    progress_reports: self.progress_reports.clone(),
                };
                let abort = self.forwarders.spawn(forwarder.run(watch));
                let stream_watch = StreamWatch {
                    hub_id,
                    forwarder: abort,
                    progress_owed,
                };
                self.watches.insert(id, stream_watch);
                Ok(())
            }
            Err(NodeError::Storage(StorageError::Compacted {
                compact_revision, ..
            })) => {
                let reason = "required revision has been compacted".to_owned();
                self.refuse(id, reason, compact_revision).await
            }
            Err(error) => self.refuse(id, error.to_string(), 0).await,
        }
    }

    /// The id a create asks for, or the lowest unused one for 0; `None` when the asked-for id is
    /// taken.
    fn choose_id(&self, asked: i64) -> Option<i64> {
        if asked != 0 {
            return (!self.watches.contains_key(&asked)).then_some(asked);
        }
        (0..).find(|id| !self.watches.contains_key(id))
    }

    /// etcd's answer to a create it cannot serve: created, then canceled with the reason.
    async fn refuse(
        &mut self,
        id: i64,
        reason: String,
        compact_revision: u64,
    ) -> Result<(), ClientGone> {
        let header = self.header(None);
        let created = pb::WatchResponse {
            header,
            watch_id: id,
            created: true,
            ..Default::default()
        };
        let canceled = pb::WatchResponse {
            header,
            watch_id: id,
            canceled: true,
            compact_revision: to_i64(compact_revision),
            cancel_reason: reason,
            ..Default::default()
        };
        self.send(created).await?;
        self.send(canceled).await
    }

    async fn cancel(&mut self, id: i64) -> Result<(), ClientGone> {
        let Some(watch) = self.watches.remove(&id) else {
            return Ok(());
        };
        watch.forwarder.abort();
        let response = pb::WatchResponse {
            header: self.header(None),
            watch_id: id,
            canceled: true,
            ..Default::default()
        };
        self.send(response).await?;
        let answer = self.progress.forget(id);
        self.answer_progress(answer).await
    }

    /// Starts a progress round (or joins the one under way): every watch of this stream owes a
    /// bookmark at the member's current revision or later.
    async fn request_progress(&mut self) -> Result<(), ClientGone> {
        let (to_ask, mut answer) = self.progress.request(self.watches.keys().copied());
        // Read before the hub is asked, so every bookmark the hub then sends reaches it.
        let current = self.backend.header().map_or(0, |header| header.revision);
        let hub = self.backend.watch_hub();
        for id in to_ask {
            let Some(watch) = self.watches.get(&id) else {
                continue;
            };
            watch.progress_owed.owe(current);
            if hub.request_progress(watch.hub_id).is_err() {
                // The watch ended in the meantime; the round does not wait for it.
                answer = answer.or(self.progress.forget(id));
            }
        }
        self.answer_progress(answer).await?;
        // As etcd answers a progress request before it reads the next request, the stream waits
        // for its watches' bookmarks (they come at once from watches that are caught up, after
        // their catch-up from the others) before it reads on.
        while self.progress.under_way() {
            let served = tokio::select! {
                Some(Ok(ended)) = self.forwarders.join_next(), if !self.forwarders.is_empty() => {
                    self.watch_ended(ended).await
                }
                Some((id, revision)) = self.progress_reported.recv() => {
                    let answer = self.progress.report(id, revision);
                    self.answer_progress(answer).await
                }
                else => return Ok(()),
            };
            served?;
        }
        Ok(())
    }

    /// Sends a finished round's responses: watch id -1, no events, the round's revision.
    async fn answer_progress(&self, answer: Option<RoundAnswer>) -> Result<(), ClientGone> {
        let Some(answer) = answer else {
            return Ok(());
        };
        for _ in 0..answer.answers {
            let response = pb::WatchResponse {
                header: self.header(answer.revision),
                watch_id: -1,
                ..Default::default()
            };
            self.send(response).await?;
        }
        Ok(())
    }

    fn header(&self, revision: Option<u64>) -> Option<pb::ResponseHeader> {
        stream_header(self.backend.as_ref(), revision)
    }

    async fn send(&self, response: pb::WatchResponse) -> Result<(), ClientGone> {
        self.sender.send(response).await.map_err(|_| ClientGone)
    }
}

/// The member's header, with `revision` in place of the current one when given.
fn stream_header<B: KvBackend>(backend: &B, revision: Option<u64>) -> Option<pb::ResponseHeader> {
    // With a revision known, no store read: this runs once per watch per event, and reading the
    // current revision only to replace it was a fifth of a member's CPU with 10,000 watches.
    let header = match revision {
        Some(revision) => backend.header_for_revision(revision),
        None => backend.header(),
    };
    convert::header(header.ok()?, backend.cluster_id())
}

/// The hub's request for an etcd create request, or the reason it cannot be served.
fn hub_request(create: pb::WatchCreateRequest) -> Result<HubRequest, String> {
    use pb::watch_create_request::FilterType;
    let range = convert::key_range(create.key, create.range_end)
        .map_err(|status| status.message().to_owned())?;
    let mut filter = EventFilter {
        range,
        no_put: false,
        no_delete: false,
    };
    for kind in &create.filters {
        match FilterType::try_from(*kind) {
            Ok(FilterType::Noput) => filter.no_put = true,
            Ok(FilterType::Nodelete) => filter.no_delete = true,
            Err(_) => return Err(format!("unknown watch filter {kind}")),
        }
    }
    Ok(HubRequest {
        filter,
        start_revision: u64::try_from(create.start_revision)
            .ok()
            .filter(|revision| *revision > 0),
        prev_kv: create.prev_kv,
        // etcd sends progress notifications only when asked, at its interval (the hub's default,
        // etcd's ten minutes); zero turns them off.
        progress_interval: (!create.progress_notify).then_some(Duration::ZERO),
    })
}

/// What forwards one watch's messages to its stream.
struct Forwarder<B> {
    /// The watch's id on its stream.
    id: i64,
    backend: Arc<B>,
    sender: ResponseSender,
    /// With a limit, a response of that many bytes or more goes in fragments.
    fragment_bytes: Option<usize>,
    progress_owed: ProgressOwed,
    progress_reports: mpsc::Sender<(i64, u64)>,
}

impl<B: KvBackend> Forwarder<B> {
    /// Forwards until the watch ends or the client goes away; answers the stream watch id. A
    /// bookmark that answers the stream's progress round goes to the stream, which answers the
    /// round once for all its watches.
    async fn run(self, mut watch: revkv_node::watch::Watch) -> i64 {
        let id = self.id;
        while let Some(message) = watch.next().await {
            if let WatchMessage::Bookmark { revision } = message {
                if self.progress_owed.take_if_answered_by(revision) {
                    if self.progress_reports.send((id, revision)).await.is_err() {
                        return id;
                    }
                    continue;
                }
            }
            let mut response = response_of(&message, id, self.backend.as_ref());
            if matches!(message, WatchMessage::Events(_)) {
                gather_same_delivery(&mut watch, &mut response);
            }
            let pieces = match self.fragment_bytes {
                Some(limit) => crate::watch_fragment::fragments(response, limit),
                None => vec![response],
            };
            for piece in pieces {
                if self.sender.send(piece).await.is_err() {
                    return id;
                }
            }
        }
        id
    }
}

/// The most revisions one events response gathers: etcd's `watchBatchMaxRevs`.
const MAX_REVISIONS_PER_RESPONSE: usize = 1000;

/// The size at which a response stops gathering more revisions: tonic's default limit on a
/// message it decodes (4 MiB), so that clients built on tonic, as Rust's etcd clients are, can
/// read every gathered response. A single revision larger than this is still sent whole.
const MAX_GATHERED_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Adds to the events `response` the other revisions of the history delivery its events came
/// from, as etcd sends the history a watch catches up on in one response rather than one per
/// revision (live events come one revision per delivery, so they stay one response each, as in
/// etcd). What does not fit stays in the watch and goes in the next response, so the order of
/// events, bookmarks and the cancel never changes.
fn gather_same_delivery(watch: &mut revkv_node::watch::Watch, response: &mut pb::WatchResponse) {
    let mut revisions = 1;
    let mut bytes = response.encoded_len();
    while revisions < MAX_REVISIONS_PER_RESPONSE && bytes < MAX_GATHERED_RESPONSE_BYTES {
        let Some(message) = watch.next_of_same_delivery() else {
            return;
        };
        let WatchMessage::Events(events) = message else {
            unreachable!("a history delivery holds only events");
        };
        let more = events_of(&events);
        bytes += more.iter().map(Message::encoded_len).sum::<usize>();
        response.events.extend(more);
        revisions += 1;
    }
}

/// One revision's events as etcd's.
fn events_of(events: &revkv_node::watch::RevisionEvents) -> Vec<mvccpb::Event> {
    events
        .events()
        .map(|event| mvccpb::Event {
            r#type: match event.kind {
                EventKind::Put => mvccpb::event::EventType::Put,
                EventKind::Delete => mvccpb::event::EventType::Delete,
            }
            .into(),
            kv: Some(convert::key_value(event.kv.clone())),
            prev_kv: event.prev_kv.cloned().map(convert::key_value),
        })
        .collect()
}

/// A hub message as etcd's response for stream watch `id`.
fn response_of<B: KvBackend>(message: &WatchMessage, id: i64, backend: &B) -> pb::WatchResponse {
    let header = |revision| stream_header(backend, revision);
    match message {
        WatchMessage::Created { revision, .. } => pb::WatchResponse {
            header: header(Some(*revision)),
            watch_id: id,
            created: true,
            ..Default::default()
        },
        // As etcd: the header of an events response carries the member's revision when it is
        // sent (during catch-up, later than the events'), and the events their own.
        WatchMessage::Events(events) => pb::WatchResponse {
            header: header(None),
            watch_id: id,
            events: events_of(events),
            ..Default::default()
        },
        WatchMessage::Bookmark { revision } => pb::WatchResponse {
            header: header(Some(*revision)),
            watch_id: id,
            ..Default::default()
        },
        WatchMessage::Canceled(cancellation) => pb::WatchResponse {
            header: header(None),
            watch_id: id,
            canceled: true,
            compact_revision: cancellation.compact_revision.map_or(0, to_i64),
            cancel_reason: cancellation.reason.as_str().to_owned(),
            ..Default::default()
        },
    }
}
