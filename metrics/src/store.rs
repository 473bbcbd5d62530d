//! Store metrics: the current and compact revisions, the number of live keys, the size of each
//! database file and the state file's bytes in use, and the alarms raised. The node refreshes them from cheap reads just before a scrape is answered (see
//! [`Metrics::add_before_scrape`](crate::Metrics::add_before_scrape)), so they cost nothing between
//! scrapes.

use prometheus::{IntGauge, IntGaugeVec, Registry};

use crate::raft::saturating_i64;
use crate::registration::{gauge, gauge_vec};

/// What the store looks like at one moment, in plain numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreObservation {
    pub revision: u64,
    pub compact_revision: u64,
    pub keys: u64,
    /// Size of the MVCC state file.
    pub state_file_bytes: u64,
    /// Bytes of records the state file holds (without its B-tree's pages).
    pub state_bytes_in_use: u64,
    /// Size of the raft log file.
    pub log_file_bytes: u64,
    /// NOSPACE alarms raised in the cluster (one per member past its quota).
    pub no_space_alarms: u64,
    /// CORRUPT alarms raised in the cluster (one per member whose data differs).
    pub corrupt_alarms: u64,
}

/// The store metrics of one member.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    revision: IntGauge,
    compact_revision: IntGauge,
    keys: IntGauge,
    db_size_bytes: IntGaugeVec,
    state_bytes_in_use: IntGauge,
    alarms: IntGaugeVec,
}

impl StoreMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(StoreMetrics {
            revision: gauge(
                registry,
                "revkv_store_revision",
                "The store revision this member has applied.",
            )?,
            compact_revision: gauge(
                registry,
                "revkv_store_compact_revision",
                "The revision of the last compaction (0 when never compacted).",
            )?,
            keys: gauge(
                registry,
                "revkv_store_keys",
                "Keys live at the current revision.",
            )?,
            db_size_bytes: gauge_vec(
                registry,
                "revkv_store_db_size_bytes",
                "Size on disk of each database file: file=\"state\" (MVCC store) or \
                 file=\"log\" (raft log).",
                &["file"],
            )?,
            state_bytes_in_use: gauge(
                registry,
                "revkv_store_state_bytes_in_use",
                "Bytes of records the state file holds (every uncompacted version as stored, \
                 without the B-tree's own pages); the state file's size less this is at most \
                 what defragmentation can give back.",
            )?,
            alarms: gauge_vec(
                registry,
                "revkv_alarms",
                "Alarms raised in the cluster, by kind (NOSPACE: a member's state file passed \
                 --quota-backend-bytes, and writes that grow the store are refused; CORRUPT: a \
                 member's data differs from the others', and writes are refused).",
                &["kind"],
            )?,
        })
    }

    pub fn observe(&self, observation: &StoreObservation) {
        self.revision.set(saturating_i64(observation.revision));
        self.compact_revision
            .set(saturating_i64(observation.compact_revision));
        self.keys.set(saturating_i64(observation.keys));
        self.db_size_bytes
            .with_label_values(&["state"])
            .set(saturating_i64(observation.state_file_bytes));
        self.db_size_bytes
            .with_label_values(&["log"])
            .set(saturating_i64(observation.log_file_bytes));
        self.state_bytes_in_use
            .set(saturating_i64(observation.state_bytes_in_use));
        self.alarms
            .with_label_values(&["NOSPACE"])
            .set(saturating_i64(observation.no_space_alarms));
        self.alarms
            .with_label_values(&["CORRUPT"])
            .set(saturating_i64(observation.corrupt_alarms));
    }
}
