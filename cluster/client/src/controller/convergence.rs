//! Time to convergence: how long each desired-state change took to be observed. The informer
//! sees a value's `generation` rise (a spec write) and, later, its `status.observedGeneration`
//! reach that generation (the controller's status write); the time between the two sightings is
//! the object's convergence time for that generation (the seeds' state-sync metric). Measured
//! from the informer's sightings, in one process, so no clocks are compared across machines.
//!
//! Bounded: at most [`MOST_PENDING_GENERATIONS_PER_KEY`] pending generations per key (a spec
//! rewritten faster than it converges keeps its newest ones) and `most_keys` keys; generations
//! past the bound are counted in [`ConvergenceTracker::untracked`], not timed.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::cache::InformerEvent;
use super::object::generations_of;

/// Pending generations kept per key.
pub const MOST_PENDING_GENERATIONS_PER_KEY: usize = 16;

/// The generations seen but not yet observed, with when they were first seen.
pub struct ConvergenceTracker {
    pending: HashMap<String, VecDeque<(u64, Instant)>>,
    most_keys: usize,
    untracked: u64,
}

impl ConvergenceTracker {
    pub fn new(most_keys: usize) -> ConvergenceTracker {
        ConvergenceTracker {
            pending: HashMap::new(),
            most_keys,
            untracked: 0,
        }
    }

    /// Takes in one informer event seen at `now`; answers the convergence times it completed.
    pub fn observe(&mut self, event: &InformerEvent, now: Instant) -> Vec<Duration> {
        let Some(value) = event.new_value() else {
            self.pending.remove(event.key());
            return Vec::new();
        };
        let Some((generation, observed)) = generations_of(&value.value) else {
            return Vec::new();
        };
        if generation > observed {
            self.remember(&value.key, generation, now);
        }
        let Some(pending) = self.pending.get_mut(&value.key) else {
            return Vec::new();
        };
        let mut converged = Vec::new();
        while let Some(&(pending_generation, seen)) = pending.front() {
            if pending_generation > observed {
                break;
            }
            pending.pop_front();
            converged.push(now.saturating_duration_since(seen));
        }
        if pending.is_empty() {
            self.pending.remove(&value.key);
        }
        converged
    }

    fn remember(&mut self, key: &str, generation: u64, now: Instant) {
        if !self.pending.contains_key(key) && self.pending.len() >= self.most_keys {
            self.untracked += 1;
            return;
        }
        let pending = self.pending.entry(key.to_string()).or_default();
        if pending.back().is_some_and(|&(last, _)| last >= generation) {
            return;
        }
        if pending.len() == MOST_PENDING_GENERATIONS_PER_KEY {
            pending.pop_front();
            self.untracked += 1;
        }
        pending.push_back((generation, now));
    }

    /// Keys with a generation not yet observed.
    pub fn unconverged_keys(&self) -> usize {
        self.pending.len()
    }

    /// Generations seen but dropped by the bounds.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::KeyValue;

    fn put(key: &str, generation: u64, observed: u64) -> InformerEvent {
        let value = format!(
            r#"{{"metadata":{{"generation":{generation}}},"spec":{{}},
                "status":{{"observedGeneration":{observed}}}}}"#
        );
        InformerEvent::Added(KeyValue {
            key: key.into(),
            value,
            create_revision: 1,
            mod_revision: 1,
            version: 1,
            lease: 0,
        })
    }

    #[test]
    fn each_generation_is_timed_from_its_first_sighting_to_its_observation() {
        let start = Instant::now();
        let at = |millis| start + Duration::from_millis(millis);
        let mut tracker = ConvergenceTracker::new(10);
        assert!(tracker.observe(&put("a", 1, 0), at(0)).is_empty());
        assert!(tracker.observe(&put("a", 2, 0), at(10)).is_empty());
        assert!(
            tracker.observe(&put("a", 2, 0), at(15)).is_empty(),
            "seen again: no reset"
        );
        assert_eq!(tracker.unconverged_keys(), 1);
        let converged = tracker.observe(&put("a", 2, 1), at(30));
        assert_eq!(converged, [Duration::from_millis(30)], "generation 1 only");
        let converged = tracker.observe(&put("a", 2, 2), at(50));
        assert_eq!(converged, [Duration::from_millis(40)]);
        assert_eq!(tracker.unconverged_keys(), 0);
    }

    #[test]
    fn deletes_forget_and_the_bounds_count_what_they_drop() {
        let now = Instant::now();
        let mut tracker = ConvergenceTracker::new(1);
        tracker.observe(&put("a", 1, 0), now);
        tracker.observe(&put("b", 1, 0), now);
        assert_eq!((tracker.unconverged_keys(), tracker.untracked()), (1, 1));
        let InformerEvent::Added(deleted) = put("a", 1, 0) else {
            unreachable!()
        };
        tracker.observe(&InformerEvent::Deleted(deleted), now);
        assert_eq!(tracker.unconverged_keys(), 0);
        for generation in 1..=(MOST_PENDING_GENERATIONS_PER_KEY as u64 + 2) {
            tracker.observe(&put("c", generation, 0), now);
        }
        assert_eq!(tracker.untracked(), 3);
        let converged = tracker.observe(&put("c", 18, 18), now);
        assert_eq!(converged.len(), MOST_PENDING_GENERATIONS_PER_KEY);
    }
}
