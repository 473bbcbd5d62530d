//! When a member last heard from the leader it follows: the time of the last append (a heartbeat
//! or entries) it accepted. With Raft's Pre-Vote a follower cut off from its leader keeps its term
//! and its vote while its pre-votes fail, so openraft still names the old leader; the member's
//! status names no leader once the leader has been silent for longer than its lease, as etcd's
//! pre-candidate forgets its leader and as a cut-off leader stops claiming (`status.rs`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::raft::AppendEntriesResponse;

use crate::clock::Instant;
use crate::TypeConfig;

/// The last contact with a leader, shared by the peer server (which records it) and the status
/// readings (which weigh it). Clones share it.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaderContact {
    last_heard: Arc<Mutex<Option<Instant>>>,
}

impl LeaderContact {
    /// Records the answer to one append: any answer but a refusal of a stale leader (one whose
    /// vote is below this member's) means the leader this member follows reached it.
    pub(crate) fn answered(&self, answer: &AppendEntriesResponse<TypeConfig>) {
        if !matches!(answer, AppendEntriesResponse::HigherVote(_)) {
            *self.lock() = Some(Instant::now());
        }
    }

    /// True when no leader has reached this member within `lease` (or none ever has since it
    /// started).
    pub(crate) fn lapsed(&self, lease: Duration) -> bool {
        self.lock()
            .is_none_or(|heard| Instant::now().saturating_duration_since(heard) > lease)
    }

    /// Each holder makes one assignment, so a panicking holder leaves a whole value behind.
    fn lock(&self) -> MutexGuard<'_, Option<Instant>> {
        self.last_heard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
