//! What a running member reports about its raft state, in this crate's own types, so that callers
//! (the node's status endpoint, its metrics feed, automatic compaction, response headers) never see
//! openraft's metrics types: [`RaftStatus`] is one reading, [`RaftStatusFeed`] follows changes of term,
//! role and leader.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::type_config::alias::WatchReceiverOf;
use openraft::ServerState;

use crate::clock::Instant;
use crate::leader_contact::LeaderContact;
use crate::TypeConfig;

/// The raft role a member plays right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberRole {
    Learner,
    Follower,
    Candidate,
    Leader,
    Shutdown,
}

impl MemberRole {
    /// The role's name as the status endpoint writes it: `leader`, `follower`, and so on.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::Learner => "learner",
            MemberRole::Follower => "follower",
            MemberRole::Candidate => "candidate",
            MemberRole::Leader => "leader",
            MemberRole::Shutdown => "shutdown",
        }
    }

    fn of(state: ServerState) -> MemberRole {
        match state {
            ServerState::Learner => MemberRole::Learner,
            ServerState::Follower => MemberRole::Follower,
            ServerState::Candidate => MemberRole::Candidate,
            ServerState::Leader => MemberRole::Leader,
            ServerState::Shutdown => MemberRole::Shutdown,
        }
    }
}

/// One reading of a member's raft state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    pub term: u64,
    /// The leader this member knows of, if any.
    pub leader: Option<u64>,
    pub role: MemberRole,
    /// The last log index this member knows to be committed (0 before the first).
    pub commit_index: u64,
    /// The last log index this member's state machine has applied (0 before the first).
    pub applied_index: u64,
    /// False once raft has stopped with a fatal error.
    pub running: bool,
}

impl RaftStatus {
    /// The reading of `metrics` now. A leader whose lease has lapsed (no quorum has acknowledged
    /// it for `leader_lease`, openraft's lease: the longest election timeout) reports no leader:
    /// openraft refuses it new writes from then on, the other members may have elected another,
    /// and a client that picks the leader from a member's status must look elsewhere. etcd's
    /// leader steps down after an election timeout without a quorum (CheckQuorum); openraft's
    /// keeps its role and heartbeats, and claims leadership again at the next acknowledgement.
    /// A follower or learner that no leader has reached within the same lease reports none too:
    /// with Pre-Vote its failed pre-votes keep the old leader's vote, which openraft still names,
    /// where etcd's pre-candidate forgets its leader.
    pub(crate) fn of(
        metrics: &openraft::RaftMetrics<TypeConfig>,
        leader_lease: Duration,
        leader_contact: &LeaderContact,
    ) -> RaftStatus {
        let lease_lapsed = leader_lease_lapsed(metrics, leader_lease)
            || leader_silent(metrics, leader_lease, leader_contact);
        RaftStatus {
            term: metrics.current_term,
            leader: metrics.current_leader.filter(|_| !lease_lapsed),
            role: MemberRole::of(metrics.state),
            commit_index: metrics.local_committed.map_or(0, |log_id| log_id.index),
            applied_index: metrics.last_applied.map_or(0, |log_id| log_id.index),
            running: metrics.running_state.is_ok(),
        }
    }
}

/// Whether `metrics` are a leader's whose last quorum acknowledgement is older than
/// `leader_lease` now. A leader that is the only voter is its own quorum, and one not yet
/// acknowledged since its election (its voters granted it just now) has a lease. Followers cost
/// one comparison: the clock is read only for a leader.
fn leader_lease_lapsed(
    metrics: &openraft::RaftMetrics<TypeConfig>,
    leader_lease: Duration,
) -> bool {
    if metrics.state != ServerState::Leader {
        return false;
    }
    if metrics.membership_config.membership().voter_ids().count() <= 1 {
        return false;
    }
    metrics
        .last_quorum_acked
        .as_ref()
        .is_some_and(|acked| Instant::now().saturating_duration_since(**acked) > leader_lease)
}

/// Whether `metrics` are a follower's or learner's that names a leader which has not reached it
/// within `leader_lease`. The clock is read only when another member is named.
fn leader_silent(
    metrics: &openraft::RaftMetrics<TypeConfig>,
    leader_lease: Duration,
    leader_contact: &LeaderContact,
) -> bool {
    let follows_another = metrics
        .current_leader
        .is_some_and(|leader| leader != metrics.id);
    follows_another && metrics.state != ServerState::Leader && leader_contact.lapsed(leader_lease)
}

/// Follows the changes of a member's term, role and leader, with no polling. It wakes only when
/// one of them (or the membership) changes, not on every write; each reading it answers is complete.
///
/// A leader's lease that lapses changes none of them, so the feed does not wake for it: readers
/// that must see it (a scrape) read [`current`](Self::current), which applies it.
pub struct RaftStatusFeed {
    server: WatchReceiverOf<TypeConfig, openraft::metrics::RaftServerMetrics<TypeConfig>>,
    metrics: WatchReceiverOf<TypeConfig, openraft::RaftMetrics<TypeConfig>>,
    leader_lease: Duration,
    leader_contact: LeaderContact,
}

impl RaftStatusFeed {
    pub(crate) fn new(
        server: WatchReceiverOf<TypeConfig, openraft::metrics::RaftServerMetrics<TypeConfig>>,
        metrics: WatchReceiverOf<TypeConfig, openraft::RaftMetrics<TypeConfig>>,
        leader_lease: Duration,
        leader_contact: LeaderContact,
    ) -> RaftStatusFeed {
        RaftStatusFeed {
            server,
            metrics,
            leader_lease,
            leader_contact,
        }
    }

    /// The state as of now, commit and applied indexes included.
    pub fn current(&self) -> RaftStatus {
        RaftStatus::of(
            &self.metrics.borrow_watched(),
            self.leader_lease,
            &self.leader_contact,
        )
    }

    /// Waits for the next change of term, role, leader or membership and returns the new state;
    /// `None` once raft has shut down.
    pub async fn next_change(&mut self) -> Option<RaftStatus> {
        self.server.changed().await.ok()?;
        Some(self.current())
    }
}
