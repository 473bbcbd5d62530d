//! Memory metrics: what the parts of a member that grow with load hold now, each beside the limit
//! that bounds it, and what the process's allocator holds in all. They answer "where does a
//! member's memory go" from a scrape, without a profiler: the state file's page cache and the raft
//! log's in-memory tail are bounded by flags (`--state-cache-bytes`, `--log-tail-bytes`), and the
//! key index grows with the number of keys and versions kept, as etcd's does.
//!
//! The node refreshes the parts before each scrape (like the store metrics); the allocator figures
//! come from the program that chose the allocator (the `revkv` binary reads jemalloc's), since a
//! library embedding a member cannot know which allocator it runs on.

use prometheus::{IntGaugeVec, Registry};

use crate::raft::saturating_i64;
use crate::registration::gauge_vec;

/// The sizes of a member's memory-holding parts at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryObservation {
    /// About how much the in-memory key index takes (every key and its versions).
    pub key_index_bytes: u64,
    /// The state file's page cache, and its limit.
    pub state_cache_bytes: u64,
    pub state_cache_limit_bytes: u64,
    /// The raft log entries held in memory, and the limit on the durable ones among them.
    pub raft_log_tail_bytes: u64,
    pub raft_log_tail_limit_bytes: u64,
}

/// What the process's allocator reports, in bytes (jemalloc's `stats.*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorObservation {
    /// Bytes the program has allocated and not freed.
    pub allocated: u64,
    /// Bytes in the pages that hold those allocations (allocated plus fragmentation).
    pub active: u64,
    /// Bytes of physical memory the allocator holds: active pages, its own metadata, and freed
    /// pages not yet given back to the kernel.
    pub resident: u64,
    /// Bytes of virtual memory the allocator keeps mapped but has given back to the kernel.
    pub retained: u64,
}

/// The memory metrics of one member.
#[derive(Clone, Debug)]
pub struct MemoryMetrics {
    part_bytes: IntGaugeVec,
    part_limit_bytes: IntGaugeVec,
    allocator_bytes: IntGaugeVec,
}

impl MemoryMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(MemoryMetrics {
            part_bytes: gauge_vec(
                registry,
                "revkv_memory_bytes",
                "Memory held now by each part of the member that grows with load: \
                 part=\"key_index\" (the in-memory index of every key and version, estimated), \
                 part=\"state_cache\" (the state file's page cache), part=\"raft_log_tail\" \
                 (raft log entries kept in memory for replication).",
                &["part"],
            )?,
            part_limit_bytes: gauge_vec(
                registry,
                "revkv_memory_limit_bytes",
                "The configured bound of each bounded part of revkv_memory_bytes: \
                 part=\"state_cache\" (--state-cache-bytes), part=\"raft_log_tail\" \
                 (--log-tail-bytes; entries not yet durable are kept beyond it).",
                &["part"],
            )?,
            allocator_bytes: gauge_vec(
                registry,
                "revkv_allocator_bytes",
                "What the process's memory allocator reports (the revkv binary's jemalloc): \
                 stat=\"allocated\" (live allocations), stat=\"active\" (their pages), \
                 stat=\"resident\" (physical memory it holds), stat=\"retained\" (mapped but \
                 given back to the kernel). Absent when the allocator is not known.",
                &["stat"],
            )?,
        })
    }

    /// Records the parts' sizes and limits.
    pub fn observe(&self, observation: &MemoryObservation) {
        let set = |gauges: &IntGaugeVec, part: &str, bytes: u64| {
            gauges.with_label_values(&[part]).set(saturating_i64(bytes));
        };
        set(&self.part_bytes, "key_index", observation.key_index_bytes);
        set(
            &self.part_bytes,
            "state_cache",
            observation.state_cache_bytes,
        );
        set(
            &self.part_bytes,
            "raft_log_tail",
            observation.raft_log_tail_bytes,
        );
        set(
            &self.part_limit_bytes,
            "state_cache",
            observation.state_cache_limit_bytes,
        );
        set(
            &self.part_limit_bytes,
            "raft_log_tail",
            observation.raft_log_tail_limit_bytes,
        );
    }

    /// Records the allocator's figures.
    pub fn observe_allocator(&self, observation: &AllocatorObservation) {
        let stats = [
            ("allocated", observation.allocated),
            ("active", observation.active),
            ("resident", observation.resident),
            ("retained", observation.retained),
        ];
        for (stat, bytes) in stats {
            self.allocator_bytes
                .with_label_values(&[stat])
                .set(saturating_i64(bytes));
        }
    }
}
