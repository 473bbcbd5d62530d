//! The watch hub: one per member, and the watch API's front door. It opens watches (checking the
//! request and the limits), starts a catch-up task for a watch that starts in the past, and runs
//! the broadcast loop that offers each newly applied revision to the synced watchers.
//!
//! The hub holds no mutable state of its own: the watchers live in the registry
//! (`registry.rs`), the one file that takes the hub's lock and states the ordering and hand-over
//! arguments. Catch-up tasks and streams get narrow handles to their own watcher there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use revkv_metrics::WatchMetrics;
use revkv_storage::{validate_range, MvccStore, RangeRequest, ReadError};
use tokio::sync::{watch, Semaphore};

use super::broadcast::BroadcastLoop;
use super::catch_up::CatchUp;
use super::channel::{channel, BufferedBytes, DeliverySender};
use super::feed::RevisionFeed;
use super::limits::WatchLimits;
use super::message::{Ending, WatchMessage};
use super::registry::{CatchUpHandle, NewWatcher, Registry, StreamHandle};
use super::request::WatchRequest;
use super::stream::Watch;
use crate::error::{Missing, NodeError};

/// The member's watch hub.
pub struct WatchHub {
    store: Arc<MvccStore>,
    limits: WatchLimits,
    registry: Arc<Registry>,
    next_watch_id: AtomicU64,
    /// Bounds how many catching-up watchers read history at once, so a crowd of resuming clients
    /// cannot starve the apply path of disk and CPU.
    catch_up_reads: Arc<Semaphore>,
    stop: watch::Sender<bool>,
    /// The member's watch metrics (none for a hub outside a member, as in tests).
    metrics: Option<WatchMetrics>,
    /// The bytes every watcher's buffer holds now.
    buffered_bytes: Arc<BufferedBytes>,
}

impl WatchHub {
    /// Starts the hub over `store`, woken by `feed` whenever the applied revision moves.
    pub fn start(
        store: Arc<MvccStore>,
        feed: impl RevisionFeed,
        limits: WatchLimits,
        metrics: Option<WatchMetrics>,
    ) -> Result<Arc<WatchHub>, NodeError> {
        limits.check().map_err(NodeError::Invalid)?;
        let current = store.current_revision()?;
        let registry = Arc::new(Registry::new(
            current,
            limits.max_watchers,
            limits.handover_max_revisions,
        ));
        let stop = watch::Sender::new(false);
        let broadcast = BroadcastLoop {
            registry: registry.clone(),
            store: store.clone(),
            read_batch_events: limits.read_batch_events,
            stop: stop.subscribe(),
        };
        tokio::spawn(broadcast.run(feed));
        Ok(Arc::new(WatchHub {
            store,
            catch_up_reads: Arc::new(Semaphore::new(limits.concurrent_catch_up_reads)),
            limits,
            registry,
            next_watch_id: AtomicU64::new(1),
            stop,
            buffered_bytes: Arc::new(BufferedBytes::default()),
            metrics,
        }))
    }

    /// The limits this hub enforces.
    pub fn limits(&self) -> &WatchLimits {
        &self.limits
    }

    /// The revision through which the hub has offered every event to synced watchers.
    pub fn broadcast_revision(&self) -> u64 {
        self.registry.broadcast_through()
    }

    /// How many watches are open on this member.
    pub fn watcher_count(&self) -> usize {
        self.registry.watcher_count()
    }

    /// The bytes of key-values every watcher's buffer holds now (`revkv_watch_buffered_bytes`).
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes.total()
    }

    /// Opens a watch. Answers `compacted` when `start_revision` is below the compact revision (as
    /// in etcd, a watch may start at the compact revision itself and gets the puts that remain
    /// there), and `unavailable` when the member is stopping or has its maximum of watches.
    pub fn open(self: &Arc<Self>, request: WatchRequest) -> Result<Watch, NodeError> {
        // The key rules of reads (size, order of the range ends) apply to watches too.
        let range = RangeRequest::of(request.filter.range.clone());
        validate_range(&range, self.store.limits())?;
        let current = self.store.current_revision()?;
        let start = self.start_revision(&request, current)?;
        let progress_interval = self.limits.progress_interval(request.progress_interval)?;
        let (sender, receiver) = channel(
            self.limits.stream_buffer_messages,
            self.limits.stream_buffer_bytes,
            self.buffered_bytes.clone(),
        );
        let ending = Arc::new(Ending::default());
        let id = self.next_watch_id.fetch_add(1, Ordering::Relaxed);
        let needs_catch_up = self.registry.register(NewWatcher {
            id,
            filter: request.filter.clone(),
            prev_kv: request.prev_kv,
            start,
            sender: sender.clone(),
            ending: ending.clone(),
            counted: self.metrics.as_ref().map(WatchMetrics::track_watcher),
        })?;
        if needs_catch_up {
            tokio::spawn(self.catch_up(id, request, sender, start).run());
        }
        let created = WatchMessage::Created {
            watch_id: id,
            revision: current,
        };
        Ok(Watch::new(
            StreamHandle::new(self.registry.clone(), id),
            self.metrics.clone(),
            receiver,
            ending,
            created,
            start,
            progress_interval,
        ))
    }

    /// The first revision a watch delivers; `compacted` when it is below the compact revision.
    fn start_revision(&self, request: &WatchRequest, current: u64) -> Result<u64, NodeError> {
        let compact_revision = self.store.compact_revision()?;
        let start = match request.start_revision {
            Some(revision) if revision > 0 => revision,
            _ => current + 1,
        };
        #[cfg(feature = "planted-bugs")]
        if start < compact_revision && crate::planted_bugs::watches_skip_compacted_revisions() {
            return Ok(compact_revision);
        }
        if start < compact_revision {
            return Err(ReadError::Compacted {
                requested: start,
                compact_revision,
            }
            .into());
        }
        Ok(start)
    }

    fn catch_up(
        &self,
        id: u64,
        request: WatchRequest,
        sender: DeliverySender,
        start: u64,
    ) -> CatchUp {
        CatchUp {
            handle: CatchUpHandle::new(self.registry.clone(), id),
            store: self.store.clone(),
            limits: self.limits.clone(),
            reads: self.catch_up_reads.clone(),
            sender,
            filter: request.filter,
            prev_kv: request.prev_kv,
            start,
            position: start,
        }
    }

    /// Asks for a bookmark on watch `id` whose revision is at least the member's current revision:
    /// the contract's `POST /v1/watch/{id}/progress`. Answers the revision it will reach at least.
    pub fn request_progress(&self, id: u64) -> Result<u64, NodeError> {
        let current = self.store.current_revision()?;
        if self.registry.owe_bookmark(id, current) {
            Ok(current)
        } else {
            Err(NodeError::NotFound(Missing::Other(format!(
                "no watch {id} on this member"
            ))))
        }
    }

    /// Ends every watch with `CANCELED member_stopping` (each stream first drains what it already
    /// holds) and refuses new ones. Called before the client listener closes.
    pub fn shutdown(&self) {
        self.registry.stop();
        self.stop.send_replace(true);
    }
}
