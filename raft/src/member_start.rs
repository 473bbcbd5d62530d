//! How a member's parts come up: its files opened (the state machine's store, the raft log, the
//! snapshot directory), then the state machine, the log storage and the peer network built on
//! them and raft started. `RaftMember::start` (member.rs) then wires what this returns into the
//! running member. Every failure here is a `MemberError::Startup` naming the part that failed.

use std::sync::Arc;
use std::time::Duration;

use openraft::SnapshotPolicy;
use revkv_storage::{MvccStore, RaftLogStore};
use tokio::sync::watch;

use crate::config::MemberConfig;
use crate::error::MemberError;
use crate::lessor::Lessor;
use crate::log_storage::LogStorage;
use crate::member_inner::Raft;
use crate::peer::append_timeout::AppendTimeouts;
use crate::peer::client::{PeerAddresses, PeerClient, PeerNetworkFactory};
use crate::peer::failure_log::PeerFailureLog;
use crate::snapshot_file::SnapshotFiles;
use crate::state_machine::{AppliedPosition, StateMachine};
use crate::storage_fault::FirstStorageFault;

/// A failure while starting, naming what failed.
pub(crate) fn startup(what: &str, error: &dyn std::fmt::Display) -> MemberError {
    MemberError::Startup(format!("{what}: {error}"))
}

/// A member's files, opened: the state machine's store, the raft log and the snapshot directory.
pub(crate) struct OpenStores {
    pub(crate) store: Arc<MvccStore>,
    pub(crate) log: Arc<RaftLogStore>,
    pub(crate) snapshot_files: Arc<SnapshotFiles>,
}

impl OpenStores {
    pub(crate) fn open(config: &MemberConfig) -> Result<Self, MemberError> {
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|error| startup(&config.data_dir.display().to_string(), &error))?;
        let store = Arc::new(MvccStore::open_with_faults(
            config.data_dir.join("state.redb"),
            config.store.clone(),
            config.disks.state_file.clone(),
        )?);
        let log = Arc::new(RaftLogStore::open_with_faults(
            config.data_dir.join("raft-log"),
            config.log,
            config.disks.raft_log.clone(),
        )?);
        if let Some(repaired) = log.repaired_tail() {
            tracing::warn!(
                %repaired,
                "cut a torn write from the end of the raft log (a crash during an append that was \
                 never acknowledged); the leader resends whatever this member lacks"
            );
        }
        let snapshot_files = SnapshotFiles::open(config.data_dir.join("snapshots"))
            .map_err(|error| startup("snapshot directory", &error))?;
        Ok(OpenStores {
            store,
            log,
            snapshot_files,
        })
    }
}

/// Raft started on a member's stores, with what the member keeps of its parts.
pub(crate) struct StartedRaft {
    pub(crate) raft: Raft,
    pub(crate) applied: watch::Receiver<AppliedPosition>,
    pub(crate) lessor: Arc<Lessor>,
    pub(crate) peers: PeerClient,
    pub(crate) peer_addresses: Arc<PeerAddresses>,
    pub(crate) peer_failures: Arc<PeerFailureLog>,
    pub(crate) append_timeouts: Arc<AppendTimeouts>,
    pub(crate) first_storage_fault: FirstStorageFault,
    pub(crate) log_tail_size: crate::log_tail::LogTailSize,
}

impl StartedRaft {
    /// Builds the state machine, the log storage and the peer network, and starts raft on them.
    pub(crate) async fn start(
        config: &MemberConfig,
        stores: &OpenStores,
    ) -> Result<Self, MemberError> {
        let state_machine = StateMachine::new(
            stores.store.clone(),
            stores.snapshot_files.clone(),
            config.timings.clone(),
        )?;
        let applied = state_machine.subscribe();
        let lessor = state_machine.lessor();
        lessor.set_checkpoint_interval(config.lease.checkpoint_interval);
        let raft_config =
            openraft_config(config).map_err(|error| startup("raft config", &error))?;
        let peers = PeerClient::new(
            config.peer_limits.connect_timeout,
            config.peer_source_address,
            config.peer_tls.as_ref(),
        )
        .with_network(config.peer_network.clone());
        let peer_addresses = Arc::new(PeerAddresses::default());
        let peer_failures = Arc::new(PeerFailureLog::default());
        let append_timeouts = Arc::new(AppendTimeouts::new(
            config.timing.election_timeout_min,
            config.timing.append_timeout_max,
            config.peer_append_timings.observer.clone(),
        ));
        let network = PeerNetworkFactory {
            client: peers.clone(),
            minimum_call_timeout: config.timing.election_timeout_min,
            append_timeouts: append_timeouts.clone(),
            addresses: peer_addresses.clone(),
            failures: peer_failures.clone(),
        };
        let log_storage = LogStorage::new(
            stores.log.clone(),
            stores.store.clone(),
            config.timings.clone(),
            config.log_tail,
        )
        .map_err(|error| startup("raft log writer", &error))?
        .with_inline_follower_appends(config.id);
        let first_storage_fault = log_storage.first_fault();
        let log_tail_size = log_storage.tail_size();
        let state_machine = state_machine.with_first_fault(first_storage_fault.clone());
        let raft = Raft::new(config.id, raft_config, network, log_storage, state_machine)
            .await
            .map_err(|error| startup("raft", &error))?;
        Ok(StartedRaft {
            raft,
            applied,
            lessor,
            peers,
            peer_addresses,
            peer_failures,
            append_timeouts,
            first_storage_fault,
            log_tail_size,
        })
    }
}

/// Whether the simulator's test planted the leader-restore bug (`planted_bugs.rs`; never in the
/// server's build, where leaders never restore their term).
fn leader_restore_planted() -> bool {
    #[cfg(feature = "planted-bugs")]
    if crate::planted_bugs::leaders_restore_their_term() {
        return true;
    }
    false
}

fn openraft_config(config: &MemberConfig) -> Result<Arc<openraft::Config>, openraft::ConfigError> {
    let timing = &config.timing;
    let millis = |duration: Duration| duration.as_millis() as u64;
    let raft_config = openraft::Config {
        cluster_name: "revkv".into(),
        heartbeat_interval: millis(timing.heartbeat_interval),
        election_timeout_min: millis(timing.election_timeout_min),
        election_timeout_max: millis(timing.election_timeout_max),
        snapshot_policy: SnapshotPolicy::LogsSinceLast(timing.snapshot_after_entries),
        max_in_snapshot_log_to_keep: timing.log_entries_kept_after_snapshot,
        install_snapshot_timeout: millis(config.peer_limits.call_timeout).max(1000),
        // A restarted leader must win a new term before it leads again. openraft's default lets it
        // take up its old term at once, which is unsafe with this log: the leader replicates
        // entries before its own fsync ends (log_writer.rs), so after a crash its log may end
        // below entries its followers hold, and writing new entries at those log ids in the same
        // term breaks log matching (followers keep theirs and the replicas part for good).
        // node/bin/tests/leader_restart.rs catches it; docs/RELIABILITY.md tells the story.
        enable_leader_restore: Some(leader_restore_planted()),
        enable_pre_vote: Some(timing.pre_vote),
        ..openraft::Config::default()
    };
    Ok(Arc::new(raft_config.validate()?))
}
