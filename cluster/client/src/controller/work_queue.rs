//! The queue between an informer and a controller's workers, with the semantics of client-go's
//! `util/workqueue` (its `Type`, `DelayingQueue` and `RateLimitingQueue` in one), plus a bound.
//!
//! - De-duplicating: a key added while it is already queued is queued once; a key added while a
//!   worker processes it is queued again when the worker calls [`WorkQueue::done`], so one key
//!   is never processed by two workers at once and no change is missed.
//! - Delaying: [`WorkQueue::add_after`] makes a key ready later; [`WorkQueue::add_rate_limited`]
//!   takes the delay from the queue's [`ControllerRateLimiter`].
//! - Bounded (not in client-go): the queue knows at most `max_keys` keys (queued, processing or
//!   waiting for a delay). Adding a key it does not know waits while it is full, which slows the
//!   producer down instead of growing memory. Adding a key it knows never waits, so a worker that
//!   requeues the key it is processing cannot deadlock against a full queue. The bound has no
//!   exception: a key enters the count only through an add that found room, and a delay ending
//!   or a `done` that requeues moves a key the queue already counts.
//! - Shutting down: [`WorkQueue::shut_down`] and [`WorkQueue::shut_down_with_drain`].
//!
//! Shutdown follows client-go's `Type` exactly where it can: after a shutdown, adds are refused
//! and keys waiting for a delay are dropped, but [`WorkQueue::get`] still hands out the keys that
//! were already queued (client-go's `Get` answers `shutdown` only once its queue is empty), and
//! [`WorkQueue::done`] still requeues a key that was added again while it was processed. Only
//! then does `get` answer `None`. [`WorkQueue::shut_down_with_drain`] waits until nothing is
//! processing *and* nothing is queued: client-go's waits only for processing, which can end in
//! the instant between a worker's `Done` and its next `Get` with keys still queued.
//!
//! Waiting uses [`tokio::sync::Notify`], each waiter enabling its notification before it looks at
//! the state, so no wakeup is lost between the look and the wait. Delayed keys need no background
//! task: [`WorkQueue::get`] moves the keys whose time has come and sleeps until the earliest of
//! the others. The state is under a `std::sync::Mutex` never held across an `.await`.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::num::NonZeroUsize;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::rate_limiter::ControllerRateLimiter;

/// The answer to an add once the queue is shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the work queue is shut down")]
pub struct QueueShutDown;

/// A de-duplicating, delaying, rate-limiting, bounded queue of keys (see the module comment).
/// Clones share one queue.
#[derive(Clone)]
pub struct WorkQueue {
    shared: Arc<SharedQueue>,
}

struct SharedQueue {
    state: Mutex<QueueState>,
    /// Wakes the workers waiting in `get`: a key became ready, an earlier delay was set, or the
    /// queue shut down.
    key_ready: Notify,
    /// Wakes the producers waiting for room: a key left the queue, or the queue shut down.
    room_freed: Notify,
    /// Wakes `shut_down_with_drain`: a worker finished a key.
    work_finished: Notify,
}

/// What the queue knows of one key. A key with nothing left to know is removed.
#[derive(Debug, Default, Clone, Copy)]
struct KeyEntry {
    /// The key needs processing: it is in the ready queue, or, if it is being processed, it was
    /// added again meanwhile and returns to the ready queue when done (client-go's dirty set).
    dirty: bool,
    /// A worker has the key (client-go's processing set).
    processing: bool,
    /// When the key's delay ends, with its place in the waiting order.
    waiting_until: Option<WaitingPlace>,
}

impl KeyEntry {
    fn is_forgettable(&self) -> bool {
        !self.dirty && !self.processing && self.waiting_until.is_none()
    }
}

/// A ready time and a sequence number that orders equal times by when they were set.
type WaitingPlace = (Instant, u64);

struct QueueState {
    max_keys: usize,
    /// Every key the queue knows; the bound counts these.
    keys: HashMap<String, KeyEntry>,
    /// The keys ready for a worker, oldest first: exactly the keys dirty and not processing.
    ready: VecDeque<String>,
    /// The keys waiting for a delay, earliest first.
    waiting: BTreeSet<(Instant, u64, String)>,
    next_waiting_sequence: u64,
    processing_count: usize,
    shut_down: bool,
    rate_limiter: ControllerRateLimiter,
    adds_total: u64,
    retries_total: u64,
}

/// What finishing a key changed, so `done` wakes only who cares.
#[derive(Debug, Default)]
struct Finished {
    was_processing: bool,
    requeued: bool,
    forgotten: bool,
}

impl QueueState {
    fn knows(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    fn is_full(&self) -> bool {
        self.keys.len() >= self.max_keys
    }

    /// client-go's `Add`: marks the key dirty and queues it unless it is queued or processing
    /// already. Answers whether the ready queue gained the key.
    fn add_now(&mut self, key: String) -> bool {
        let entry = self.keys.entry(key.clone()).or_default();
        if entry.dirty {
            return false;
        }
        entry.dirty = true;
        self.adds_total += 1;
        if entry.processing {
            return false;
        }
        self.ready.push_back(key);
        true
    }

    /// client-go's `AddAfter` for a positive delay: the key is added when `ready_at` comes; a
    /// key already waiting keeps the earlier time. Answers whether the waiting order changed.
    fn add_later(&mut self, key: String, ready_at: Instant) -> bool {
        let sequence = self.next_waiting_sequence;
        self.next_waiting_sequence += 1;
        let entry = self.keys.entry(key.clone()).or_default();
        if let Some((current_time, current_sequence)) = entry.waiting_until {
            if current_time <= ready_at {
                return false;
            }
            self.waiting
                .remove(&(current_time, current_sequence, key.clone()));
        }
        entry.waiting_until = Some((ready_at, sequence));
        self.waiting.insert((ready_at, sequence, key));
        true
    }

    /// Adds the waiting keys whose time has come. Answers whether the ready queue gained any.
    fn add_due_keys(&mut self, now: Instant) -> bool {
        let mut any_queued = false;
        while self.waiting.first().is_some_and(|(at, _, _)| *at <= now) {
            let Some((_, _, key)) = self.waiting.pop_first() else {
                break;
            };
            if let Some(entry) = self.keys.get_mut(&key) {
                entry.waiting_until = None;
            }
            any_queued |= self.add_now(key);
        }
        any_queued
    }

    fn earliest_ready_time(&self) -> Option<Instant> {
        self.waiting.first().map(|(at, _, _)| *at)
    }

    /// client-go's `Get` once a key is there: the oldest ready key, now processing.
    fn take_ready(&mut self) -> Option<String> {
        let key = self.ready.pop_front()?;
        match self.keys.get_mut(&key) {
            Some(entry) => {
                debug_assert!(entry.dirty && !entry.processing, "a ready key is idle");
                entry.dirty = false;
                entry.processing = true;
                self.processing_count += 1;
            }
            None => debug_assert!(false, "a ready key {key:?} is unknown"),
        }
        Some(key)
    }

    /// client-go's `Done`: the key is no longer processing, and is queued again if it was added
    /// meanwhile. A key that is not processing is left alone.
    fn finish(&mut self, key: &str) -> Finished {
        let Some(entry) = self.keys.get_mut(key) else {
            return Finished::default();
        };
        if !entry.processing {
            return Finished::default();
        }
        entry.processing = false;
        self.processing_count -= 1;
        let requeued = entry.dirty;
        let forgotten = entry.is_forgettable();
        if requeued {
            self.ready.push_back(key.to_string());
        }
        if forgotten {
            self.keys.remove(key);
        }
        Finished {
            was_processing: true,
            requeued,
            forgotten,
        }
    }

    /// Refuses further adds and drops the keys waiting for a delay, as client-go's delaying
    /// queue stops its waiting loop.
    fn shut_down(&mut self) {
        self.shut_down = true;
        for (_, _, key) in std::mem::take(&mut self.waiting) {
            if let Some(entry) = self.keys.get_mut(&key) {
                entry.waiting_until = None;
                if entry.is_forgettable() {
                    self.keys.remove(&key);
                }
            }
        }
    }

    fn is_drained(&self) -> bool {
        self.shut_down && self.processing_count == 0 && self.ready.is_empty()
    }

    /// Checks every invariant by walking all keys: too slow for each operation of a production
    /// queue, so it runs in this crate's tests only, after every change.
    fn check_invariants_in_tests(&self) {
        if !cfg!(test) {
            return;
        }
        assert!(self.keys.len() <= self.max_keys, "more keys than the bound");
        let distinct_ready: HashSet<&String> = self.ready.iter().collect();
        assert_eq!(
            distinct_ready.len(),
            self.ready.len(),
            "a key is queued twice"
        );
        for key in &self.ready {
            let entry = self.keys.get(key).expect("a queued key is known");
            assert!(entry.dirty, "a queued key is not dirty");
            assert!(!entry.processing, "a key is both queued and processing");
        }
        let dirty_idle = self
            .keys
            .values()
            .filter(|entry| entry.dirty && !entry.processing);
        assert_eq!(
            dirty_idle.count(),
            self.ready.len(),
            "a dirty idle key is not queued"
        );
        let processing = self.keys.values().filter(|entry| entry.processing);
        assert_eq!(processing.count(), self.processing_count);
        let waiting = self
            .keys
            .values()
            .filter(|entry| entry.waiting_until.is_some());
        assert_eq!(
            waiting.count(),
            self.waiting.len(),
            "the waiting order is stale"
        );
        assert!(self.keys.values().all(|entry| !entry.is_forgettable()));
    }
}

impl WorkQueue {
    /// An empty queue that knows at most `max_keys` keys at once and delays
    /// [`WorkQueue::add_rate_limited`] keys with `rate_limiter`.
    pub fn new(max_keys: NonZeroUsize, rate_limiter: ControllerRateLimiter) -> WorkQueue {
        let state = QueueState {
            max_keys: max_keys.get(),
            keys: HashMap::new(),
            ready: VecDeque::new(),
            waiting: BTreeSet::new(),
            next_waiting_sequence: 0,
            processing_count: 0,
            shut_down: false,
            rate_limiter,
            adds_total: 0,
            retries_total: 0,
        };
        WorkQueue {
            shared: Arc::new(SharedQueue {
                state: Mutex::new(state),
                key_ready: Notify::new(),
                room_freed: Notify::new(),
                work_finished: Notify::new(),
            }),
        }
    }

    /// Queues the key for a worker, unless it is queued already; a key being processed is
    /// queued again when done. Waits while the queue is full if the key is new to it.
    pub async fn add(&self, key: impl Into<String>) -> Result<(), QueueShutDown> {
        self.add_when_room(key.into(), Duration::ZERO).await
    }

    /// Queues the key once `delay` has passed (at once if it is zero); a key already waiting
    /// keeps the earlier of its two times. Waits while the queue is full if the key is new to
    /// it; the delay counts from when the key enters the queue. As in client-go, the delay is
    /// kept even if the key is also queued now, so the key is handed out again when it ends.
    pub async fn add_after(
        &self,
        key: impl Into<String>,
        delay: Duration,
    ) -> Result<(), QueueShutDown> {
        self.add_when_room(key.into(), delay).await
    }

    /// Queues the key after the delay the rate limiter gives it: a worker's retry of a key that
    /// failed. Counts one retry ([`WorkQueue::retries_total`]) and one failure of the key.
    pub async fn add_rate_limited(&self, key: impl Into<String>) -> Result<(), QueueShutDown> {
        let key = key.into();
        let delay = {
            let mut state = self.lock_state();
            if state.shut_down {
                return Err(QueueShutDown);
            }
            state.retries_total += 1;
            let now = Instant::now().into_std();
            state.rate_limiter.when(&key, now)
        };
        self.add_when_room(key, delay).await
    }

    /// Forgets the key's failures, so its next rate-limited delay is the shortest again; a
    /// worker calls it when the key succeeded.
    pub fn forget(&self, key: &str) {
        self.lock_state().rate_limiter.forget(key);
    }

    /// How many failures of the key the rate limiter counts (client-go's `NumRequeues`).
    pub fn failures(&self, key: &str) -> u32 {
        self.lock_state().rate_limiter.failures(key)
    }

    /// Adds the key now if the queue knows it or has room, else waits for room and tries again.
    async fn add_when_room(&self, key: String, delay: Duration) -> Result<(), QueueShutDown> {
        loop {
            let mut room_freed = pin!(self.shared.room_freed.notified());
            room_freed.as_mut().enable();
            if self.try_add(&key, delay)? {
                return Ok(());
            }
            room_freed.await;
        }
    }

    /// Adds the key unless it is new and the queue is full; answers whether it was added.
    fn try_add(&self, key: &str, delay: Duration) -> Result<bool, QueueShutDown> {
        let mut state = self.lock_state();
        if state.shut_down {
            return Err(QueueShutDown);
        }
        if !state.knows(key) && state.is_full() {
            return Ok(false);
        }
        let wake_workers = if delay.is_zero() {
            state.add_now(key.to_string())
        } else {
            state.add_later(key.to_string(), ready_time_after(delay))
        };
        debug_assert!(
            state.keys.len() <= state.max_keys,
            "an add went past the bound"
        );
        state.check_invariants_in_tests();
        drop(state);
        if wake_workers {
            self.shared.key_ready.notify_waiters();
        }
        Ok(true)
    }

    /// Waits for a ready key and hands it to the caller, who must call [`WorkQueue::done`] with
    /// it. `None` once the queue is shut down and holds no queued key: the worker should stop.
    pub async fn get(&self) -> Option<String> {
        loop {
            let mut key_ready = pin!(self.shared.key_ready.notified());
            key_ready.as_mut().enable();
            let next_ready_time = match self.try_take() {
                Ok(key) => return key,
                Err(next_ready_time) => next_ready_time,
            };
            match next_ready_time {
                Some(deadline) => {
                    tokio::select! {
                        _ = key_ready => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => key_ready.await,
            }
        }
    }

    /// `Ok` with what `get` answers (a key, or `None` when shut down with nothing queued), or
    /// `Err` with when the earliest waiting key becomes ready, if any key waits.
    fn try_take(&self) -> Result<Option<String>, Option<Instant>> {
        let mut state = self.lock_state();
        let any_due = state.add_due_keys(Instant::now());
        if let Some(key) = state.take_ready() {
            let more_ready = !state.ready.is_empty();
            state.check_invariants_in_tests();
            drop(state);
            // Keys that came due together may be more than this worker takes; tell the others.
            if any_due && more_ready {
                self.shared.key_ready.notify_waiters();
            }
            return Ok(Some(key));
        }
        if state.shut_down {
            return Ok(None);
        }
        Err(state.earliest_ready_time())
    }

    /// Ends the processing of a key [`WorkQueue::get`] handed out; if the key was added again
    /// meanwhile, it is queued again now. A key not being processed is ignored.
    pub fn done(&self, key: &str) {
        let finished = {
            let mut state = self.lock_state();
            let finished = state.finish(key);
            state.check_invariants_in_tests();
            finished
        };
        if finished.requeued {
            self.shared.key_ready.notify_waiters();
        }
        if finished.forgotten {
            self.shared.room_freed.notify_waiters();
        }
        if finished.was_processing {
            self.shared.work_finished.notify_waiters();
        }
    }

    /// Refuses further adds (they answer [`QueueShutDown`]) and drops the keys waiting for a
    /// delay. Keys already queued are still handed out by `get`, which answers `None` after.
    pub fn shut_down(&self) {
        {
            let mut state = self.lock_state();
            state.shut_down();
            state.check_invariants_in_tests();
        }
        self.shared.key_ready.notify_waiters();
        self.shared.room_freed.notify_waiters();
        self.shared.work_finished.notify_waiters();
    }

    /// Shuts down as [`WorkQueue::shut_down`], then waits until every queued key was handed out
    /// and every key handed out is done; `get` answers `None` after. Call it while workers still
    /// call `get`, or keys still queued are never taken and it waits forever.
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let mut work_finished = pin!(self.shared.work_finished.notified());
            work_finished.as_mut().enable();
            if self.lock_state().is_drained() {
                return;
            }
            work_finished.await;
        }
    }

    /// Whether [`WorkQueue::shut_down`] was called (client-go's `ShuttingDown`).
    pub fn is_shut_down(&self) -> bool {
        self.lock_state().shut_down
    }

    /// How many keys are ready for a worker, those whose delay has just ended included
    /// (client-go's `Len`); keys processing or still waiting are not counted.
    pub fn len(&self) -> usize {
        let (ready, any_due) = {
            let mut state = self.lock_state();
            let any_due = state.add_due_keys(Instant::now());
            state.check_invariants_in_tests();
            (state.ready.len(), any_due)
        };
        if any_due {
            self.shared.key_ready.notify_waiters();
        }
        ready
    }

    /// Whether no key is ready for a worker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many distinct keys the queue knows (queued, processing or waiting): what the bound
    /// counts.
    pub fn known_keys(&self) -> usize {
        self.lock_state().keys.len()
    }

    /// The most keys the queue knows at once.
    pub fn max_keys(&self) -> usize {
        self.lock_state().max_keys
    }

    /// How many keys workers are processing.
    pub fn processing(&self) -> usize {
        self.lock_state().processing_count
    }

    /// How many adds put a key in need of processing (an add absorbed by de-duplication is not
    /// counted; a delayed key is counted when its delay ends), as client-go's adds metric.
    pub fn adds_total(&self) -> u64 {
        self.lock_state().adds_total
    }

    /// How many times [`WorkQueue::add_rate_limited`] was called on the open queue.
    pub fn retries_total(&self) -> u64 {
        self.lock_state().retries_total
    }

    /// The state, even if a panic poisoned the lock: the only code that can panic while it is
    /// held is an invariant check, which fails only on a bug in this file, and carrying on is
    /// better than making that one failure a panic in every worker and producer.
    fn lock_state(&self) -> MutexGuard<'_, QueueState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// When a key added now with this delay becomes ready. A delay too long for the clock means
/// "not in this process's lifetime", which a century stands for.
fn ready_time_after(delay: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(delay)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now)
}

impl fmt::Debug for WorkQueue {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock_state();
        formatter
            .debug_struct("WorkQueue")
            .field("ready", &state.ready.len())
            .field("waiting", &state.waiting.len())
            .field("processing", &state.processing_count)
            .field("known_keys", &state.keys.len())
            .field("max_keys", &state.max_keys)
            .field("shut_down", &state.shut_down)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use tokio::time::timeout;

    /// Longer than any delay in these tests; with the paused clock it costs no real time.
    const PATIENCE: Duration = Duration::from_secs(60);

    fn queue_of_at_most(max_keys: usize) -> WorkQueue {
        let max_keys = NonZeroUsize::new(max_keys).expect("a positive bound");
        WorkQueue::new(max_keys, ControllerRateLimiter::default())
    }

    fn milliseconds(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    /// Lets spawned tasks run until they wait again (the paused clock moves on by 1 ms).
    async fn let_tasks_run() {
        tokio::time::sleep(milliseconds(1)).await;
    }

    /// Asserts that `get` has nothing to hand out now (it waits, on the paused clock).
    async fn assert_nothing_to_get(queue: &WorkQueue) {
        assert!(timeout(PATIENCE, queue.get()).await.is_err());
    }

    fn spawn_get(queue: &WorkQueue) -> tokio::task::JoinHandle<Option<String>> {
        let queue = queue.clone();
        tokio::spawn(async move { queue.get().await })
    }

    #[test]
    fn the_queue_and_its_futures_can_move_between_threads() {
        fn assert_send_and_sync<T: Send + Sync>(_: &T) {}
        fn assert_send<T: Send>(_: T) {}
        let queue = queue_of_at_most(1);
        assert_send_and_sync(&queue);
        assert_send(queue.add("key"));
        assert_send(queue.add_rate_limited("key"));
        assert_send(queue.get());
        assert_send(queue.shut_down_with_drain());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_twice_is_handed_out_once() {
        let queue = queue_of_at_most(10);
        queue.add("a").await.expect("open");
        queue.add("a").await.expect("open");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.adds_total(), 1);
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert_nothing_to_get(&queue).await;
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_handed_out_in_the_order_they_were_added() {
        let queue = queue_of_at_most(10);
        for key in ["c", "a", "b", "a"] {
            queue.add(key).await.expect("open");
        }
        for expected in ["c", "a", "b"] {
            assert_eq!(queue.get().await.as_deref(), Some(expected));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_during_processing_comes_back_after_done_and_not_before() {
        let queue = queue_of_at_most(10);
        queue.add("a").await.expect("open");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        queue.add("a").await.expect("open");
        queue.add("a").await.expect("open");
        assert_eq!(queue.len(), 0, "a processing key is not queued");
        assert_eq!(queue.processing(), 1);
        assert_nothing_to_get(&queue).await;

        queue.done("a");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        queue.done("a");
        assert_eq!(
            queue.known_keys(),
            0,
            "a done key with no add pending is forgotten"
        );
        assert_eq!(queue.adds_total(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_is_never_handed_to_two_getters_at_once() {
        let queue = queue_of_at_most(10);
        let first = spawn_get(&queue);
        let second = spawn_get(&queue);
        queue.add("a").await.expect("open");
        let_tasks_run().await;
        assert_eq!(
            usize::from(first.is_finished()) + usize::from(second.is_finished()),
            1
        );

        // Added again while the first getter has it: the other getter still waits.
        queue.add("a").await.expect("open");
        let_tasks_run().await;
        assert_eq!(
            usize::from(first.is_finished()) + usize::from(second.is_finished()),
            1
        );
        assert_eq!(queue.processing(), 1);

        queue.done("a");
        let_tasks_run().await;
        assert_eq!(first.await.expect("joined").as_deref(), Some("a"));
        assert_eq!(second.await.expect("joined").as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_are_handed_out_in_order_of_ready_time() {
        let queue = queue_of_at_most(10);
        let start = Instant::now();
        queue.add_after("b", milliseconds(20)).await.expect("open");
        queue.add_after("a", milliseconds(10)).await.expect("open");
        queue.add_after("c", milliseconds(30)).await.expect("open");
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.known_keys(), 3);
        for (expected, after) in [("a", 10), ("b", 20), ("c", 30)] {
            assert_eq!(queue.get().await.as_deref(), Some(expected));
            assert_eq!(start.elapsed(), milliseconds(after));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_key_keeps_the_earlier_of_its_ready_times() {
        let queue = queue_of_at_most(10);
        let start = Instant::now();
        queue.add_after("a", milliseconds(50)).await.expect("open");
        queue.add_after("a", milliseconds(10)).await.expect("open");
        queue.add_after("a", milliseconds(100)).await.expect("open");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert_eq!(start.elapsed(), milliseconds(10));
        queue.done("a");
        assert_eq!(queue.known_keys(), 0, "the later times were not kept");
        assert_nothing_to_get(&queue).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_getter_wakes_for_a_key_with_an_earlier_ready_time() {
        let queue = queue_of_at_most(10);
        queue
            .add_after("late", milliseconds(100))
            .await
            .expect("open");
        let getter = spawn_get(&queue);
        let_tasks_run().await;
        let start = Instant::now();
        queue
            .add_after("early", milliseconds(10))
            .await
            .expect("open");
        assert_eq!(getter.await.expect("joined").as_deref(), Some("early"));
        assert_eq!(start.elapsed(), milliseconds(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_delay_queues_the_key_at_once() {
        let queue = queue_of_at_most(10);
        queue.add_after("a", Duration::ZERO).await.expect("open");
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_requeues_wait_5_10_20_milliseconds_and_forget_resets() {
        let queue = queue_of_at_most(10);
        for expected_delay in [5, 10, 20, 40] {
            let start = Instant::now();
            queue.add_rate_limited("a").await.expect("open");
            assert_eq!(queue.get().await.as_deref(), Some("a"));
            assert_eq!(start.elapsed(), milliseconds(expected_delay));
            queue.done("a");
        }
        assert_eq!(queue.failures("a"), 4);
        assert_eq!(queue.retries_total(), 4);

        queue.forget("a");
        assert_eq!(queue.failures("a"), 0);
        let start = Instant::now();
        queue.add_rate_limited("a").await.expect("open");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert_eq!(start.elapsed(), milliseconds(5));
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_keys_beyond_the_burst_wait_for_the_token_bucket() {
        let queue = queue_of_at_most(200);
        for index in 0..102 {
            queue
                .add_rate_limited(format!("key-{index}"))
                .await
                .expect("open");
        }
        // 100 keys fit the burst and wait 5 ms; the next two wait 100 ms and 200 ms.
        let start = Instant::now();
        for _ in 0..100 {
            queue.get().await.expect("a key");
        }
        assert_eq!(start.elapsed(), milliseconds(5));
        assert_eq!(queue.get().await.as_deref(), Some("key-100"));
        assert_eq!(start.elapsed(), milliseconds(100));
        assert_eq!(queue.get().await.as_deref(), Some("key-101"));
        assert_eq!(start.elapsed(), milliseconds(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_key_waits_while_the_queue_is_full_and_enters_after_a_done() {
        let queue = queue_of_at_most(2);
        queue.add("a").await.expect("open");
        queue.add_after("b", milliseconds(10)).await.expect("open");
        let mut add_c = pin!(queue.add("c"));
        assert!(timeout(PATIENCE, add_c.as_mut()).await.is_err(), "full");

        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert!(
            timeout(PATIENCE, add_c.as_mut()).await.is_err(),
            "a processing key still counts"
        );
        assert_eq!(queue.known_keys(), 2);

        queue.done("a");
        assert_eq!(timeout(PATIENCE, add_c.as_mut()).await, Ok(Ok(())));
        assert_eq!(queue.known_keys(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_known_key_is_added_at_once_while_the_queue_is_full() {
        let queue = queue_of_at_most(1);
        queue.add("a").await.expect("open");
        assert_eq!(queue.add("a").now_or_never(), Some(Ok(())), "queued");
        assert_eq!(queue.get().await.as_deref(), Some("a"));

        // The worker's requeue paths, while it holds the key of a full queue.
        assert_eq!(queue.add("a").now_or_never(), Some(Ok(())));
        let add_after = queue.add_after("a", milliseconds(10));
        assert_eq!(add_after.now_or_never(), Some(Ok(())));
        assert_eq!(queue.add_rate_limited("a").now_or_never(), Some(Ok(())));
        assert_eq!(queue.known_keys(), 1);

        // Done requeues it (added during processing); its delay, 5 ms now, brings it back again.
        queue.done("a");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        queue.done("a");
        let start = Instant::now();
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert!(start.elapsed() <= milliseconds(5));
        queue.done("a");
        assert_eq!(queue.known_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_refuses_adds_drops_delays_and_get_answers_none_after_the_queued_keys() {
        let queue = queue_of_at_most(10);
        queue.add("a").await.expect("open");
        queue.add("b").await.expect("open");
        queue.add_after("c", milliseconds(10)).await.expect("open");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        queue.add("a").await.expect("open");

        queue.shut_down();
        assert!(queue.is_shut_down());
        assert_eq!(queue.add("d").await, Err(QueueShutDown));
        assert_eq!(queue.add("a").await, Err(QueueShutDown));
        assert_eq!(
            queue.add_after("e", milliseconds(1)).await,
            Err(QueueShutDown)
        );
        assert_eq!(queue.add_rate_limited("f").await, Err(QueueShutDown));
        assert_eq!(queue.retries_total(), 0);
        assert_eq!(queue.known_keys(), 2, "the waiting key c is dropped");

        // As client-go: queued keys are still handed out, and a key added during processing is
        // queued again by done.
        assert_eq!(queue.get().await.as_deref(), Some("b"));
        queue.done("a");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert_eq!(queue.get().now_or_never(), Some(None));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_waiting_getters_and_producers() {
        let queue = queue_of_at_most(1);
        queue
            .add_after("a", milliseconds(1000))
            .await
            .expect("open");
        let getter = spawn_get(&queue);
        let producer = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.add("b").await })
        };
        let_tasks_run().await;
        assert!(!getter.is_finished() && !producer.is_finished());

        queue.shut_down();
        assert_eq!(getter.await.expect("joined"), None);
        assert_eq!(producer.await.expect("joined"), Err(QueueShutDown));
        assert_eq!(queue.known_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_until_every_key_handed_out_is_done() {
        let queue = queue_of_at_most(10);
        queue.add("a").await.expect("open");
        queue.add("b").await.expect("open");
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        let drain = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.shut_down_with_drain().await })
        };
        let_tasks_run().await;
        assert!(queue.is_shut_down());
        assert_eq!(queue.add("c").await, Err(QueueShutDown));

        queue.done("a");
        let_tasks_run().await;
        assert!(!drain.is_finished(), "b is still queued");
        assert_eq!(queue.get().await.as_deref(), Some("b"));
        let_tasks_run().await;
        assert!(!drain.is_finished(), "b is processing");

        queue.done("b");
        timeout(PATIENCE, drain)
            .await
            .expect("drained")
            .expect("joined");
        assert_eq!(queue.get().now_or_never(), Some(None));
    }

    #[tokio::test(start_paused = true)]
    async fn done_for_a_key_not_processing_changes_nothing() {
        let queue = queue_of_at_most(10);
        queue.done("unknown");
        queue.add("a").await.expect("open");
        queue.done("a");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.processing(), 0);
    }
}
