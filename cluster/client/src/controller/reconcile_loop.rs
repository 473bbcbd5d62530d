//! The reconcile loop: an informer feeding a work queue, and workers that call the user's
//! `reconcile(key)` (controller-runtime's `Reconciler`, client-go's `processNextWorkItem`).
//!
//! ```no_run
//! # async fn example(client: revkv_client::Client) -> Result<(), revkv_client::ClientError> {
//! use revkv_client::controller::{Action, Controller};
//!
//! let running = Controller::new("printer", client, "app/")
//!     .start(|request| async move {
//!         println!("{} is now {:?}", request.key, request.cache.get(&request.key));
//!         Ok(Action::Done)
//!     })
//!     .await?;
//! running.shut_down().await?;
//! # Ok(())
//! # }
//! ```
//!
//! What happens to a key after its reconcile: `Ok(Done)` forgets its failures; `Ok(Requeue)` and
//! any error requeue it with the queue's per-key backoff (a [`ClientError::Conflict`] is also
//! counted by key prefix: the cache was stale, the next reconcile reads the newer value);
//! `Ok(RequeueAfter(d))` comes back after `d`. A reconcile that panics counts as an error: the
//! panic is caught where the reconcile's task ends, so a worker never dies of it.
//!
//! The informer's side: every change's key, mapped through the controller's key mapper (a pod's
//! key to its owner's, say), is added to the queue; when the queue is full, the informer waits
//! (back-pressure; the member ends a watch that falls too far behind and the informer resumes or
//! relists). Between changes (bookmarks come at least every progress interval) it runs the cache
//! check every `cache_check_interval`, and a divergence is repaired by a relist whose differences
//! are reconciled. A list or watch error is logged, counted, and followed by a wait and a relist.

use std::error::Error;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::super::backoff::Backoff;
use super::super::error::ClientError;
use super::super::informer::{CacheReader, Informer, InformerSettings};
use super::super::Client;
use super::cache::{IndexFunction, InformerEvent};
use super::convergence::ConvergenceTracker;
use super::metrics::{ControllerMetrics, ReconcileOutcome};
use super::rate_limiter::{ControllerRateLimiter, RateLimiterSettings};
use super::work_queue::WorkQueue;

/// The most workers one controller runs.
pub const MOST_WORKERS: usize = 256;

/// What a reconcile asks for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The key is as it should be; forget its failures.
    Done,
    /// Reconcile again, after the key's backoff.
    Requeue,
    /// Reconcile again after this long (a deadline the object carries, say).
    RequeueAfter(Duration),
}

/// Any error a reconcile returns; a [`ClientError::Conflict`] inside is told apart.
pub type ReconcileError = Box<dyn Error + Send + Sync>;

/// What a reconcile is given.
pub struct ReconcileRequest {
    /// The key to reconcile (as the key mapper gave it).
    pub key: String,
    /// The informer's cache: the state as of its revision, possibly behind the store.
    pub cache: CacheReader,
    pub client: Client,
    /// How many times in a row this key was requeued with backoff.
    pub retries: u32,
}

/// How a controller runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerSettings {
    pub workers: usize,
    pub informer: InformerSettings,
    /// The most distinct keys the queue holds before the informer waits.
    pub queue_max_keys: usize,
    pub rate_limiter: RateLimiterSettings,
    /// How often the cache is compared with the store (None: never).
    pub cache_check_interval: Option<Duration>,
    /// How often every cached key is reconciled again, changed or not (client-go's resync
    /// period; None: never).
    pub resync_interval: Option<Duration>,
    /// Requeues with backoff after which a failing key is dropped until its next change
    /// (None: never dropped; the backoff grows to the limiter's maximum).
    pub max_retries: Option<u32>,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            workers: 4,
            informer: InformerSettings::default(),
            queue_max_keys: 100_000,
            rate_limiter: RateLimiterSettings::default(),
            cache_check_interval: Some(Duration::from_secs(300)),
            resync_interval: None,
            max_retries: None,
        }
    }
}

/// Maps a changed key to the key to reconcile (None: ignore the change).
pub type KeyMapper = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A controller, before it starts.
pub struct Controller {
    name: String,
    client: Client,
    prefix: String,
    settings: ControllerSettings,
    key_mapper: KeyMapper,
    indexes: Vec<(String, IndexFunction)>,
    metrics: Option<ControllerMetrics>,
}

impl Controller {
    /// A controller called `name` of every key under `prefix`, each reconciled under its own key.
    pub fn new(name: impl Into<String>, client: Client, prefix: impl Into<String>) -> Self {
        Controller {
            name: name.into(),
            client,
            prefix: prefix.into(),
            settings: ControllerSettings::default(),
            key_mapper: Arc::new(|key| Some(key.to_string())),
            indexes: Vec::new(),
            metrics: None,
        }
    }

    pub fn settings(mut self, settings: ControllerSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Which key a change of `key` reconciles (an owned object's key to its owner's, say).
    pub fn map_keys(
        mut self,
        mapper: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.key_mapper = Arc::new(mapper);
        self
    }

    /// An index of the informer's cache (see [`CacheReader::by_index`]).
    pub fn index(mut self, name: impl Into<String>, function: IndexFunction) -> Self {
        self.indexes.push((name.into(), function));
        self
    }

    /// Where the controller's metrics go (from [`ControllerMetricFamilies::for_controller`](
    /// super::ControllerMetricFamilies::for_controller)).
    pub fn metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Lists the prefix, queues every key, and starts the informer and the workers. A first list
    /// that fails, or settings out of bounds, are answered here.
    pub async fn start<R, F>(self, reconcile: R) -> Result<RunningController, ClientError>
    where
        R: Fn(ReconcileRequest) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        let settings = self.settings;
        if settings.workers == 0 || settings.workers > MOST_WORKERS {
            return Err(ClientError::Invalid {
                message: format!("a controller runs 1 to {MOST_WORKERS} workers"),
            });
        }
        let limiter = ControllerRateLimiter::new(settings.rate_limiter).map_err(|error| {
            ClientError::Invalid {
                message: error.to_string(),
            }
        })?;
        let Some(queue_max_keys) = NonZeroUsize::new(settings.queue_max_keys) else {
            return Err(ClientError::Invalid {
                message: "a controller's queue holds at least one key".to_string(),
            });
        };
        let queue = WorkQueue::new(queue_max_keys, limiter);
        let mut informer =
            Informer::with_settings(self.client.clone(), &self.prefix, settings.informer);
        for (name, function) in self.indexes {
            informer.add_index(name, function)?;
        }
        let listed = informer.sync().await?;
        let cache = informer.cache();
        let (stop_informer, stopped) = watch::channel(false);
        let mut feed = InformerFeed {
            name: self.name.clone(),
            informer,
            queue: queue.clone(),
            key_mapper: self.key_mapper,
            metrics: self.metrics.clone(),
            convergence: ConvergenceTracker::new(settings.informer.cache_limits.max_objects),
            settings,
        };
        feed.enqueue(&listed).await;
        let informer_task = tokio::spawn(feed.run(stopped));
        let reconcile = Arc::new(reconcile);
        let workers = (0..settings.workers)
            .map(|_| {
                let worker = Worker {
                    queue: queue.clone(),
                    cache: cache.clone(),
                    client: self.client.clone(),
                    metrics: self.metrics.clone(),
                    max_retries: settings.max_retries,
                    name: self.name.clone(),
                };
                tokio::spawn(worker.run(Arc::clone(&reconcile)))
            })
            .collect();
        Ok(RunningController {
            cache,
            queue,
            stop_informer,
            informer_task,
            workers,
        })
    }
}

/// A started controller.
pub struct RunningController {
    cache: CacheReader,
    queue: WorkQueue,
    stop_informer: watch::Sender<bool>,
    informer_task: JoinHandle<Result<(), ClientError>>,
    workers: Vec<JoinHandle<()>>,
}

impl RunningController {
    /// The informer's cache.
    pub fn cache(&self) -> CacheReader {
        self.cache.clone()
    }

    /// The work queue (its depth, say).
    pub fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    /// Whether the informer stopped on an error it cannot get past (its cache's limit).
    pub fn informer_has_failed(&self) -> bool {
        self.informer_task.is_finished()
    }

    /// Stops the informer, lets the workers finish the keys they hold (client-go's
    /// `ShutDownWithDrain`), and answers the informer's error if it stopped on one.
    pub async fn shut_down(self) -> Result<(), ClientError> {
        let _ = self.stop_informer.send(true);
        self.queue.shut_down_with_drain().await;
        for worker in self.workers {
            let _ = worker.await;
        }
        match self.informer_task.await {
            Ok(result) => result,
            Err(join_error) => Err(ClientError::Transport {
                message: format!("the informer task ended abnormally: {join_error}"),
            }),
        }
    }
}

/// The informer's loop: changes into the queue, the cache check and the resync.
struct InformerFeed {
    name: String,
    informer: Informer,
    queue: WorkQueue,
    key_mapper: KeyMapper,
    metrics: Option<ControllerMetrics>,
    convergence: ConvergenceTracker,
    settings: ControllerSettings,
}

/// The waits after an informer error: 100 ms doubling to 30 s.
const INFORMER_ERROR_BACKOFF: Backoff = Backoff {
    duration: Duration::from_millis(100),
    factor: 2.0,
    jitter: 0.1,
    steps: u32::MAX,
    cap: Duration::from_secs(30),
};

impl InformerFeed {
    async fn run(mut self, mut stopped: watch::Receiver<bool>) -> Result<(), ClientError> {
        let mut next_check = self
            .settings
            .cache_check_interval
            .map(|every| Instant::now() + every);
        let mut next_resync = self
            .settings
            .resync_interval
            .map(|every| Instant::now() + every);
        let mut error_backoff = INFORMER_ERROR_BACKOFF;
        loop {
            let change = tokio::select! {
                _ = stopped.changed() => return Ok(()),
                change = self.informer.next_events() => change,
            };
            match change {
                Ok(change) => {
                    error_backoff = INFORMER_ERROR_BACKOFF;
                    if change.relisted {
                        self.count(|metrics| metrics.count_relist("compacted"));
                    }
                    self.enqueue(&change.events).await;
                }
                Err(error @ ClientError::LimitExceeded { .. }) => {
                    tracing::error!(controller = %self.name, %error, "the informer stops");
                    self.queue.shut_down();
                    return Err(error);
                }
                Err(error) => {
                    tracing::warn!(controller = %self.name, %error, "informer error; relisting");
                    self.count(ControllerMetrics::count_informer_error);
                    let wait = tokio::time::sleep(error_backoff.step());
                    tokio::select! {
                        _ = stopped.changed() => return Ok(()),
                        _ = wait => {}
                    }
                    self.relist("error").await;
                }
            }
            if next_check.is_some_and(|at| Instant::now() >= at) {
                next_check = self
                    .settings
                    .cache_check_interval
                    .map(|every| Instant::now() + every);
                self.check_cache().await;
            }
            if next_resync.is_some_and(|at| Instant::now() >= at) {
                next_resync = self
                    .settings
                    .resync_interval
                    .map(|every| Instant::now() + every);
                for key in self.informer.cache().keys() {
                    self.add(&key).await;
                }
            }
        }
    }

    fn count(&self, record: impl FnOnce(&ControllerMetrics)) {
        if let Some(metrics) = &self.metrics {
            record(metrics);
        }
    }

    /// Lists again and queues what changed; an error is left to the next round.
    async fn relist(&mut self, reason: &'static str) {
        self.count(|metrics| metrics.count_relist(reason));
        match self.informer.sync().await {
            Ok(events) => self.enqueue(&events).await,
            Err(error) => tracing::warn!(controller = %self.name, %error, "relist failed"),
        }
    }

    /// Compares the cache with the store; a difference is repaired by a relist.
    async fn check_cache(&mut self) {
        match self.informer.verify_against_store().await {
            Ok(check) if check.is_exact() => self.count(ControllerMetrics::count_cache_check),
            Ok(check) => {
                let differing = check.missing.len() + check.stale.len() + check.unexpected.len();
                tracing::warn!(
                    controller = %self.name, revision = check.revision, missing = ?check.missing,
                    stale = ?check.stale, unexpected = ?check.unexpected,
                    "the cache differs from the store: the watch lost an event; relisting"
                );
                self.count(ControllerMetrics::count_cache_check);
                self.count(|metrics| metrics.count_divergences(differing));
                self.relist("divergence").await;
            }
            Err(ClientError::Compacted { .. }) => {}
            Err(error) => tracing::warn!(controller = %self.name, %error, "cache check failed"),
        }
    }

    /// Times convergence and queues the key each event maps to.
    async fn enqueue(&mut self, events: &[InformerEvent]) {
        let now = std::time::Instant::now();
        for event in events {
            for took in self.convergence.observe(event, now) {
                self.count(|metrics| metrics.observe_convergence(took));
            }
            if let Some(key) = (self.key_mapper)(event.key()) {
                self.add(&key).await;
            }
        }
        let cache = self.informer.cache();
        self.count(|metrics| metrics.set_cache_size(cache.len(), cache.counted_bytes()));
    }

    async fn add(&self, key: &str) {
        if self.queue.add(key.to_string()).await.is_ok() {
            self.count(ControllerMetrics::count_add);
            self.count(|metrics| metrics.set_queue_depth(self.queue.len()));
        }
    }
}

/// One worker: takes keys from the queue until it is shut down and drained.
struct Worker {
    name: String,
    queue: WorkQueue,
    cache: CacheReader,
    client: Client,
    metrics: Option<ControllerMetrics>,
    max_retries: Option<u32>,
}

impl Worker {
    async fn run<R, F>(self, reconcile: Arc<R>)
    where
        R: Fn(ReconcileRequest) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        while let Some(key) = self.queue.get().await {
            let request = ReconcileRequest {
                key: key.clone(),
                cache: self.cache.clone(),
                client: self.client.clone(),
                retries: self.queue.failures(&key),
            };
            let started = Instant::now();
            // Its own task, so that a panic ends the reconcile, not the worker.
            let outcome = match tokio::spawn(reconcile(request)).await {
                Ok(outcome) => outcome,
                Err(join_error) => Err(format!("the reconcile panicked: {join_error}").into()),
            };
            let result = self.follow(&key, outcome).await;
            if let Some(metrics) = &self.metrics {
                metrics.observe_reconcile(result, started.elapsed());
                metrics.set_queue_depth(self.queue.len());
            }
            self.queue.done(&key);
        }
    }

    /// Does what the reconcile's outcome asks for the key; answers the outcome's label.
    async fn follow(&self, key: &str, outcome: Result<Action, ReconcileError>) -> ReconcileOutcome {
        let requeue_with_backoff = || async {
            if let Some(metrics) = &self.metrics {
                metrics.count_retry();
            }
            let _ = self.queue.add_rate_limited(key.to_string()).await;
        };
        match outcome {
            Ok(Action::Done) => {
                self.queue.forget(key);
                ReconcileOutcome::Done
            }
            Ok(Action::Requeue) => {
                requeue_with_backoff().await;
                ReconcileOutcome::Requeue
            }
            Ok(Action::RequeueAfter(delay)) => {
                self.queue.forget(key);
                let _ = self.queue.add_after(key.to_string(), delay).await;
                ReconcileOutcome::Requeue
            }
            Err(error) if is_conflict(&*error) => {
                if let Some(metrics) = &self.metrics {
                    metrics.count_conflict(key);
                }
                requeue_with_backoff().await;
                ReconcileOutcome::Conflict
            }
            Err(error) => {
                let retries = self.queue.failures(key);
                if self.max_retries.is_some_and(|most| retries >= most) {
                    tracing::warn!(controller = %self.name, key, %error, retries, "dropping the key until its next change");
                    self.queue.forget(key);
                } else {
                    tracing::debug!(controller = %self.name, key, %error, "reconcile failed; requeued");
                    requeue_with_backoff().await;
                }
                ReconcileOutcome::Error
            }
        }
    }
}

/// Whether `error` is a write conflict (the cache was behind the store).
fn is_conflict(error: &(dyn Error + Send + Sync + 'static)) -> bool {
    error
        .downcast_ref::<ClientError>()
        .is_some_and(ClientError::is_conflict)
}
