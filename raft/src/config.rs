//! Everything a member needs to start: identity, addresses, timing, and limits.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use revkv_storage::StoreOptions;

use crate::types::MemberNode;

/// Raft timing and elections. The defaults suit members on one machine or one LAN: the election
/// timeout stays well above ten heartbeats' worth of fsync and network latency.
#[derive(Clone, Debug)]
pub struct RaftTiming {
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// Build a snapshot after this many log entries since the last one. Building one costs a
    /// flush of the state file and lets the log be purged behind it (`state_machine.rs`,
    /// `SnapshotBuilder`); the store is exported only when a follower needs a snapshot.
    pub snapshot_after_entries: u64,
    /// Log entries kept behind a snapshot, so slightly lagging followers catch up from the log.
    pub log_entries_kept_after_snapshot: u64,
    /// The longest an append to one peer may be waited for. Each peer's timeout follows its
    /// measured round trips (a follower's fsync) between the minimum election timeout and this
    /// (`peer/append_timeout.rs`).
    pub append_timeout_max: Duration,
    /// Ask the others whether they would vote before starting an election (Raft's Pre-Vote,
    /// etcd's `--pre-vote`, on by default there since 3.5). A member whose pre-vote fails keeps
    /// its term and its vote, so two members that time out together do not split every election
    /// term after term; without it, a leader that can still answer but no longer send (its
    /// outgoing links cut) kept the others leaderless for up to 28 s (issue 63 item 3,
    /// docs/RELIABILITY.md).
    pub pre_vote: bool,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(1000),
            election_timeout_max: Duration::from_millis(2000),
            snapshot_after_entries: 10_000,
            log_entries_kept_after_snapshot: 5_000,
            append_timeout_max: Duration::from_secs(10),
            pre_vote: true,
        }
    }
}

/// Bounds on what peers may send and how long calls may take.
#[derive(Clone, Debug)]
pub struct PeerLimits {
    /// Largest peer request body (append batches; snapshots are streamed and have their own).
    pub max_body_bytes: usize,
    /// Largest snapshot a member accepts from the leader, streamed to a file.
    pub max_snapshot_bytes: u64,
    /// How long a forwarded write, read index or membership change may take, retries on a new
    /// leader included (the request's timeout: `revkv serve --request-timeout-ms`).
    pub call_timeout: Duration,
    /// How long connecting to a peer may take.
    pub connect_timeout: Duration,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            max_body_bytes: 1024 * 1024 * 1024,
            max_snapshot_bytes: 64 * 1024 * 1024 * 1024,
            call_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
        }
    }
}

/// How the leader keeps leases (issue 13). The minimum TTL is not here: it follows the election
/// timeout (`RaftTiming::min_lease_ttl_seconds`), as etcd's does.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// How often the leader looks for leases past their deadline. Part of the documented slack
    /// of an expiry (docs/design/leases.md, "The bound").
    pub expiry_check_interval: Duration,
    /// Most revokes of expired leases the leader proposes at once; the rest wait for the next
    /// check, so a mass expiry cannot flood the log.
    pub max_revokes_in_flight: usize,
    /// How long a proposed revoke may take to be applied before the leader proposes it again.
    pub revoke_retry_after: Duration,
    /// How many fresh ids a grant without an id tries when the one it picked is taken.
    pub grant_id_attempts: u32,
    /// How long after its grant or last renewal the leader checkpoints a lease's remaining TTL
    /// through raft, so a new leader does not restart it at its full TTL (`None`: never, etcd
    /// 3.4's behaviour). Part of the documented bound across leader changes.
    pub checkpoint_interval: Option<Duration>,
    /// Most leases in one checkpoint entry. The leader proposes at most one checkpoint per expiry
    /// check, so checkpoints cost at most one raft entry per `expiry_check_interval`.
    pub max_leases_per_checkpoint: usize,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            expiry_check_interval: Duration::from_millis(250),
            max_revokes_in_flight: 16,
            revoke_retry_after: Duration::from_secs(5),
            grant_id_attempts: 4,
            checkpoint_interval: Some(Duration::from_secs(5)),
            // etcd's `maxLeaseCheckpointBatchSize`.
            max_leases_per_checkpoint: 1000,
        }
    }
}

impl RaftTiming {
    /// The shortest lease TTL: 1.5 times the longest election timeout, in whole seconds rounded up
    /// (etcd's `minTTL`), so a lease outlives the election that a leader's failure starts.
    pub fn min_lease_ttl_seconds(&self) -> i64 {
        let millis = self.election_timeout_max.as_millis() as i64 * 3 / 2;
        (millis + 999) / 1000
    }
}

/// How a member starts.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    pub id: u64,
    pub data_dir: PathBuf,
    /// Where the peer listener binds (port 0 picks a free port; see `RaftMember::peer_address`).
    pub listen_peer: SocketAddr,
    /// How other members reach this one.
    pub advertise: MemberNode,
    /// The members of a new cluster. Used once, when the data directory holds no log; ignored on
    /// restart and when `join` is set.
    pub initial_cluster: BTreeMap<u64, MemberNode>,
    /// Start empty and wait to be added as a learner by an existing member.
    pub join: bool,
    pub timing: RaftTiming,
    pub peer_limits: PeerLimits,
    pub store: StoreOptions,
    /// The raft log's files (segment size).
    pub log: revkv_storage::LogOptions,
    /// How many recent log entries stay in memory for replication reads.
    pub log_tail: crate::log_tail::TailLimits,
    /// Who is told how long appends and applies take (nobody by default).
    pub timings: crate::timings::StorageTimings,
    /// Who is told each peer's append timeout and every append that timed out (nobody by default).
    pub peer_append_timings: crate::timings::PeerAppendTimings,
    /// The local address outgoing peer connections are made from (`None`: the system chooses).
    /// A host with several addresses uses it to pick one; the fault harness gives each member its
    /// own loopback address so its link proxies can tell the members' traffic apart.
    pub peer_source_address: Option<std::net::IpAddr>,
    /// Mutual TLS between members (`None`: plain HTTP). With it, the peer listener serves HTTPS
    /// only and refuses callers without a certificate of the peer CA, and calls to other members
    /// go to their `https://` peer URLs only.
    pub peer_tls: Option<revkv_tls::PeerTls>,
    /// How the leader expires leases.
    pub lease: LeaseSettings,
    /// Who is told of grants, revokes, expiries and renewals (nobody by default).
    pub lease_events: crate::lease_events::LeaseEvents,
    /// How the leader promotes the learners added to be promoted once caught up.
    pub learner_promotion: crate::learner_promotion_events::LearnerPromotionSettings,
    /// Who is told of those promotions and of the learners' lag (nobody by default).
    pub learner_promotion_events: crate::learner_promotion_events::LearnerPromotionEvents,
    /// Sockets (the default), or a simulated network that carries every peer call
    /// (`peer/simulated.rs`; the listener given to `RaftMember::start` must match).
    pub peer_network: crate::peer::simulated::PeerNetwork,
    /// The fault switches of the member's files (disarmed by default), through which tests and
    /// simulations fail, fill or crash its disk.
    pub disks: MemberDisks,
}

/// The fault switches of a member's two stores. Clones share them, so whoever built the config
/// holds the switches of the member it starts.
#[derive(Clone, Debug, Default)]
pub struct MemberDisks {
    pub state_file: revkv_storage::DiskFaults,
    pub raft_log: revkv_storage::DiskFaults,
}
