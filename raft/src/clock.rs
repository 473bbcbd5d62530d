//! The clock a member reads: tokio's, or in a deterministic simulation (issue 37) a clock of the
//! member's own that may run slow or jump ahead while the others keep time.
//!
//! Every instant a member compares (election and heartbeat timers, lease deadlines, request
//! deadlines, watch bookmarks, compaction periods) is a [`Instant`] of this module, a type of its
//! own so that member time can never be mixed with the runtime's by accident: the compiler
//! refuses `tokio::time::sleep_until(member_instant)`. In production [`Instant::now`] is tokio's
//! `Instant::now` behind one relaxed load, and the timers are tokio's.
//!
//! A simulation gives each member a [`MemberClock`]: an affine function of the runtime's clock
//! (an anchor and a rate) that the simulator can slow down or move forward. Which member's code
//! is running is known in one of two ways. A task belongs to the member whose code spawned it:
//! the simulation's runtime calls [`task_spawned`] and [`task_finished`] from tokio's task hooks,
//! so every task a member starts, and every task those start, reads that member's clock. And a
//! member's code that runs inside another task (a peer call's handler, which the simulated network
//! runs in the caller's task; a client's request, which the simulator sends from its own task)
//! runs under [`on_member_clock`], which wins over the task's member.
//!
//! Timers on a member clock: a sleep converts its deadline to the runtime's clock when armed, and
//! every change of the member's clock (a new rate, a jump) wakes it to convert again, so it ends
//! when the member's clock reaches its deadline, as a kernel timer on a clock that steps or slews
//! does: never before, and at once when a jump passes it.
//!
//! Not on a member clock: the wall clock (`SystemTime`, read only by auth tokens' expiry), and
//! latencies measured for metrics and logs with `std::time::Instant`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

/// Whether any member clock was ever made in this process. Until one is, [`Instant::now`] and
/// the timers are tokio's without a thread-local lookup.
static MEMBER_CLOCKS_IN_USE: AtomicBool = AtomicBool::new(false);

/// How far ahead a sleep with no representable deadline is put (tokio does the same).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The slowest a member clock may run, in millionths of the runtime's rate: 1/1000. Slower would
/// make a member's one-second timer wait over a quarter of an hour of simulated time.
pub const SLOWEST_RATE_PER_MILLION: u64 = 1_000;

/// The fastest a member clock may run, in millionths of the runtime's rate: 1000 times.
pub const FASTEST_RATE_PER_MILLION: u64 = 1_000_000_000;

/// How many times one poll of a sleep re-arms its timer before yielding (each re-arm follows a
/// change of its clock; more than two in one poll cannot happen, since the second arming uses
/// the clock as it is now).
const MAX_REARMS_PER_POLL: usize = 4;

/// An instant on the clock of the member whose code reads it (see the module's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(tokio::time::Instant);

impl Instant {
    /// Now, on the clock of the member whose code is running (tokio's clock outside a
    /// simulation).
    pub fn now() -> Instant {
        match current_member_clock() {
            Some(clock) => clock.now(),
            None => Instant(tokio::time::Instant::now()),
        }
    }

    /// How long ago this instant was, on the same clock; zero if it is in the future.
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(*self)
    }

    /// The time from `earlier` to this instant; zero if `earlier` is later (as tokio's).
    pub fn duration_since(&self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }

    /// The time from `earlier` to this instant; zero if `earlier` is later.
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }

    /// This instant moved `duration` later, or `None` past what an instant can hold.
    pub fn checked_add(&self, duration: Duration) -> Option<Instant> {
        self.0.checked_add(duration).map(Instant)
    }

    /// This instant moved `duration` later, or far in the future if it cannot hold that.
    fn saturating_add(&self, duration: Duration) -> Instant {
        self.checked_add(duration)
            .or_else(|| self.checked_add(FAR_FUTURE))
            .unwrap_or(*self)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    fn add(self, duration: Duration) -> Instant {
        Instant(self.0 + duration)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, duration: Duration) {
        self.0 += duration;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    fn sub(self, duration: Duration) -> Instant {
        Instant(self.0 - duration)
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, duration: Duration) {
        self.0 -= duration;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;

    /// Saturating, as `std::time::Instant`'s subtraction is.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl openraft::Instant for Instant {
    fn now() -> Self {
        Instant::now()
    }
}

/// One member's clock in a simulation: in step with the runtime's clock until the simulator
/// slows it or moves it forward. Clones share the clock.
#[derive(Clone, Debug)]
pub struct MemberClock {
    state: Arc<Mutex<ClockState>>,
    /// Wakes the clock's sleeps on every change, so that each converts its deadline again.
    changed: Arc<Notify>,
}

/// The member's time is `member_anchor + (runtime now - runtime_anchor) * rate`; every change
/// re-anchors at the current instant, so the member's time never goes back.
#[derive(Debug)]
struct ClockState {
    runtime_anchor: tokio::time::Instant,
    member_anchor: tokio::time::Instant,
    rate_per_million: u64,
}

impl Default for MemberClock {
    fn default() -> Self {
        MemberClock::new()
    }
}

impl MemberClock {
    /// A clock in step with the runtime's.
    pub fn new() -> MemberClock {
        MEMBER_CLOCKS_IN_USE.store(true, Ordering::Relaxed);
        let now = tokio::time::Instant::now();
        MemberClock {
            state: Arc::new(Mutex::new(ClockState {
                runtime_anchor: now,
                member_anchor: now,
                rate_per_million: 1_000_000,
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    /// Now on this clock.
    pub fn now(&self) -> Instant {
        Instant(self.state().member_time_at(tokio::time::Instant::now()))
    }

    /// From now on this clock runs at `rate_per_million` millionths of the runtime's rate
    /// (1,000,000: in step; 500,000: half as fast).
    pub fn set_rate(&self, rate_per_million: u64) {
        assert!(
            (SLOWEST_RATE_PER_MILLION..=FASTEST_RATE_PER_MILLION).contains(&rate_per_million),
            "a member clock's rate must be between 1/1000 and 1000 times the runtime's"
        );
        self.change(|state| state.rate_per_million = rate_per_million);
    }

    /// Moves this clock `by` forward at once, as a clock source that steps does.
    pub fn jump(&self, by: Duration) {
        self.change(|state| state.member_anchor += by);
    }

    /// Re-anchors the clock at this instant, applies `change`, and wakes the clock's sleeps.
    fn change(&self, change: impl FnOnce(&mut ClockState)) {
        let mut state = self.state();
        state.reanchor(tokio::time::Instant::now());
        change(&mut state);
        drop(state);
        self.changed.notify_waiters();
    }

    /// The runtime instant at which this clock reaches `deadline` at its current rate.
    fn runtime_instant_for(&self, deadline: Instant) -> tokio::time::Instant {
        self.state().runtime_time_for(deadline.0)
    }

    fn state(&self) -> MutexGuard<'_, ClockState> {
        // Each holder makes one consistent change, so a poisoned clock is still whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ClockState {
    fn member_time_at(&self, runtime_now: tokio::time::Instant) -> tokio::time::Instant {
        let elapsed = runtime_now.saturating_duration_since(self.runtime_anchor);
        let scaled = elapsed.as_nanos() * u128::from(self.rate_per_million) / 1_000_000;
        self.member_anchor + nanos(scaled)
    }

    /// The earliest runtime instant at which this clock shows `deadline` or later (rounded up,
    /// so a timer armed for it never fires before).
    fn runtime_time_for(&self, deadline: tokio::time::Instant) -> tokio::time::Instant {
        let ahead = deadline.saturating_duration_since(self.member_anchor);
        let rate = u128::from(self.rate_per_million);
        let runtime_nanos = (ahead.as_nanos() * 1_000_000).div_ceil(rate);
        self.runtime_anchor
            .checked_add(nanos(runtime_nanos))
            .unwrap_or(self.runtime_anchor + FAR_FUTURE)
    }

    fn reanchor(&mut self, runtime_now: tokio::time::Instant) {
        let member_now = self.member_time_at(runtime_now);
        assert!(member_now >= self.member_anchor, "a member clock went back");
        self.member_anchor = member_now;
        self.runtime_anchor = runtime_now;
    }
}

/// A nanosecond count as a duration, capped at what one can hold.
fn nanos(count: u128) -> Duration {
    let seconds = u64::try_from(count / 1_000_000_000).unwrap_or(u64::MAX);
    let rest = u32::try_from(count % 1_000_000_000).unwrap_or(0);
    Duration::new(seconds, rest)
}

thread_local! {
    /// The member clock of each task of this thread's runtime that belongs to a member.
    static TASK_CLOCKS: RefCell<HashMap<tokio::task::Id, MemberClock>> =
        RefCell::new(HashMap::new());
    /// The member clock of the code `on_member_clock` is polling now, if any.
    static SCOPED_CLOCK: RefCell<Option<MemberClock>> = const { RefCell::new(None) };
}

/// The member clock of the code running now, if it runs on one.
fn current_member_clock() -> Option<MemberClock> {
    if !MEMBER_CLOCKS_IN_USE.load(Ordering::Relaxed) {
        return None;
    }
    if let Some(scoped) = SCOPED_CLOCK.with(|scoped| scoped.borrow().clone()) {
        return Some(scoped);
    }
    let task = tokio::task::try_id()?;
    TASK_CLOCKS.with(|clocks| clocks.borrow().get(&task).cloned())
}

/// Called by a simulation runtime's spawn hook, in the spawning code: the new task `task` gets
/// the clock of the code that spawned it, if that runs on a member clock.
pub fn task_spawned(task: tokio::task::Id) {
    if let Some(clock) = current_member_clock() {
        TASK_CLOCKS.with(|clocks| clocks.borrow_mut().insert(task, clock));
    }
}

/// Called by a simulation runtime's termination hook: task `task` ended.
pub fn task_finished(task: tokio::task::Id) {
    if MEMBER_CLOCKS_IN_USE.load(Ordering::Relaxed) {
        TASK_CLOCKS.with(|clocks| clocks.borrow_mut().remove(&task));
    }
}

pin_project! {
    /// A future whose code, and every task it spawns, runs on a member's clock.
    pub struct OnMemberClock<F> {
        clock: MemberClock,
        #[pin]
        future: F,
    }
}

/// Runs `future` on `clock` (see the module's comment): for a member's code that runs in a task
/// that is not the member's.
pub fn on_member_clock<F: Future>(clock: MemberClock, future: F) -> OnMemberClock<F> {
    OnMemberClock { clock, future }
}

impl<F: Future> Future for OnMemberClock<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _restore = ScopedClockGuard::enter(this.clock.clone());
        this.future.poll(context)
    }
}

/// Puts the previous scoped clock back when dropped, a panic included.
struct ScopedClockGuard {
    previous: Option<MemberClock>,
}

impl ScopedClockGuard {
    fn enter(clock: MemberClock) -> ScopedClockGuard {
        let previous = SCOPED_CLOCK.with(|scoped| scoped.borrow_mut().replace(clock));
        ScopedClockGuard { previous }
    }
}

impl Drop for ScopedClockGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SCOPED_CLOCK.with(|scoped| *scoped.borrow_mut() = previous);
    }
}

pin_project! {
    /// A sleep until an instant on the sleeping member's clock.
    pub struct Sleep {
        #[pin]
        timer: tokio::time::Sleep,
        deadline: Instant,
        clock: Option<MemberClock>,
        // Registered for the member clock's next change once polled.
        #[pin]
        clock_changed: Option<OwnedNotified>,
    }
}

/// Sleeps until `deadline` on the clock of the code that calls it. On a member clock the timer's
/// deadline is converted to the runtime's at the first poll (see `Sleep::poll`).
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        timer: tokio::time::sleep_until(deadline.0),
        deadline,
        clock: current_member_clock(),
        clock_changed: None,
    }
}

/// Sleeps for `duration` on the clock of the code that calls it.
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(Instant::now().saturating_add(duration))
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let Some(clock) = this.clock.as_ref() else {
            return this.timer.poll(context);
        };
        for _ in 0..MAX_REARMS_PER_POLL {
            // Registered before the deadline is converted, so no change falls between the two.
            if this.clock_changed.is_none() {
                this.clock_changed
                    .set(Some(clock.changed.clone().notified_owned()));
                if let Some(changed) = this.clock_changed.as_mut().as_pin_mut() {
                    changed.enable();
                }
                let runtime_deadline = clock.runtime_instant_for(*this.deadline);
                this.timer.as_mut().reset(runtime_deadline);
            }
            if clock.now() >= *this.deadline {
                return Poll::Ready(());
            }
            let changed = this.clock_changed.as_mut().as_pin_mut();
            if changed.is_some_and(|changed| changed.poll(context).is_ready()) {
                // A new rate or a jump: convert the deadline again.
                this.clock_changed.set(None);
                continue;
            }
            ready!(this.timer.as_mut().poll(context));
            // Fired, but the clock is short of the deadline: the rate fell after the conversion
            // and the change is on its way; convert again.
            this.clock_changed.set(None);
        }
        context.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A deadline passed before the awaited future finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed;

pin_project! {
    /// A future with a deadline on its member's clock.
    pub struct Timeout<F> {
        #[pin]
        future: F,
        #[pin]
        sleep: Sleep,
    }
}

/// `future`, or `Err(Elapsed)` if it has not finished `duration` from now.
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        sleep: sleep(duration),
    }
}

/// `future`, or `Err(Elapsed)` if it has not finished by `deadline`.
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        sleep: sleep_until(deadline),
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(context) {
            return Poll::Ready(Ok(output));
        }
        this.sleep.poll(context).map(|()| Err(Elapsed))
    }
}

/// Ticks every `period` on a member's clock. A tick that comes late delays the ones after it
/// (tokio's `MissedTickBehavior::Delay`, the only behaviour members use).
#[derive(Debug)]
pub struct Interval {
    next_tick: Instant,
    period: Duration,
}

/// Ticks now, then every `period`.
pub fn interval(period: Duration) -> Interval {
    interval_at(Instant::now(), period)
}

/// Ticks at `start`, then every `period`.
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    assert!(!period.is_zero(), "an interval's period must be positive");
    Interval {
        next_tick: start,
        period,
    }
}

impl Interval {
    /// Waits for the next tick and answers when it was due. Cancel-safe: a tick awaited and
    /// dropped before it came is still the next one.
    pub async fn tick(&mut self) -> Instant {
        sleep_until(self.next_tick).await;
        let due = self.next_tick;
        self.next_tick = Instant::now().saturating_add(self.period);
        due
    }
}

#[cfg(test)]
mod tests;
