//! Reading the change history: events in revision order for watches, and the replica hash.

use redb::ReadableTable;
use xxhash_rust::xxh3::Xxh3;

use crate::codec::{self, VersionRecord};
use crate::error::{corrupt, db_error, ReadError};
use crate::mvcc::tables::{version_to_kv, HistoryTable, TableSet};
use crate::mvcc::{check_readable_revision, MvccStore};
use crate::types::{Event, EventBatch, EventKind, StateHash};

/// How many times `hash` walks the history before it gives up on a compaction being applied.
const HASH_ATTEMPTS: usize = 5;

/// The pause between two attempts: about one apply batch, long enough for the compaction's batch
/// to commit.
const HASH_PAUSE_BETWEEN_ATTEMPTS: std::time::Duration = std::time::Duration::from_millis(2);

/// What a hash covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HashScope {
    /// The history and the leases granted now (`GET /v1/hash`).
    KeysAndLeases,
    /// The history only (the consistency check).
    KeysOnly,
}

impl MvccStore {
    /// Every event with revision `>= from_revision`, in revision order and, within a revision, in
    /// the order the request made them; at most about `max_events` (whole revisions only, so a
    /// batch may exceed it by the size of one revision).
    ///
    /// History at or below the compact revision is incomplete, so `from_revision` must be above it;
    /// otherwise the answer is `Compacted` (a watch must then relist). A reader that already
    /// delivered everything before `from_revision` needs exactly this: compaction at
    /// `from_revision` removed its deletes.
    pub fn events_since(
        &self,
        from_revision: u64,
        max_events: usize,
        with_prev_kv: bool,
    ) -> Result<EventBatch, ReadError> {
        self.read_events(from_revision, max_events, with_prev_kv, false)
    }

    /// As [`MvccStore::events_since`], for a watch that starts at `from_revision`: as in etcd it
    /// may start at the compact revision itself, whose puts remain while its deletes are gone
    /// (compaction drops tombstones at or below it), and no event there has a previous value
    /// (that would be a read below the compact revision). Below it the answer is `Compacted`.
    pub fn events_from_start(
        &self,
        from_revision: u64,
        max_events: usize,
        with_prev_kv: bool,
    ) -> Result<EventBatch, ReadError> {
        self.read_events(from_revision, max_events, with_prev_kv, true)
    }

    /// As [`MvccStore::events_since`] when the answer takes at most `max_entries` history entries
    /// to read, and `None` otherwise, after reading at most `max_entries + 1` of them: bounded work,
    /// whatever a revision holds (one delete of a range may hold millions of events). When it
    /// answers, the answer is exactly `events_since`'s. The watch hub reads the revisions just
    /// applied this way on its own task, where a trip to the blocking pool would cost more than the
    /// read.
    pub fn events_since_if_at_most(
        &self,
        from_revision: u64,
        max_events: usize,
        with_prev_kv: bool,
        max_entries: usize,
    ) -> Result<Option<EventBatch>, ReadError> {
        self.read_events_within(
            from_revision,
            max_events,
            with_prev_kv,
            false,
            Some(max_entries),
        )
    }

    fn read_events(
        &self,
        from_revision: u64,
        max_events: usize,
        with_prev_kv: bool,
        may_start_at_compact_revision: bool,
    ) -> Result<EventBatch, ReadError> {
        let batch = self.read_events_within(
            from_revision,
            max_events,
            with_prev_kv,
            may_start_at_compact_revision,
            None,
        )?;
        Ok(batch.expect("a read without an entry limit always answers"))
    }

    /// The events of `read_events`, or `None` when reading them would visit more than
    /// `max_entries` history entries.
    fn read_events_within(
        &self,
        from_revision: u64,
        max_events: usize,
        with_prev_kv: bool,
        may_start_at_compact_revision: bool,
        max_entries: Option<usize>,
    ) -> Result<Option<EventBatch>, ReadError> {
        if from_revision == 0 {
            return Err(ReadError::Invalid(
                "start revision must be at least 1".into(),
            ));
        }
        let (tables, state) = self.read_tables()?;
        let compacted = if may_start_at_compact_revision {
            from_revision < state.compact_revision
        } else {
            from_revision <= state.compact_revision
        };
        if compacted {
            return Err(ReadError::Compacted {
                requested: from_revision,
                compact_revision: state.compact_revision,
            });
        }
        let file = tables.file;
        let mut events = Vec::new();
        let mut next_revision = from_revision.max(state.current_revision + 1);
        let mut last_revision = None;
        for (entries_before, entry) in tables
            .history
            .range((from_revision, 0u32)..)
            .map_err(db_error(file))?
            .enumerate()
        {
            let (key, bytes) = entry.map_err(db_error(file))?;
            let (revision, _) = key.value();
            if events.len() >= max_events.max(1) && last_revision != Some(revision) {
                next_revision = revision;
                break;
            }
            if max_entries.is_some_and(|limit| entries_before >= limit) {
                return Ok(None);
            }
            let record: VersionRecord = codec::decode(bytes.value()).map_err(corrupt(file))?;
            let compact_revision = state.compact_revision;
            if let Some(event) =
                event_of(&tables, record, revision, with_prev_kv, compact_revision)?
            {
                events.push(event);
                last_revision = Some(revision);
            }
        }
        Ok(Some(EventBatch {
            events,
            next_revision,
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
        }))
    }

    /// A hash of every history entry at or below `revision` (default: current) that compaction
    /// keeps (`TableSet::is_compacted_away`), and of the leases
    /// granted now, equal on every member that has applied the same log. Each field is hashed with
    /// a length or fixed width so that different states cannot hash the same bytes.
    ///
    /// Leases are not revisioned (a grant takes no revision), so the lease part is the table as of
    /// this read, whatever `revision` says: members compare equal once they have applied the same
    /// log entries, not merely the same revisions. A lease's checkpoint is left out, like its
    /// deadline: it is the lease's clock, which the leader checkpoints in the background without
    /// a revision, so including it would make members that applied the same revisions hash
    /// differently for a moment. Snapshots carry it.
    pub fn hash(&self, revision: Option<u64>) -> Result<StateHash, ReadError> {
        self.hash_with_scope(revision, HashScope::KeysAndLeases)
    }

    /// The hash of the history alone at `revision` (etcd's HashKV covers the keys only), which the
    /// consistency check compares between members. Unlike `hash` it depends on nothing but the
    /// revision and the compact revision: a lease grant takes no revision, so two healthy members
    /// at one revision may hold different leases for a moment, and comparing those would raise a
    /// false CORRUPT alarm.
    pub fn key_space_hash(&self, revision: u64) -> Result<StateHash, ReadError> {
        self.hash_with_scope(Some(revision), HashScope::KeysOnly)
    }

    fn hash_with_scope(
        &self,
        revision: Option<u64>,
        scope: HashScope,
    ) -> Result<StateHash, ReadError> {
        for _attempt in 0..HASH_ATTEMPTS {
            if let Some(hash) = self.hash_once(revision, scope)? {
                return Ok(hash);
            }
            std::thread::sleep(HASH_PAUSE_BETWEEN_ATTEMPTS);
        }
        Err(ReadError::Busy(format!(
            "a compaction moved the compact revision during each of {HASH_ATTEMPTS} attempts to \
             hash the store; try again"
        )))
    }

    /// One attempt at `hash`: `None` when the key index's compact revision was not the snapshot's
    /// before and after the walk (a compaction was being applied), which `is_compacted_away` needs.
    fn hash_once(
        &self,
        revision: Option<u64>,
        scope: HashScope,
    ) -> Result<Option<StateHash>, ReadError> {
        let (tables, leases, state) = self.read_tables_with_leases()?;
        let revision = revision.unwrap_or(state.current_revision);
        check_readable_revision(revision, &state)?;
        if self.key_index.read().compact_revision() != state.compact_revision {
            return Ok(None);
        }
        let file = tables.file;
        let mut hasher = Xxh3::new();
        hasher.update(&state.compact_revision.to_be_bytes());
        for entry in tables
            .history
            .range(..=(revision, u32::MAX))
            .map_err(db_error(file))?
        {
            let (key, bytes) = entry.map_err(db_error(file))?;
            let (entry_revision, position) = key.value();
            let record: VersionRecord = codec::decode(bytes.value()).map_err(corrupt(file))?;
            // A version a pending compaction has not cleaned yet is not part of the state:
            // members clean at their own pace and must still hash equal.
            let compact_revision = state.compact_revision;
            if tables.is_compacted_away(
                &record.key,
                entry_revision,
                record.tombstone,
                compact_revision,
            )? {
                continue;
            }
            hasher.update(&entry_revision.to_be_bytes());
            hasher.update(&position.to_be_bytes());
            hasher.update(&(record.key.len() as u64).to_be_bytes());
            hasher.update(&record.key);
            hasher.update(&(record.value.len() as u64).to_be_bytes());
            hasher.update(&record.value);
            hasher.update(&record.create_revision.to_be_bytes());
            hasher.update(&record.version.to_be_bytes());
            hasher.update(&record.lease.to_be_bytes());
            hasher.update(&[u8::from(record.tombstone)]);
        }
        let lease_records = match scope {
            HashScope::KeysAndLeases => leases.all(u64::MAX)?,
            HashScope::KeysOnly => Vec::new(),
        };
        for lease in lease_records {
            hasher.update(&lease.id.to_be_bytes());
            hasher.update(&lease.granted_ttl_seconds.to_be_bytes());
            hasher.update(&lease.attached_keys.to_be_bytes());
        }
        if self.key_index.read().compact_revision() != state.compact_revision {
            return Ok(None);
        }
        Ok(Some(StateHash {
            hash: hasher.digest(),
            revision,
            compact_revision: state.compact_revision,
        }))
    }
}

/// The event a history entry at `revision` stands for, or `None` for a delete at the compact
/// revision: compacted away, though a pending compaction may not have cleaned it yet. An event at
/// the compact revision has no previous value, since that would be a read below it.
fn event_of(
    tables: &TableSet<'_, impl HistoryTable>,
    record: VersionRecord,
    revision: u64,
    with_prev_kv: bool,
    compact_revision: u64,
) -> Result<Option<Event>, ReadError> {
    let at_compact_revision = revision <= compact_revision;
    if at_compact_revision && record.tombstone {
        return Ok(None);
    }
    let prev_kv = if with_prev_kv && !at_compact_revision {
        tables.kv_at(&record.key, revision - 1, true)?
    } else {
        None
    };
    let kind = if record.tombstone {
        EventKind::Delete
    } else {
        EventKind::Put
    };
    Ok(Some(Event {
        kind,
        kv: version_to_kv(record, revision),
        prev_kv,
    }))
}
