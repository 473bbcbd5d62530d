//! Clock faults on one member (the leader half the time): its clock runs slow for a while (a
//! tenth to nine tenths of the others' rate), or it jumps ahead at once (50 ms to 10 s), as a
//! clock source that steps does.
//! Nothing else changes: the member's timers, lease deadlines and request deadlines all read its
//! own clock (`revkv_raft::clock`), the others keep time.
//!
//! What the checks expect: linearizable reads and writes, watches and replicas do not depend on
//! clocks at all (revkv confirms leadership with a quorum for every linearizable read, never with
//! a leader lease), so they must hold unchanged. A lease's TTL is measured on the leader's clock,
//! as etcd measures it, so a clock that jumps ahead ends leases early by up to the jump; the
//! lease check allows exactly the jumps any member took during a lease's life
//! (`history::ClockJump`, `check::leases`) and nothing for a slow clock, which can only end them
//! late.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::cluster::Cluster;
use crate::trace::Trace;

/// The slowest and fastest rate a slowed clock runs at, in millionths of the others'.
const SLOW_RATES_PER_MILLION: std::ops::RangeInclusive<u64> = 100_000..=900_000;

/// The shortest and longest jump ahead, in milliseconds.
const JUMP_MILLIS: std::ops::RangeInclusive<u64> = 50..=10_000;

/// The longest pause between two clock faults, and the longest a clock runs slow.
const MAX_PAUSE: Duration = Duration::from_secs(4);
const MAX_SLOW: Duration = Duration::from_secs(10);

/// Skews one member's clock after another until the trace's clock reaches `until`, on a schedule
/// of its own (its own draws, so the other faults' schedule is the same with or without it);
/// answers how many. Every clock keeps time again when it returns.
pub async fn skew_clocks(seed: u64, cluster: &Cluster, trace: &Trace, until: Duration) -> u64 {
    let mut random = StdRng::seed_from_u64(seed ^ 0xC10C);
    let mut skewed = 0;
    while trace.elapsed() < until {
        let pause = random.random_range(10..=MAX_PAUSE.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let lasting = random.random_range(10..=MAX_SLOW.as_millis() as u64);
        skew_clock(&mut random, cluster, trace, Duration::from_millis(lasting)).await;
        skewed += 1;
    }
    skewed
}

/// Slows one running member's clock for `lasting`, or moves it ahead at once; half and half.
async fn skew_clock(random: &mut StdRng, cluster: &Cluster, trace: &Trace, lasting: Duration) {
    let running = cluster.running_ids();
    if running.is_empty() {
        return;
    }
    // The leader half the time: its clock times leases, heartbeats and its own lease.
    let leader = cluster.leader().await.filter(|id| running.contains(id));
    let member = match leader {
        Some(leader) if random.random_bool(0.5) => leader,
        _ => running[random.random_range(0..running.len())],
    };
    if random.random_bool(0.5) {
        let by = Duration::from_millis(random.random_range(JUMP_MILLIS));
        trace.record(
            Some(member),
            None,
            format!("fault: clock jumps {by:?} ahead"),
        );
        cluster.jump_clock(member, by, trace.elapsed());
        return;
    }
    let rate = random.random_range(SLOW_RATES_PER_MILLION);
    let percent = rate / 10_000;
    trace.record(
        Some(member),
        None,
        format!("fault: clock runs at {percent}% for {lasting:?}"),
    );
    let clock = cluster.clock(member);
    clock.set_rate(rate);
    tokio::time::sleep(lasting).await;
    clock.set_rate(1_000_000);
    trace.record(Some(member), None, "fault over: clock keeps time".into());
}
