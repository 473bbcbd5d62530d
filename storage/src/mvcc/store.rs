//! The MVCC store's own state: the `MvccStore` struct, the options it opens with and what it
//! knows about its durability. Its operations are in the files beside this one (`mod.rs` opens and
//! applies, `compact.rs`, `snapshot.rs`, ... each add theirs), which all name this file and none of
//! which this file names, so the imports run one way.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::Database;

use crate::auth::AuthState;
use crate::disk_faults::DiskFaults;
use crate::limits::Limits;
use crate::mvcc::key_index::SharedKeyIndex;
use crate::mvcc::read_snapshot::ReadSnapshotCache;
use crate::types::LogId;

/// Default `StoreOptions::compaction_inline_entries`: about a millisecond of cleaning, the same
/// order as etcd's compaction batch (1,000 keys).
pub const DEFAULT_COMPACTION_INLINE_ENTRIES: usize = 1_000;

/// Default `StoreOptions::cache_bytes`: redb's page cache of the state file. The kernel's page
/// cache holds the file's pages too (redb reads with `pread`), so a page redb caches is cached
/// twice; redb's own cache needs the hot part (branch pages, the history tree's right edge, the
/// keys being read), not the whole file. 64 MiB holds that with room to spare for the stores
/// measured (docs/BENCHMARKS.md: no measurable cost against 256 MiB at 100,000 and 150,000 keys,
/// and 30-190 MB less per member); `--state-cache-bytes` raises it for read-heavy stores.
pub const DEFAULT_STATE_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// How the store is opened.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub limits: Limits,
    /// Longest time between durable commits of applied batches. Zero makes every commit durable.
    pub durable_commit_interval: Duration,
    /// redb page cache size in bytes ([`DEFAULT_STATE_CACHE_BYTES`] unless set).
    pub cache_bytes: usize,
    /// History entries a compaction cleans inside its own apply; the rest of its window is left
    /// to `MvccStore::compact_step`, so a huge window never stalls the apply loop.
    pub compaction_inline_entries: usize,
    /// Where the store reads the time that paces its durable commits: the machine's monotonic
    /// clock, or a simulation's, whose time is its own (so the same seed makes the same commits
    /// durable, and a simulated crash loses the same ones).
    pub clock: fn() -> Instant,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            limits: Limits::default(),
            durable_commit_interval: Duration::from_millis(500),
            cache_bytes: DEFAULT_STATE_CACHE_BYTES,
            compaction_inline_entries: DEFAULT_COMPACTION_INLINE_ENTRIES,
            clock: Instant::now,
        }
    }
}

/// What the store knows about its own durability.
#[derive(Debug)]
pub(super) struct DurabilityTracker {
    pub(super) last_durable_commit: Instant,
    /// The applied log id as of the last durable commit: what survives a crash.
    pub(super) durable_applied: Option<LogId>,
    /// The applied log id of the newest commit, durable or not.
    pub(super) applied: Option<LogId>,
}

/// The MVCC store. See the module documentation of `mvcc/mod.rs`. Its fields belong to the `mvcc`
/// module (`pub(super)`): its files read them directly, as when the struct was in `mod.rs`.
pub struct MvccStore {
    /// Every transaction begins under the read side (the guard is dropped at once: transactions
    /// do not borrow the database); defragmentation takes the write side, so no transaction
    /// begins while it runs.
    pub(super) database: RwLock<Database>,
    pub(super) file: PathBuf,
    pub(super) disk_faults: DiskFaults,
    pub(super) options: StoreOptions,
    pub(super) durability: Mutex<DurabilityTracker>,
    /// The auth records as last committed, read on every request a front-end checks; replaced
    /// after a batch that changed them and after a snapshot import.
    pub(super) auth: RwLock<Arc<AuthState>>,
    /// True while a compaction window is not fully cleaned (`compact.rs`), so the background
    /// compactor asks without a read transaction.
    pub(super) compaction_pending: AtomicBool,
    /// The cluster id as last committed (0 until the founding membership is applied), read for
    /// every gRPC response header; reloaded after the batch that records it and after an import.
    pub(super) cluster_id_cache: AtomicU64,
    /// Every version in `history`, by key (`key_index.rs`): built at open, changed by the writer
    /// with the history, rebuilt after a write that failed.
    pub(super) key_index: SharedKeyIndex,
    /// The snapshot the reads since the last commit share (`read_snapshot.rs`); every commit
    /// forgets it (`record_commit`).
    pub(super) read_snapshot: ReadSnapshotCache,
}
