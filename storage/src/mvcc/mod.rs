//! The revisioned MVCC key-value store on one redb file (etcd v3 semantics).
//!
//! `MvccStore` is synchronous and safe to share between threads: one writer at a time applies
//! batches of committed raft entries (redb serialises write transactions), while any number of
//! readers read consistent snapshots through redb read transactions.
//!
//! Durability: a batch commits with `Durability::None` unless `durable_commit_interval` has passed
//! since the last durable commit; a crash loses at most that window of applied entries, which the
//! raft log (a separate, always-durable file) replays. `durable_applied()` tells the raft layer how far
//! the log may be purged. The argument is spelled out in docs/design/durability.md.

mod alarms;
mod apply;
mod auth_record;
mod compact;
mod defragment;
mod history;
mod key_history;
mod key_index;
#[cfg(test)]
mod key_index_tests;
mod learner_promotions;
#[cfg(test)]
mod lease_format_tests;
mod leases;
mod live_key_count;
mod migrate;
mod read;
mod read_snapshot;
#[cfg(test)]
mod read_snapshot_tests;
mod read_txn;
mod shared_history;
mod snapshot;
mod snapshot_frames;
mod store;
mod tables;
#[cfg(test)]
mod test_support;
mod txn_tree;
mod validate;

pub use defragment::Defragmented;
pub use snapshot::RestoreTarget;
pub use snapshot_frames::SnapshotSummary;
pub use snapshot_frames::{
    inspect_foreign, inspect_snapshot, inspect_snapshot_counted, open_backup_file,
    read_snapshot_frames, ForeignHistory, FrameFeed, ImportProgress, FOREIGN_STREAM_VERSION,
};
pub use store::{
    MvccStore, StoreOptions, DEFAULT_COMPACTION_INLINE_ENTRIES, DEFAULT_STATE_CACHE_BYTES,
};
pub use validate::{validate_range, validate_request, validate_txn};

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata};

use crate::auth::AuthState;
use crate::codec::{self, PageToken};
use crate::disk_faults::DiskFaults;
use crate::error::{corrupt, db_error, OpenError, ReadError, StorageFailure};
use crate::file::{open_revkv_file, META};
use crate::limits::Limits;
use crate::types::{
    Alarm, AppliedState, ApplyEntry, ApplyOutcome, EntryPayload, KeyRange, LearnerPromotion, LogId,
    RangeRequest, ReadResult, Request, Response, StoreStats,
};
use compact::PendingCompaction;
use key_index::{IndexHandle, KeyIndex, SharedKeyIndex};
use leases::{open_write_lease_tables, LeaseTables, ReadLeaseTables, WriteLeaseTables};
use read::ResolvedRange;
use read_snapshot::{ReadSnapshot, ReadSnapshotCache};
use shared_history::SharedHistory;
use snapshot::ExportMeta;
use store::DurabilityTracker;
use tables::{
    load_state, open_write_tables, save_state, ReadTables, StoreState, WriteTables, HISTORY,
    LEASES, LEASE_KEYS,
};

/// The file kind written into the state file's marker.
const STATE_FILE_KIND: &str = "state";

/// What one entry of a batch may change besides the state record.
struct BatchTables<'b, 'f, 't> {
    tables: &'b mut WriteTables<'f, 't>,
    leases: &'b mut WriteLeaseTables<'f, 't>,
    raised: &'b mut Vec<Alarm>,
    /// Loaded only for a batch with an auth change.
    auth: &'b mut Option<AuthState>,
    /// The compaction still to clean (`compact.rs`), loaded for every batch with a compaction.
    pending_compaction: &'b mut Option<PendingCompaction>,
    /// The learners waiting to be promoted, loaded only for a batch that changes them.
    promotions: &'b mut Option<Vec<LearnerPromotion>>,
}

impl MvccStore {
    /// Opens the state file at `path`, creating it when it does not exist.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, OpenError> {
        Self::open_with_faults(path, options, DiskFaults::default())
    }

    /// Opens the state file with every file operation going through `disk_faults` (for tests and
    /// simulations that fail, fill or crash the disk).
    pub fn open_with_faults(
        path: impl AsRef<Path>,
        options: StoreOptions,
        disk_faults: DiskFaults,
    ) -> Result<Self, OpenError> {
        let file = path.as_ref().to_path_buf();
        let database = open_revkv_file(
            &file,
            STATE_FILE_KIND,
            options.cache_bytes,
            &disk_faults,
            |write| initialise_tables(write, path.as_ref()),
        )?;
        migrate::upgrade_if_needed(&database, &file)?;
        let opened_at = (options.clock)();
        let store = MvccStore {
            database: RwLock::new(database),
            file,
            disk_faults,
            options,
            durability: Mutex::new(DurabilityTracker {
                last_durable_commit: opened_at,
                durable_applied: None,
                applied: None,
            }),
            auth: RwLock::new(Arc::new(AuthState::default())),
            compaction_pending: AtomicBool::new(false),
            cluster_id_cache: AtomicU64::new(0),
            key_index: SharedKeyIndex::default(),
            read_snapshot: ReadSnapshotCache::default(),
        };
        store.rebuild_key_index()?;
        store.reload_auth()?;
        store.reload_cluster_id()?;
        store.reload_compaction_pending()?;
        let applied = store.read_state()?.applied.last_applied;
        let mut tracker = store.tracker();
        tracker.durable_applied = applied;
        tracker.applied = applied;
        drop(tracker);
        Ok(store)
    }

    /// The database, to begin a transaction on.
    fn database(&self) -> RwLockReadGuard<'_, Database> {
        // A poisoned lock means a thread panicked while defragmenting; the database itself is
        // then whatever redb left, which its own checks guard.
        self.database
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Builds the key index from the committed history and swaps it in. A write transaction is
    /// held meanwhile (and then dropped without a commit), so no writer changes either under it.
    pub(crate) fn rebuild_key_index(&self) -> Result<(), StorageFailure> {
        let file = self.file.as_path();
        let write = self.database().begin_write().map_err(db_error(file))?;
        let index = {
            let meta = write.open_table(META).map_err(db_error(file))?;
            let compact_revision = load_state(&meta, file)?.compact_revision;
            let history = write.open_table(HISTORY).map_err(db_error(file))?;
            KeyIndex::build(&history, file, compact_revision)?
        };
        self.key_index.replace(index);
        drop(write);
        Ok(())
    }

    /// A write that failed may have left the key index ahead of the file (its changes are made
    /// before the commit): unless the index did not change since `changes_before`, it is rebuilt
    /// from the file before the failure is reported.
    pub(crate) fn undo_index_on_failure<T>(
        &self,
        changes_before: u64,
        result: Result<T, StorageFailure>,
    ) -> Result<T, StorageFailure> {
        let Err(error) = result else {
            return result;
        };
        if self.key_index.read().change_count() == changes_before {
            return Err(error);
        }
        Err(self.rebuild_key_index_after(error))
    }

    /// Rebuilds the key index from the file after `error` left it ahead, and answers the error to
    /// report: `error` itself, or both when the rebuild fails too.
    pub(crate) fn rebuild_key_index_after(&self, error: StorageFailure) -> StorageFailure {
        match self.rebuild_key_index() {
            Ok(()) => error,
            Err(rebuild_error) => StorageFailure::Invariant(format!(
                "{error}; and rebuilding the key index afterwards failed too: {rebuild_error}"
            )),
        }
    }

    /// How many keys (live or deleted but not compacted) and versions the key index holds.
    pub fn key_index_sizes(&self) -> (usize, u64) {
        self.key_index.read().sizes()
    }

    /// The path of the state file.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The state file's fault switches, for tests of what a failing disk does (see `disk_faults`).
    pub fn disk_faults(&self) -> &DiskFaults {
        &self.disk_faults
    }

    /// The limits every request is checked against.
    pub fn limits(&self) -> &Limits {
        &self.options.limits
    }

    /// Applies `entries` here and now if that is a short, bounded piece of work, and answers
    /// `None` (having done nothing) otherwise. Short means at most `SMALL_APPLY_MAX_ENTRIES`
    /// entries, each a put or a txn of single-key ops (no range deletes, lease revokes or
    /// compactions, whose work grows with the store), and no durable commit (an fsync of the state
    /// file) due. The raft layer calls this on its own task and hands anything else to a blocking
    /// thread: for a short batch the hand-off costs more than the work. The durability is decided
    /// once, so a durable-commit interval that ends during the call cannot turn a short batch into
    /// an fsync on the caller's thread.
    pub fn apply_batch_if_small(
        &self,
        entries: &[ApplyEntry],
    ) -> Option<Result<Vec<ApplyOutcome>, StorageFailure>> {
        let small = entries.len() <= apply::SMALL_APPLY_MAX_ENTRIES
            && entries.iter().all(apply::is_small_entry)
            && matches!(self.durability_for_next_commit(), Durability::None);
        small.then(|| self.apply_batch_with(entries, Durability::None))
    }

    /// Applies committed log entries in one write transaction, returning one outcome per entry.
    ///
    /// `Err` means nothing was written (a storage fault, or an entry at or below the last applied
    /// index, which would apply an entry twice). Rejected requests are `Ok` outcomes.
    pub fn apply_batch(&self, entries: &[ApplyEntry]) -> Result<Vec<ApplyOutcome>, StorageFailure> {
        self.apply_batch_with(entries, self.durability_for_next_commit())
    }

    fn apply_batch_with(
        &self,
        entries: &[ApplyEntry],
        durability: Durability,
    ) -> Result<Vec<ApplyOutcome>, StorageFailure> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let changes_before = self.key_index.read().change_count();
        let applied = self.apply_batch_once(entries, durability);
        self.undo_index_on_failure(changes_before, applied)
    }

    fn apply_batch_once(
        &self,
        entries: &[ApplyEntry],
        durability: Durability,
    ) -> Result<Vec<ApplyOutcome>, StorageFailure> {
        let file = self.file.as_path();
        let mut write = self.database().begin_write().map_err(db_error(file))?;
        write.set_durability(durability).map_err(db_error(file))?;
        let (outcomes, state, auth_changed, pending_changed) = {
            let mut meta = write.open_table(META).map_err(db_error(file))?;
            let mut state = load_state(&meta, file)?;
            let mut raised = alarms::load_alarms(&meta, file)?;
            let raised_before = raised.clone();
            let mut auth = match entries.iter().any(auth_record::is_auth_change) {
                true => Some(auth_record::load_auth(&meta, file)?),
                false => None,
            };
            let auth_before = auth.clone();
            let mut pending_compaction = match entries.iter().any(is_compaction) {
                true => compact::load_pending(&meta, file)?,
                false => None,
            };
            let pending_before = pending_compaction;
            let mut promotions = match entries.iter().any(is_learner_promotion) {
                true => Some(learner_promotions::load_promotions(&meta, file)?),
                false => None,
            };
            let promotions_before = promotions.clone();
            let mut tables = open_write_tables(&write, file, &self.key_index)?;
            let mut leases = open_write_lease_tables(&write, file)?;
            let mut outcomes = Vec::with_capacity(entries.len());
            // Before the first change: a violation stops the member with nothing changed, in the
            // file or in the key index.
            assert_applies_in_order(state.applied.last_applied, entries);
            for entry in entries {
                let before = (state.current_revision, state.compact_revision);
                let batch = BatchTables {
                    tables: &mut tables,
                    leases: &mut leases,
                    raised: &mut raised,
                    auth: &mut auth,
                    pending_compaction: &mut pending_compaction,
                    promotions: &mut promotions,
                };
                outcomes.push(self.apply_entry(batch, &mut state, entry)?);
                assert_revisions_move_by_rule(before, &state, entry.log_id);
                state.applied.last_applied = Some(entry.log_id);
                record_founding_cluster_id(&mut meta, file, entry)?;
            }
            save_state(&mut meta, file, &state)?;
            if raised != raised_before {
                alarms::save_alarms(&mut meta, file, &raised)?;
            }
            let pending_changed =
                (pending_compaction != pending_before).then_some(pending_compaction);
            if let Some(pending) = &pending_changed {
                compact::save_pending(&mut meta, file, pending.as_ref())?;
            }
            if let Some(promotions) =
                promotions.filter(|held| Some(held) != promotions_before.as_ref())
            {
                learner_promotions::save_promotions(&mut meta, file, &promotions)?;
            }
            let auth_changed = auth.filter(|auth| Some(auth) != auth_before.as_ref());
            if let Some(auth) = &auth_changed {
                auth_record::save_auth(&mut meta, file, auth)?;
            }
            (outcomes, state, auth_changed, pending_changed)
        };
        write.commit().map_err(db_error(file))?;
        self.record_commit(durability, state.applied.last_applied);
        if let Some(auth) = auth_changed {
            *self.auth_cache_mut() = Arc::new(auth);
        }
        if let Some(pending) = pending_changed {
            self.compaction_pending
                .store(pending.is_some(), Ordering::Release);
        }
        if entries.iter().any(|entry| entry.log_id.index == 0) {
            self.reload_cluster_id()?;
        }
        Ok(outcomes)
    }

    fn apply_entry<'f, 't>(
        &self,
        batch: BatchTables<'_, 'f, 't>,
        state: &mut StoreState,
        entry: &ApplyEntry,
    ) -> Result<ApplyOutcome, StorageFailure> {
        let BatchTables {
            tables,
            leases,
            raised,
            auth,
            pending_compaction,
            promotions,
        } = batch;
        if let EntryPayload::Request(request) = &entry.payload {
            // Before any request's own rules: an alarm refuses whole kinds of request, compaction
            // included, and changes nothing (every member refuses the same entries).
            if let Some(refusal) = alarms::refusal_by_alarms(raised, request) {
                return Ok(ApplyOutcome {
                    revision: state.current_revision,
                    result: Err(refusal),
                });
            }
        }
        match &entry.payload {
            EntryPayload::Request(request @ Request::Compact { revision }) => {
                if let Err(rejection) = validate_request(request, &self.options.limits) {
                    return Ok(ApplyOutcome {
                        revision: state.current_revision,
                        result: Err(rejection),
                    });
                }
                let inline_entries = self.options.compaction_inline_entries;
                apply::compact_request(tables, state, *revision, pending_compaction, inline_entries)
            }
            EntryPayload::Request(Request::Auth(change)) => {
                let records = auth.as_mut().ok_or_else(|| {
                    StorageFailure::Invariant(
                        "an auth change in a batch that did not load the records".into(),
                    )
                })?;
                let result =
                    auth_record::apply_change(records, change, &self.options.limits).map(|()| {
                        Response::Auth {
                            auth_revision: records.revision,
                        }
                    });
                Ok(ApplyOutcome {
                    revision: state.current_revision,
                    result,
                })
            }
            EntryPayload::Request(Request::LearnerPromotion(change)) => {
                let held = promotions.as_mut().ok_or_else(|| {
                    StorageFailure::Invariant(
                        "a learner promotion in a batch that did not load the intents".into(),
                    )
                })?;
                let result = learner_promotions::change_promotions(held, change)
                    .map(|()| Response::LearnerPromotions(held.clone()));
                Ok(ApplyOutcome {
                    revision: state.current_revision,
                    result,
                })
            }
            EntryPayload::Request(request @ Request::Alarm { action, alarm }) => {
                let result = validate_request(request, &self.options.limits)
                    .and_then(|()| alarms::change_alarm(raised, *action, *alarm))
                    .map(|()| Response::Alarms(raised.clone()));
                Ok(ApplyOutcome {
                    revision: state.current_revision,
                    result,
                })
            }
            EntryPayload::Request(request) => {
                let request = (request, entry.log_id.index);
                apply::apply_request(tables, leases, state, request, &self.options.limits)
            }
            EntryPayload::Blank => Ok(empty_outcome(state)),
            EntryPayload::Membership(membership) => {
                state.applied.membership = Some(membership.clone());
                Ok(empty_outcome(state))
            }
        }
    }

    /// The alarms raised, in order (see `Request::Alarm`).
    pub fn alarms(&self) -> Result<Vec<Alarm>, StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        alarms::load_alarms(&meta, file)
    }

    /// The learners waiting to be promoted once they catch up, by member id (see
    /// `Request::LearnerPromotion`).
    pub fn learner_promotions(&self) -> Result<Vec<LearnerPromotion>, StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        learner_promotions::load_promotions(&meta, file)
    }

    /// The auth records as last committed (cheap: a shared pointer, no read transaction).
    pub fn auth(&self) -> Arc<AuthState> {
        self.auth
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn auth_cache_mut(&self) -> std::sync::RwLockWriteGuard<'_, Arc<AuthState>> {
        // The guarded value is one pointer, replaced whole: a panic cannot leave it half-written.
        self.auth
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads the auth records from the state file into the cache (on open and after an import).
    pub(crate) fn reload_auth(&self) -> Result<(), StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        let auth = auth_record::load_auth(&meta, file)?;
        *self.auth_cache_mut() = Arc::new(auth);
        Ok(())
    }

    /// Makes every applied batch durable now.
    pub fn flush(&self) -> Result<(), StorageFailure> {
        let file = self.file.as_path();
        let mut write = self.database().begin_write().map_err(db_error(file))?;
        write
            .set_durability(Durability::Immediate)
            .map_err(db_error(file))?;
        let applied = {
            let meta = write.open_table(META).map_err(db_error(file))?;
            load_state(&meta, file)?.applied.last_applied
        };
        write.commit().map_err(db_error(file))?;
        self.record_commit(Durability::Immediate, applied);
        Ok(())
    }

    /// The last applied log id that is known to survive a crash. The raft log must keep every entry
    /// after it.
    pub fn durable_applied(&self) -> Option<LogId> {
        self.tracker().durable_applied
    }

    /// The last applied log id and membership, as committed (durable or not).
    pub fn applied_state(&self) -> Result<AppliedState, StorageFailure> {
        Ok(self.read_state()?.applied)
    }

    /// The cluster id as last committed, without a read transaction: 0 while there is none (a
    /// cluster founded before cluster ids existed, or one whose founding entry is not applied yet),
    /// which is also what etcd's headers carry when they know no cluster.
    pub fn known_cluster_id(&self) -> u64 {
        self.cluster_id_cache.load(Ordering::Acquire)
    }

    pub(crate) fn reload_cluster_id(&self) -> Result<(), StorageFailure> {
        let cluster_id = self.cluster_id()?.unwrap_or(0);
        self.cluster_id_cache.store(cluster_id, Ordering::Release);
        Ok(())
    }

    /// The id of the cluster this store belongs to (None for a store that predates cluster ids and
    /// has not yet been given one).
    pub fn cluster_id(&self) -> Result<Option<u64>, StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        tables::load_cluster_id(&meta, file)
    }

    /// The current store revision.
    pub fn current_revision(&self) -> Result<u64, StorageFailure> {
        Ok(self.read_state()?.current_revision)
    }

    /// The revision of the last compaction (0 when never compacted).
    pub fn compact_revision(&self) -> Result<u64, StorageFailure> {
        Ok(self.read_state()?.compact_revision)
    }

    /// Key and history counts (O(1) each in redb) and the file size.
    pub fn stats(&self) -> Result<StoreStats, StorageFailure> {
        let (tables, leases, state) = self.read_tables_with_leases()?;
        let file = tables.file;
        let file_bytes = std::fs::metadata(file)
            .map_err(|error| StorageFailure::Database {
                file: file.to_path_buf(),
                source: Box::new(redb::Error::Io(error)),
            })?
            .len();
        let index = self.key_index.read();
        Ok(StoreStats {
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            live_keys: state.live_keys,
            history_entries: tables.history.len().map_err(db_error(file))?,
            file_bytes,
            bytes_in_use: index.record_bytes(),
            leases: leases.count()?,
            key_index_bytes: index.estimated_bytes(),
            state_cache_bytes: self.database().cache_stats().used_bytes() as u64,
            state_cache_limit_bytes: self.options.cache_bytes as u64,
        })
    }

    /// Reads a range (or one key) at the current or a past revision, with paging.
    pub fn range(&self, request: &RangeRequest) -> Result<ReadResult, ReadError> {
        validate_range(request, &self.options.limits)?;
        let at_current_revision = request.revision.is_none() && request.continue_token.is_none();
        match self.range_once(request, self.read_tables()?) {
            // A compaction to a revision above this read's snapshot was applied while it read
            // (`key_index.rs`); a read of the current revision reads the newer one instead.
            Err(ReadError::Compacted { .. }) if at_current_revision => {
                self.range_once(request, self.read_tables_fresh()?)
            }
            answer => answer,
        }
    }

    fn range_once(
        &self,
        request: &RangeRequest,
        (tables, state): (ReadTables<'_>, Arc<StoreState>),
    ) -> Result<ReadResult, ReadError> {
        let keys = request
            .range
            .as_ref()
            .ok_or_else(|| ReadError::Invalid("a range read needs a key or prefix".into()))?;
        let resolved = self.resolve_range(keys, request, &state)?;
        let mut response = tables.read_range(&resolved)?;
        if response.more && !request.count_only {
            response.continue_token = self.continue_token(&resolved, &response)?;
        }
        Ok(ReadResult {
            revision: resolved.revision,
            response,
        })
    }

    /// Turns a request into a resolved range: picks the revision (from a continue token, the request,
    /// or the current one), checks it against the compaction and the current revision, and caps
    /// the limit.
    fn resolve_range(
        &self,
        keys: &KeyRange,
        request: &RangeRequest,
        state: &StoreState,
    ) -> Result<ResolvedRange, ReadError> {
        let mut start = keys.start.clone();
        let end = keys.exclusive_end();
        let mut revision = request.revision.unwrap_or(state.current_revision);
        let mut known_count = None;
        if let Some(text) = &request.continue_token {
            let token = codec::decode_page_token(text).map_err(|error| {
                ReadError::Invalid(format!("malformed continue token: {error}"))
            })?;
            check_token_fits(&token, keys, request)?;
            revision = token.revision;
            start = token.resume_key;
            known_count = Some(token.remaining_count);
        }
        check_readable_revision(revision, state)?;
        let cap = self.options.limits.max_range_keys;
        Ok(ResolvedRange {
            start,
            end,
            revision,
            limit: request.limit.unwrap_or(cap).min(cap),
            keys_only: request.keys_only,
            count_only: request.count_only,
            known_count,
        })
    }

    fn continue_token(
        &self,
        resolved: &ResolvedRange,
        response: &crate::types::RangeResponse,
    ) -> Result<Option<String>, StorageFailure> {
        let Some(last) = response.kvs.last() else {
            return Ok(None);
        };
        let token = PageToken {
            revision: resolved.revision,
            resume_key: crate::types::key_successor(&last.key),
            remaining_count: response.count - response.kvs.len() as u64,
        };
        codec::encode_page_token(&token)
            .map(Some)
            .map_err(corrupt(&self.file))
    }

    /// Opens the data tables and reads the state in one read transaction (a consistent snapshot).
    /// The snapshot is the one the reads since the last commit share (`read_snapshot.rs`), or a
    /// new one that later reads then share.
    pub(crate) fn read_tables(&self) -> Result<(ReadTables<'_>, Arc<StoreState>), StorageFailure> {
        let database = self.database();
        let snapshot = self.read_snapshot.shared_or_fresh(|| {
            let file = self.file.as_path();
            let read = database.begin_read().map_err(db_error(file))?;
            let (tables, state) = read_tables_of(&read, file, &self.key_index)?;
            Ok(ReadSnapshot {
                history: tables.history,
                state: Arc::new(state),
            })
        })?;
        drop(database);
        Ok(self.tables_of_snapshot(snapshot))
    }

    /// As `read_tables`, but always from a read transaction of its own: for a read that must
    /// see the newest commit even if it has not yet been announced to the shared snapshot (a
    /// read repeated because a compaction overtook its snapshot).
    pub(crate) fn read_tables_fresh(
        &self,
    ) -> Result<(ReadTables<'_>, Arc<StoreState>), StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let (tables, state) = read_tables_of(&read, file, &self.key_index)?;
        Ok((tables, Arc::new(state)))
    }

    fn tables_of_snapshot(&self, snapshot: ReadSnapshot) -> (ReadTables<'_>, Arc<StoreState>) {
        let tables = ReadTables {
            file: self.file.as_path(),
            history: snapshot.history,
            index: IndexHandle::reader(&self.key_index),
        };
        (tables, snapshot.state)
    }

    /// The data tables, the lease tables and the state, all from one read transaction.
    pub(crate) fn read_tables_with_leases(
        &self,
    ) -> Result<(ReadTables<'_>, ReadLeaseTables<'_>, StoreState), StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let (tables, state) = read_tables_of(&read, file, &self.key_index)?;
        Ok((tables, read_lease_tables_of(&read, file)?, state))
    }

    /// The data tables, the lease tables, the state and the cluster id, all from one read
    /// transaction: what a snapshot stream is written from.
    #[allow(clippy::type_complexity)]
    pub(crate) fn read_for_export(
        &self,
    ) -> Result<(ReadTables<'_>, ReadLeaseTables<'_>, StoreState, ExportMeta), StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let (tables, state) = read_tables_of(&read, file, &self.key_index)?;
        let export_meta = {
            let meta = read.open_table(META).map_err(db_error(file))?;
            ExportMeta {
                cluster_id: tables::load_cluster_id(&meta, file)?,
                alarms: alarms::load_alarms(&meta, file)?,
                auth: auth_record::load_auth(&meta, file)?,
                promotions: learner_promotions::load_promotions(&meta, file)?,
            }
        };
        Ok((
            tables,
            read_lease_tables_of(&read, file)?,
            state,
            export_meta,
        ))
    }

    /// Opens the lease tables in a read transaction of their own.
    pub(crate) fn read_lease_tables(&self) -> Result<ReadLeaseTables<'_>, StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        read_lease_tables_of(&read, file)
    }

    fn read_state(&self) -> Result<StoreState, StorageFailure> {
        let file = self.file.as_path();
        let read = self.database().begin_read().map_err(db_error(file))?;
        let meta = read.open_table(META).map_err(db_error(file))?;
        load_state(&meta, file)
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, DurabilityTracker> {
        // A poisoned lock only means another thread panicked while holding it; the tracker holds
        // plain values that are always consistent, so keep using it.
        self.durability
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn durability_for_next_commit(&self) -> Durability {
        let interval = self.options.durable_commit_interval;
        let now = (self.options.clock)();
        if interval.is_zero() || now.duration_since(self.tracker().last_durable_commit) >= interval
        {
            Durability::Immediate
        } else {
            Durability::None
        }
    }

    /// Every commit of the store ends here, before anything it answers reads again: the reads
    /// after it must not share the snapshot from before it.
    fn record_commit(&self, durability: Durability, applied: Option<LogId>) {
        self.read_snapshot.invalidate();
        let mut tracker = self.tracker();
        tracker.applied = applied;
        if matches!(durability, Durability::Immediate) {
            tracker.last_durable_commit = (self.options.clock)();
            tracker.durable_applied = applied;
        }
    }
}

fn empty_outcome(state: &StoreState) -> ApplyOutcome {
    ApplyOutcome {
        revision: state.current_revision,
        result: Ok(Response::Empty),
    }
}

/// Stops the member when a batch does not continue the applied log strictly in order: applying an
/// entry twice would give its changes a second revision, which no other member has. Only the raft
/// layer's bug can reach this (it hands over committed entries in log order), never a client.
fn assert_applies_in_order(last_applied: Option<LogId>, entries: &[ApplyEntry]) {
    let mut previous = last_applied;
    for entry in entries {
        assert!(
            previous.is_none_or(|previous| entry.log_id.index > previous.index),
            "an entry is never applied twice: entry {} after entry {}",
            entry.log_id.index,
            previous.map_or(0, |previous| previous.index)
        );
        previous = Some(entry.log_id);
    }
}

/// Stops the member when one applied entry moved the revisions against their rules: the current
/// revision grows by one for an entry that changed something and not at all otherwise, and the
/// compact revision never passes it nor goes back. A store that broke them would answer reads and
/// watches wrong from then on.
fn assert_revisions_move_by_rule(
    (revision_before, compact_before): (u64, u64),
    state: &StoreState,
    log_id: LogId,
) {
    let revision = state.current_revision;
    assert!(
        revision == revision_before || revision == revision_before + 1,
        "revisions grow by one per applied change: entry {} moved the revision from \
         {revision_before} to {revision}",
        log_id.index
    );
    assert!(
        compact_before <= state.compact_revision && state.compact_revision <= revision,
        "the compact revision never goes back nor passes the current revision: entry {} moved it \
         from {compact_before} to {} at revision {revision}",
        log_id.index,
        state.compact_revision
    );
}

/// Checks that `revision` can be read: not above the current revision, not below the compaction.
pub(crate) fn check_readable_revision(revision: u64, state: &StoreState) -> Result<(), ReadError> {
    if revision > state.current_revision {
        return Err(ReadError::FutureRevision {
            requested: revision,
            current: state.current_revision,
        });
    }
    if revision < state.compact_revision {
        return Err(ReadError::Compacted {
            requested: revision,
            compact_revision: state.compact_revision,
        });
    }
    Ok(())
}

/// A continue token must resume inside the requested range and at the requested revision.
fn check_token_fits(
    token: &PageToken,
    keys: &KeyRange,
    request: &RangeRequest,
) -> Result<(), ReadError> {
    if let Some(revision) = request.revision {
        if revision != token.revision {
            return Err(ReadError::Invalid(format!(
                "continue token is for revision {}, the request asks for {revision}",
                token.revision
            )));
        }
    }
    let after_start = token.resume_key >= keys.start;
    let before_end = keys
        .exclusive_end()
        .is_none_or(|end| token.resume_key <= end);
    if !(after_start && before_end) {
        return Err(ReadError::Invalid(
            "continue token does not belong to this range".into(),
        ));
    }
    Ok(())
}

fn read_tables_of<'f>(
    read: &redb::ReadTransaction,
    file: &'f Path,
    key_index: &'f SharedKeyIndex,
) -> Result<(ReadTables<'f>, StoreState), StorageFailure> {
    let meta = read.open_table(META).map_err(db_error(file))?;
    let state = load_state(&meta, file)?;
    let tables = ReadTables {
        file,
        history: SharedHistory::new(read.open_table(HISTORY).map_err(db_error(file))?),
        index: IndexHandle::reader(key_index),
    };
    Ok((tables, state))
}

/// Names the cluster after its founding membership: the membership entry at log index 0, which
/// every founding member applies identically (raft commits one entry there), so every member
/// derives the same id without talking about it. A restored store already has its new cluster's
/// id, and a store that joined through a snapshot got it from the snapshot, so an existing id is
/// kept.
fn record_founding_cluster_id(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    entry: &ApplyEntry,
) -> Result<(), StorageFailure> {
    let EntryPayload::Membership(membership) = &entry.payload else {
        return Ok(());
    };
    if entry.log_id.index != 0 || tables::load_cluster_id(meta, file)?.is_some() {
        return Ok(());
    }
    tables::save_cluster_id(meta, file, xxhash_rust::xxh3::xxh3_64(membership))
}

/// Opens the lease tables in an existing read transaction (for reads that must see the leases and
/// the key-value tables at one point, such as snapshots and hashes).
pub(crate) fn read_lease_tables_of<'f>(
    read: &redb::ReadTransaction,
    file: &'f Path,
) -> Result<ReadLeaseTables<'f>, StorageFailure> {
    Ok(LeaseTables {
        file,
        leases: read.open_table(LEASES).map_err(db_error(file))?,
        lease_keys: read.open_table(LEASE_KEYS).map_err(db_error(file))?,
    })
}

fn initialise_tables(write: &redb::WriteTransaction, file: &Path) -> Result<(), StorageFailure> {
    write.open_table(HISTORY).map_err(db_error(file))?;
    open_write_lease_tables(write, file)?;
    migrate::mark_current_layout(write, file)?;
    let mut meta = write.open_table(META).map_err(db_error(file))?;
    save_state(&mut meta, file, &StoreState::empty())
}

/// True when `entry` changes the learners waiting to be promoted.
fn is_learner_promotion(entry: &ApplyEntry) -> bool {
    matches!(
        entry.payload,
        EntryPayload::Request(Request::LearnerPromotion(_))
    )
}

/// True when `entry` compacts.
fn is_compaction(entry: &ApplyEntry) -> bool {
    matches!(
        entry.payload,
        EntryPayload::Request(Request::Compact { .. })
    )
}
