//! Lost peer calls on command, so tests can show what a member does when a message to another
//! member never arrives.
//!
//! Every peer call made with `PeerClient::call` (votes, appends over HTTP, leader transfers,
//! forwarded writes, read indexes, admin calls) passes the switchboard, which is disarmed from
//! birth. A test tells it to lose the next N calls
//! to one path (`RaftMember::peer_faults`), and those calls fail as unreachable without being
//! sent, as calls to a member behind a broken link would. Nothing outside the library can arm it:
//! there is no flag, variable or endpoint. Disarmed, the cost is one relaxed atomic load per call.
//! The append stream and snapshot transfers do not pass it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The switchboard of one member's outgoing peer calls. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct PeerFaults {
    switches: Arc<Switches>,
}

#[derive(Debug, Default)]
struct Switches {
    /// True while any call is still to be lost, so a disarmed call reads nothing else.
    armed: AtomicBool,
    /// How many more calls to each path are to be lost.
    calls_to_lose: Mutex<BTreeMap<String, u32>>,
}

impl PeerFaults {
    /// Loses the next `count` calls to `path` (one of `peer::paths`), from now on.
    pub fn lose_next_calls(&self, path: &str, count: u32) {
        let mut calls_to_lose = self.calls_to_lose();
        calls_to_lose.insert(path.to_string(), count);
        self.switches.armed.store(
            calls_to_lose.values().any(|left| *left > 0),
            Ordering::SeqCst,
        );
    }

    /// Whether this call to `path` is to be lost; counts it as lost when it is.
    pub(crate) fn lose(&self, path: &str) -> bool {
        if !self.switches.armed.load(Ordering::Relaxed) {
            return false;
        }
        let mut calls_to_lose = self.calls_to_lose();
        let Some(left) = calls_to_lose.get_mut(path).filter(|left| **left > 0) else {
            return false;
        };
        *left -= 1;
        let still_armed = calls_to_lose.values().any(|left| *left > 0);
        self.switches.armed.store(still_armed, Ordering::SeqCst);
        true
    }

    fn calls_to_lose(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u32>> {
        // A test that panicked while holding the lock left a map that is still whole.
        self.switches
            .calls_to_lose
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
