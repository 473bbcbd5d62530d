//! The member clocks' arithmetic, scopes, inheritance through spawns and timers, on tokio's
//! paused clock.

use std::time::Duration;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

/// A paused single-threaded runtime whose spawns inherit member clocks, as a simulation's does.
fn paused_runtime() -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    #[cfg(tokio_unstable)]
    builder
        .on_task_spawn(|task| task_spawned(task.id()))
        .on_task_terminate(|task| task_finished(task.id()));
    builder.build().unwrap()
}

fn runtime_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

#[test]
fn outside_a_member_the_clock_is_the_runtimes() {
    paused_runtime().block_on(async {
        let _someone_elses = MemberClock::new();
        let start = runtime_now();
        assert_eq!(Instant::now().0, start);
        sleep(SECOND).await;
        assert_eq!(runtime_now() - start, SECOND);
        assert_eq!(Instant::now().0, runtime_now());
    });
}

#[test]
fn a_slow_member_clock_makes_its_sleeps_longer_in_runtime_time() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        clock.set_rate(500_000);
        let start = runtime_now();
        let slept = on_member_clock(clock.clone(), async {
            let member_start = Instant::now();
            sleep(SECOND).await;
            member_start.elapsed()
        })
        .await;
        assert!(slept >= SECOND, "slept {slept:?} on the member's clock");
        let runtime_elapsed = runtime_now() - start;
        assert!(
            (2 * SECOND..2 * SECOND + Duration::from_millis(2)).contains(&runtime_elapsed),
            "a second at half rate took {runtime_elapsed:?}"
        );
    });
}

#[test]
fn a_jump_moves_the_members_now_at_once_and_never_back() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        let before = clock.now();
        clock.jump(5 * SECOND);
        assert_eq!(clock.now() - before, 5 * SECOND);
        assert_eq!(
            clock.now().0 - runtime_now(),
            5 * SECOND,
            "ahead of the runtime"
        );
        let seen = on_member_clock(clock.clone(), async { Instant::now() }).await;
        assert_eq!(seen - before, 5 * SECOND);
        clock.set_rate(250_000);
        tokio::time::sleep(4 * SECOND).await;
        assert_eq!(clock.now() - before, 6 * SECOND);
        assert_eq!(
            Instant::now().0,
            runtime_now(),
            "outside the scope: the runtime's"
        );
    });
}

#[test]
fn a_sleep_armed_before_a_slowdown_still_waits_its_full_time_on_the_member_clock() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        let start = runtime_now();
        let ended = sleeper(&clock, SECOND);
        tokio::time::sleep(SECOND / 2).await;
        clock.set_rate(500_000);
        let ended_at = ended.await.unwrap() - start;
        // Half a second at full rate, then the other half at half rate: 1.5 s.
        assert!(
            (1500..1503).contains(&ended_at.as_millis()),
            "took {ended_at:?}"
        );
    });
}

/// Sleeps `duration` on `clock` in a task of its own; answers when it ended, on the runtime.
fn sleeper(
    clock: &MemberClock,
    duration: Duration,
) -> tokio::task::JoinHandle<tokio::time::Instant> {
    tokio::spawn(on_member_clock(clock.clone(), async move {
        sleep(duration).await;
        runtime_now()
    }))
}

#[test]
fn a_sleep_armed_while_the_clock_ran_slow_ends_on_time_once_it_keeps_time_again() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        clock.set_rate(100_000);
        let start = runtime_now();
        let ended = sleeper(&clock, 2 * SECOND);
        // One member-second at a tenth of the rate is ten runtime seconds; then it keeps time.
        tokio::time::sleep(10 * SECOND).await;
        clock.set_rate(1_000_000);
        let ended_at = ended.await.unwrap() - start;
        assert!(
            (11000..11003).contains(&ended_at.as_millis()),
            "ended {ended_at:?} in, not 11 s"
        );
    });
}

#[test]
fn a_jump_past_a_sleeps_deadline_ends_it_at_once() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        let start = runtime_now();
        let ended = sleeper(&clock, 30 * SECOND);
        tokio::time::sleep(SECOND).await;
        clock.jump(40 * SECOND);
        let ended_at = ended.await.unwrap() - start;
        assert!(ended_at < SECOND + Duration::from_millis(2), "{ended_at:?}");
    });
}

#[cfg(tokio_unstable)]
#[test]
fn tasks_spawned_by_a_members_code_read_its_clock_until_they_end() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        clock.jump(10 * SECOND);
        let spawn_child = async {
            let child = tokio::spawn(async {
                let grandchild = tokio::spawn(async { Instant::now() });
                (Instant::now(), grandchild.await.unwrap())
            });
            Some(child)
        };
        let child = on_member_clock(clock.clone(), spawn_child).await.unwrap();
        let (child_saw, grandchild_saw) = child.await.unwrap();
        assert_eq!(child_saw.0 - runtime_now(), 10 * SECOND);
        assert_eq!(grandchild_saw.0 - runtime_now(), 10 * SECOND);
        assert!(
            TASK_CLOCKS.with(|clocks| clocks.borrow().is_empty()),
            "ended tasks are forgotten"
        );
        let stranger = tokio::spawn(async { Instant::now() }).await.unwrap();
        assert_eq!(stranger.0, runtime_now());
    });
}

#[test]
fn a_timeout_counts_on_the_member_clock() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        clock.set_rate(100_000);
        let start = runtime_now();
        let answer = on_member_clock(clock, async {
            timeout(SECOND, std::future::pending::<()>()).await
        })
        .await;
        assert_eq!(answer, Err(Elapsed));
        assert!(runtime_now() - start >= 10 * SECOND);
        let finished = timeout(SECOND, async { 7 }).await;
        assert_eq!(finished, Ok(7));
    });
}

#[test]
fn an_interval_ticks_at_start_then_each_period_after_the_last_tick() {
    paused_runtime().block_on(async {
        let start = Instant::now();
        let mut ticks = interval(SECOND);
        assert_eq!(ticks.tick().await, start);
        assert_eq!(ticks.tick().await - start, SECOND);
        tokio::time::sleep(3 * SECOND).await;
        // Late: the next tick is at once, and the one after a period later (Delay).
        let late = ticks.tick().await;
        assert_eq!(late - start, 2 * SECOND);
        assert_eq!(Instant::now() - start, 4 * SECOND);
        ticks.tick().await;
        assert_eq!(Instant::now() - start, 5 * SECOND);
    });
}

#[test]
fn rates_outside_the_limits_are_refused() {
    paused_runtime().block_on(async {
        let clock = MemberClock::new();
        let too_slow = std::panic::catch_unwind(|| clock.set_rate(SLOWEST_RATE_PER_MILLION - 1));
        assert!(too_slow.is_err());
        clock.set_rate(SLOWEST_RATE_PER_MILLION);
        clock.set_rate(FASTEST_RATE_PER_MILLION);
    });
}
