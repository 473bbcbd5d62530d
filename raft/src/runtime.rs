//! The async runtime openraft runs on: tokio, exactly as openraft's own `TokioRuntime`, except
//! for where openraft's randomness comes from.
//!
//! openraft draws random numbers in three places (each election timeout, and the phase of a
//! member's first tick), always through `AsyncRuntime::thread_rng`. In production that is the
//! operating system's thread-local generator, as in `TokioRuntime`. A deterministic simulation
//! (issue 37) must draw them from its seed instead, so that the same seed elects the same
//! leaders at the same moments: [`seed_this_thread`] gives the calling thread a seeded
//! generator, which every later draw on that thread uses until [`unseed_this_thread`].
//! Time is the member's (`clock.rs`): openraft's instants, sleeps and timeouts are the member
//! clock's, which are tokio's outside a simulation and may run slow or jump in one. Everything
//! else (tasks, channels) is tokio's, delegated without a change, so the production path pays one
//! thread-local check per election timeout and one relaxed load per clock reading.
//!
//! The second seam is where blocking work runs. Storage calls (redb reads, the raft log's writes
//! and fsyncs) run on tokio's blocking pool through [`offload`], and the raft log's writer has a
//! thread of its own: in production both keep the runtime's workers free. Another thread finishes
//! whenever the operating system lets it, which a simulation cannot replay, so a thread marked by
//! [`run_blocking_work_inline_on_this_thread`] runs that work on itself instead: `offload` calls
//! the work at once, and a log writer started there runs as a task of the thread's runtime.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};

use crate::clock;
use rand::rngs::{StdRng, ThreadRng};
use rand::{SeedableRng, TryRng};

thread_local! {
    /// The seeded generator of this thread, when a simulation has set one.
    static SEEDED_GENERATOR: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// From now on, the randomness openraft draws on this thread comes from a generator seeded with
/// `seed`: the same seed gives the same draws in the same order.
pub fn seed_this_thread(seed: u64) {
    SEEDED_GENERATOR.with(|generator| *generator.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Back to the operating system's randomness on this thread.
pub fn unseed_this_thread() {
    SEEDED_GENERATOR.with(|generator| *generator.borrow_mut() = None);
}

/// Whether this thread draws from a seeded generator.
pub fn this_thread_is_seeded() -> bool {
    SEEDED_GENERATOR.with(|generator| generator.borrow().is_some())
}

thread_local! {
    /// Whether blocking work started on this thread runs on it (see the module's comment).
    static BLOCKING_WORK_RUNS_INLINE: Cell<bool> = const { Cell::new(false) };
}

/// From now on, blocking work started on this thread ([`offload`], a new raft log writer) runs on
/// this thread, in the order it was started, instead of on other threads. For a simulation whose
/// members all run on one single-threaded runtime; a runtime with several workers would run some
/// of its tasks elsewhere, where the mark does not reach.
pub fn run_blocking_work_inline_on_this_thread(inline: bool) {
    BLOCKING_WORK_RUNS_INLINE.with(|runs_inline| runs_inline.set(inline));
}

/// Whether blocking work started on this thread runs on it.
pub fn blocking_work_runs_inline() -> bool {
    BLOCKING_WORK_RUNS_INLINE.with(Cell::get)
}

/// Runs blocking `work` off the async runtime's workers, on tokio's blocking pool, as
/// `tokio::task::spawn_blocking` does; on a thread marked by
/// [`run_blocking_work_inline_on_this_thread`], runs it at once on this thread. Either way the
/// work starts before the answer is awaited, and a panic in it fails the await on the pool and
/// unwinds the caller inline.
pub fn offload<T, F>(work: F) -> Offloaded<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if blocking_work_runs_inline() {
        Offloaded::Done(Some(work()))
    } else {
        Offloaded::OnThePool(tokio::task::spawn_blocking(work))
    }
}

/// The answer of [`offload`]: a future of the work's result.
#[derive(Debug)]
pub enum Offloaded<T> {
    /// Running on tokio's blocking pool.
    OnThePool(tokio::task::JoinHandle<T>),
    /// Already done on this thread; `None` once the answer was taken.
    Done(Option<T>),
}

// The answer is only ever moved out, never pinned in place, so the future may move.
impl<T> Unpin for Offloaded<T> {}

impl<T> Future for Offloaded<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Offloaded::OnThePool(handle) => Pin::new(handle).poll(context),
            Offloaded::Done(answer) => Poll::Ready(Ok(answer
                .take()
                .expect("an offloaded answer is taken once"))),
        }
    }
}

/// The longest a simulated disk takes to carry out one command of the raft log's writer.
const MAX_SIMULATED_DISK_LATENCY_MICROS: u64 = 2_000;

/// How long the next write of a simulated raft log takes, drawn from this thread's seeded
/// generator (zero on an unseeded thread). A simulation's file operations take no simulated time
/// of their own; without this, a leader's own write would always finish before its followers
/// even received the entries, and a crash could never find the leader's log behind theirs, which
/// a real disk's fsync makes common.
pub(crate) fn simulated_disk_latency() -> Duration {
    RaftRandomness::from_seed(|seeded| {
        let Ok(drawn) = seeded.try_next_u64();
        Duration::from_micros(drawn % (MAX_SIMULATED_DISK_LATENCY_MICROS + 1))
    })
    .unwrap_or_default()
}

/// openraft's runtime for revkv: [`TokioRuntime`] with the seedable randomness above.
#[derive(Debug)]
pub struct RevkvRuntime(TokioRuntime);

/// The generator `RevkvRuntime::thread_rng` hands out: the thread's seeded generator when it
/// has one at the moment of each draw, the operating system's otherwise.
#[derive(Debug)]
pub struct RaftRandomness {
    operating_system: ThreadRng,
}

impl RaftRandomness {
    /// Runs `draw` on the seeded generator when this thread has one.
    fn from_seed<T>(draw: impl FnOnce(&mut StdRng) -> T) -> Option<T> {
        SEEDED_GENERATOR.with(|generator| generator.borrow_mut().as_mut().map(draw))
    }
}

impl TryRng for RaftRandomness {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        match Self::from_seed(|seeded| seeded.try_next_u32()) {
            Some(drawn) => drawn,
            None => self.operating_system.try_next_u32(),
        }
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        match Self::from_seed(|seeded| seeded.try_next_u64()) {
            Some(drawn) => drawn,
            None => self.operating_system.try_next_u64(),
        }
    }

    fn try_fill_bytes(&mut self, destination: &mut [u8]) -> Result<(), Infallible> {
        match Self::from_seed(|seeded| seeded.try_fill_bytes(destination)) {
            Some(filled) => filled,
            None => self.operating_system.try_fill_bytes(destination),
        }
    }
}

impl AsyncRuntime for RevkvRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = clock::Sleep;
    type Instant = clock::Instant;
    type TimeoutError = clock::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = clock::Timeout<T>;
    type ThreadLocalRng = RaftRandomness;
    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    #[inline]
    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    #[inline]
    fn sleep(duration: Duration) -> Self::Sleep {
        clock::sleep(duration)
    }

    #[inline]
    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        clock::sleep_until(deadline)
    }

    #[inline]
    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        clock::timeout(duration, future)
    }

    #[inline]
    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        clock::timeout_at(deadline, future)
    }

    #[inline]
    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    #[inline]
    fn thread_rng() -> Self::ThreadLocalRng {
        RaftRandomness {
            operating_system: rand::rng(),
        }
    }

    fn new(threads: usize) -> Self {
        RevkvRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests;
