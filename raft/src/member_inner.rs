//! What a running member and its peer server share: the raft instance, the stores, the applied
//! position, the peer client, the configuration and the lessor. Its own file so that `member.rs` (which starts
//! the peer server) and `peer/server.rs` (which serves with it) do not import each other; the
//! leader-side operations on it are in `leader.rs`.

use std::sync::Arc;

use crate::clock::Instant;
use openraft::async_runtime::WatchReceiver;
use revkv_storage::{MvccStore, RaftLogStore};
use tokio::sync::watch;

use crate::config::MemberConfig;
use crate::lessor::Lessor;
use crate::peer::client::PeerClient;
use crate::state_machine::{AppliedPosition, StateMachine};
use crate::types::TypeConfig;

/// The openraft instance of a member.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;

/// What the member and its peer server share.
pub(crate) struct MemberInner {
    pub id: u64,
    pub raft: Raft,
    pub store: Arc<MvccStore>,
    pub log: Arc<RaftLogStore>,
    pub applied: watch::Receiver<AppliedPosition>,
    pub peers: PeerClient,
    pub config: MemberConfig,
    /// Every lease's deadline (only the leader's are used).
    pub lessor: Arc<Lessor>,
    /// Wakes the lease expiry task for a check now (after this member took over the leases).
    pub lease_check_now: tokio::sync::Notify,
    /// Where snapshots sent and received are written (`DATA_DIR/snapshots/`).
    pub snapshot_files: Arc<crate::snapshot_file::SnapshotFiles>,
    /// The append streams this member serves now (`peer/append_stream.rs`).
    pub append_streams: Arc<crate::peer::append_stream::OpenStreams>,
    /// The first failure of this member's log or state file (`storage_fault.rs`).
    pub first_storage_fault: crate::storage_fault::FirstStorageFault,
    /// How much of the raft log the in-memory tail holds now.
    pub log_tail_size: crate::log_tail::LogTailSize,
    /// The ReadIndex rounds the linearizable reads this member serves as leader share.
    pub read_index_rounds: Arc<crate::read_index_rounds::ReadIndexRounds>,
    /// When a leader last reached this member (recorded by the peer server's append handlers).
    pub leader_contact: crate::leader_contact::LeaderContact,
    /// The members that said their build has a feature (`member_features.rs`).
    pub confirmed_features: crate::member_features::ConfirmedFeatures,
}

/// openraft's metrics as this member's raft publishes them.
pub(crate) type Metrics = openraft::RaftMetrics<TypeConfig>;

/// Waits until `condition` holds for raft's metrics, or `until`; answers whether it held.
pub(crate) async fn wait_for(
    metrics: &mut openraft::alias::WatchReceiverOf<TypeConfig, Metrics>,
    until: Instant,
    condition: impl Fn(&Metrics) -> bool,
) -> bool {
    loop {
        if condition(&metrics.borrow_watched()) {
            return true;
        }
        if !matches!(
            crate::clock::timeout_at(until, metrics.changed()).await,
            Ok(Ok(()))
        ) {
            return condition(&metrics.borrow_watched());
        }
    }
}

impl MemberInner {
    /// The member's raft state now (`RaftStatus::of`: a leader whose lease lapsed, or a follower
    /// its leader has not reached within that lease, reports none).
    pub(crate) fn status(&self) -> crate::status::RaftStatus {
        crate::status::RaftStatus::of(
            &self.raft.metrics().borrow_watched(),
            self.leader_lease(),
            &self.leader_contact,
        )
    }

    /// openraft's leader lease: the longest election timeout (`Config::election_timeout_max`).
    pub(crate) fn leader_lease(&self) -> std::time::Duration {
        self.config.timing.election_timeout_max
    }

    /// Every member of the membership (voters and learners) with its peer URL, as this member
    /// knows it now: whom a question to all members (hashes, reports) goes to.
    pub(crate) fn members_with_peer_urls(&self) -> Vec<(u64, String)> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        membership
            .nodes()
            .map(|(id, node)| (*id, node.peer_url.clone()))
            .collect()
    }
}
