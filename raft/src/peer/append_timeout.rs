//! How long an append to each peer may take before the leader gives up on it and sends it again.
//!
//! An append's answer comes after the follower made the entries durable, so its round trip
//! follows the follower's fsync. A fixed timeout shorter than a slow disk's fsync times every
//! append to that follower out: the leader resends what the follower is still writing, over a new
//! connection, and the follower never catches up. So each peer's timeout follows its measured round
//! trips: `ROUND_TRIP_MULTIPLIER` times the slowest of its last `RECENT_ROUND_TRIPS` answers, never
//! below the floor (the election timeout: an answer slower than that is of no use to an election
//! anyway, see `PeerConnection::timeout`) and never above the configured ceiling. A timed-out
//! append counts as a round trip as long as the wait, so the next timeout grows at once, as TCP
//! backs its retransmission timeout off. Once the disk is fast again, the slow samples leave the
//! window and the timeout falls back to the floor.
//!
//! Every change of a peer's timeout and every timed-out append is told to the embedder's
//! [`PeerAppendObserver`] (the node's metrics).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::timings::PeerAppendObserver;

/// How many of a peer's latest round trips its timeout follows.
pub const RECENT_ROUND_TRIPS: usize = 64;

/// A peer's timeout is this many times its slowest recent round trip.
pub const ROUND_TRIP_MULTIPLIER: u32 = 4;

/// The appends' timeouts of every peer of one member.
pub struct AppendTimeouts {
    floor: Duration,
    ceiling: Duration,
    peers: Mutex<HashMap<u64, PeerRoundTrips>>,
    observer: Option<Arc<dyn PeerAppendObserver>>,
}

/// One peer's recent round trips and the timeout they give.
#[derive(Default)]
struct PeerRoundTrips {
    recent: VecDeque<Duration>,
    timeout: Duration,
    timed_out: u64,
}

/// One peer's append timeout as the status shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAppendTimeout {
    pub peer: u64,
    pub timeout: Duration,
    /// Appends to this peer that timed out since this member started.
    pub timed_out: u64,
}

impl AppendTimeouts {
    /// Timeouts between `floor` and `ceiling` (a ceiling below the floor is raised to it).
    pub fn new(
        floor: Duration,
        ceiling: Duration,
        observer: Option<Arc<dyn PeerAppendObserver>>,
    ) -> Self {
        AppendTimeouts {
            floor,
            ceiling: ceiling.max(floor),
            peers: Mutex::new(HashMap::new()),
            observer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, PeerRoundTrips>> {
        // The map holds plain numbers; a panic elsewhere cannot leave it half-changed.
        self.peers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How long the next append to `peer` may take.
    pub fn timeout_for(&self, peer: u64) -> Duration {
        self.lock()
            .get(&peer)
            .map_or(self.floor, |round_trips| round_trips.timeout)
            .max(self.floor)
    }

    /// An append to `peer` was answered after `round_trip`.
    pub fn answered(&self, peer: u64, round_trip: Duration) {
        self.record(peer, round_trip, false);
    }

    /// An append to `peer` got no answer within `waited`.
    pub fn timed_out(&self, peer: u64, waited: Duration) {
        self.record(peer, waited, true);
    }

    /// Every peer's timeout, in peer order.
    pub fn all(&self) -> Vec<PeerAppendTimeout> {
        let mut all: Vec<PeerAppendTimeout> = self
            .lock()
            .iter()
            .map(|(&peer, round_trips)| PeerAppendTimeout {
                peer,
                timeout: round_trips.timeout.max(self.floor),
                timed_out: round_trips.timed_out,
            })
            .collect();
        all.sort_by_key(|timeout| timeout.peer);
        all
    }

    fn record(&self, peer: u64, round_trip: Duration, timed_out: bool) {
        let (changed_to, timed_out_now) = {
            let mut peers = self.lock();
            let round_trips = peers.entry(peer).or_default();
            if round_trips.recent.len() == RECENT_ROUND_TRIPS {
                round_trips.recent.pop_front();
            }
            round_trips.recent.push_back(round_trip);
            round_trips.timed_out += u64::from(timed_out);
            let slowest = round_trips.recent.iter().max().copied().unwrap_or_default();
            let timeout =
                (slowest.saturating_mul(ROUND_TRIP_MULTIPLIER)).clamp(self.floor, self.ceiling);
            debug_assert!(round_trips.recent.len() <= RECENT_ROUND_TRIPS);
            let changed = std::mem::replace(&mut round_trips.timeout, timeout) != timeout;
            (changed.then_some(timeout), timed_out)
        };
        let Some(observer) = &self.observer else {
            return;
        };
        if timed_out_now {
            observer.append_timed_out(peer);
        }
        if let Some(timeout) = changed_to {
            observer.append_timeout_changed(peer, timeout);
        }
    }
}

impl std::fmt::Debug for AppendTimeouts {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AppendTimeouts")
            .field("floor", &self.floor)
            .field("ceiling", &self.ceiling)
            .field("peers", &self.all())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_millis(300);
    const CEILING: Duration = Duration::from_secs(5);

    #[test]
    fn a_peer_never_heard_from_gets_the_floor() {
        let timeouts = AppendTimeouts::new(FLOOR, CEILING, None);
        assert_eq!(timeouts.timeout_for(2), FLOOR);
        timeouts.answered(2, Duration::from_millis(1));
        assert_eq!(
            timeouts.timeout_for(2),
            FLOOR,
            "fast answers keep the floor"
        );
    }

    #[test]
    fn a_slow_disk_raises_the_timeout_within_the_ceiling_and_recovery_lowers_it() {
        let timeouts = AppendTimeouts::new(FLOOR, CEILING, None);
        timeouts.answered(3, Duration::from_millis(200));
        assert_eq!(timeouts.timeout_for(3), Duration::from_millis(800));
        timeouts.timed_out(3, Duration::from_millis(800));
        assert_eq!(timeouts.timeout_for(3), Duration::from_millis(3200));
        timeouts.timed_out(3, Duration::from_millis(3200));
        assert_eq!(timeouts.timeout_for(3), CEILING);
        assert_eq!(timeouts.all()[0].timed_out, 2);
        for _ in 0..RECENT_ROUND_TRIPS {
            timeouts.answered(3, Duration::from_millis(10));
        }
        assert_eq!(
            timeouts.timeout_for(3),
            FLOOR,
            "the slow samples left the window"
        );
        assert_eq!(timeouts.timeout_for(4), FLOOR, "peers are apart");
    }

    #[test]
    fn a_ceiling_below_the_floor_is_the_floor() {
        let timeouts = AppendTimeouts::new(FLOOR, Duration::from_millis(1), None);
        timeouts.timed_out(2, Duration::from_secs(60));
        assert_eq!(timeouts.timeout_for(2), FLOOR);
    }
}
