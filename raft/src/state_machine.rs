//! openraft's `RaftStateMachine` over the storage crate's `MvccStore`.
//!
//! Committed entries arrive as a stream; they are applied in chunks of at most
//! `MAX_ENTRIES_PER_APPLY_BATCH`, each chunk in one storage transaction. A small chunk
//! (`MvccStore::apply_batch_if_small` decides and applies it) is applied on the state machine's own
//! task; any other on the blocking pool. After each chunk the applied position (log index and store
//! revision) is published on a watch channel, which the read paths wait on, and only then are the
//! chunk's responders answered, so a writer that waits for its entry to be applied finds it so.
//!
//! The lessor (`lessor.rs`) is told of every applied lease grant, revoke, checkpoint and checkpoint
//! clear (before the applied position moves past them), and reloaded from the store when a
//! snapshot is installed, so every member's lessor holds the store's leases and checkpoints.
//!
//! Snapshots are the store's own export stream written to a file (`snapshot_file`), sent and
//! received as a stream (`peer::snapshot_transfer`) and imported from the file, so no member
//! holds a snapshot in memory. A snapshot is identified by its last log id (openraft 0.10
//! dropped the separate snapshot id).

use std::io;
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use revkv_storage::{codec, ApplyEntry, ApplyOutcome, MvccStore, Request, Response};
use tokio::sync::watch;

use crate::blocking::{invalid_data, run_blocking};
use crate::lessor::Lessor;
use crate::snapshot_file::{SnapshotFile, SnapshotFiles};
use crate::storage_fault::FirstStorageFault;
use crate::timings::StorageTimings;
use crate::types::alias::{
    Entry, EntryResponder, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
};
use crate::types::{from_storage_log_id, to_storage_log_id, Rejection, TypeConfig, WriteResult};
use crate::write_path_trace::{self, Stage};

/// Most entries applied in one storage transaction.
pub const MAX_ENTRIES_PER_APPLY_BATCH: usize = 1024;

/// How far the state machine has applied: published after every applied chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppliedPosition {
    pub log_index: u64,
    pub revision: u64,
}

/// The state machine of one member.
pub struct StateMachine {
    store: Arc<MvccStore>,
    snapshot_files: Arc<SnapshotFiles>,
    applied: watch::Sender<AppliedPosition>,
    timings: StorageTimings,
    lessor: Arc<Lessor>,
    faults: FirstStorageFault,
}

impl StateMachine {
    /// Wraps a store; the watch channel starts at the store's current position.
    pub fn new(
        store: Arc<MvccStore>,
        snapshot_files: Arc<SnapshotFiles>,
        timings: StorageTimings,
    ) -> revkv_storage::Result<Self> {
        let position = AppliedPosition {
            log_index: store
                .applied_state()?
                .last_applied
                .map_or(0, |log_id| log_id.index),
            revision: store.current_revision()?,
        };
        let lessor = Arc::new(Lessor::default());
        lessor.load(&store.leases()?, crate::clock::Instant::now());
        Ok(StateMachine {
            store,
            snapshot_files,
            applied: watch::Sender::new(position),
            timings,
            lessor,
            faults: FirstStorageFault::default(),
        })
    }

    /// Keeps this state machine's first failure in `faults` (the member shares it with its log).
    pub(crate) fn with_first_fault(mut self, faults: FirstStorageFault) -> Self {
        self.faults = faults;
        self
    }

    /// The lessor this state machine keeps in step with the store's leases.
    pub fn lessor(&self) -> Arc<Lessor> {
        self.lessor.clone()
    }

    /// A receiver of applied positions, for read paths that wait for the store to catch up.
    pub fn subscribe(&self) -> watch::Receiver<AppliedPosition> {
        self.applied.subscribe()
    }

    async fn apply_chunk(
        &self,
        entries: Vec<ApplyEntry>,
        responders: Vec<Option<openraft::storage::ApplyResponder<TypeConfig>>>,
    ) -> io::Result<()> {
        let Some(last_log_index) = entries.last().map(|entry| entry.log_id.index) else {
            return Ok(());
        };
        assert_applies_in_log_order(&entries, *self.applied.borrow());
        let store = self.store.clone();
        let entry_count = entries.len();
        let lease_changes: Vec<Option<Request>> = entries.iter().map(lease_change).collect();
        let started = std::time::Instant::now();
        write_path_trace::mark(Stage::Applying, last_log_index);
        // A small chunk (a few puts or single-key txns, no fsync due) takes about 20 µs to apply,
        // less than handing it to a blocking thread and back costs in wake-ups; a single client's
        // write waits for both. Anything bigger, or a durable commit, runs off the runtime.
        let outcomes = match store.apply_batch_if_small(&entries) {
            Some(applied) => applied.map_err(io::Error::other)?,
            None => run_blocking(move || store.apply_batch(&entries)).await?,
        };
        write_path_trace::mark(Stage::Applied, last_log_index);
        self.timings.entries_applied(started.elapsed(), entry_count);
        // One outcome per entry, in order: otherwise the zips below would leave writers unanswered.
        assert_eq!(
            outcomes.len(),
            entry_count,
            "the store answers every entry it applies"
        );
        let Some(last_revision) = outcomes.last().map(|outcome| outcome.revision) else {
            return Ok(());
        };
        let previous_revision = self.applied.borrow().revision;
        assert!(
            last_revision >= previous_revision,
            "the store revision never goes back: entries up to {last_log_index} left it at \
             {last_revision}, after {previous_revision}"
        );
        for (outcome, change) in outcomes.iter().zip(&lease_changes) {
            if let (Some(change), Ok(response)) = (change, &outcome.result) {
                self.tell_lessor(change, response);
            }
        }
        // The applied position moves before any writer hears its answer: a writer's next step
        // is to wait until this member has applied its entry (read-your-writes, `RaftMember::
        // write`), and answering first let it look too early, park, and be woken once more.
        self.applied.send_replace(AppliedPosition {
            log_index: last_log_index,
            revision: last_revision,
        });
        for (outcome, responder) in outcomes.into_iter().zip(responders) {
            let result = write_result(outcome);
            if let Some(responder) = responder {
                responder.send(result);
            }
        }
        Ok(())
    }
}

impl StateMachine {
    /// Tells the lessor of an applied grant, revoke, checkpoint or checkpoint clear.
    fn tell_lessor(&self, change: &Request, response: &Response) {
        let now = crate::clock::Instant::now();
        match (change, response) {
            (Request::LeaseGrant { id, ttl_seconds }, Response::LeaseGrant(_)) => {
                self.lessor.granted(*id, *ttl_seconds, now);
            }
            (Request::LeaseRevoke { id }, Response::LeaseRevoke(_)) => self.lessor.revoked(*id),
            (Request::LeaseCheckpoint { leases, .. }, Response::LeaseCheckpoint { recorded }) => {
                self.lessor.checkpoint_applied(leases, recorded, now);
            }
            (Request::LeaseCheckpointClear { id }, Response::LeaseCheckpointClear) => {
                self.lessor.checkpoint_cleared(*id, now);
            }
            _ => {}
        }
    }
}

/// Stops the member when a chunk of committed entries is not the log's next stretch: its entries
/// must follow each other without a gap or a repeat, after the last applied one (an entry is
/// never applied twice, `docs/ARCHITECTURE.md`). Position 0 also stands for "nothing applied", so
/// a chunk may start at 0 then; the store asserts the rest from its own applied log id.
fn assert_applies_in_log_order(entries: &[ApplyEntry], applied: AppliedPosition) {
    for pair in entries.windows(2) {
        let (earlier, later) = (pair[0].log_id.index, pair[1].log_id.index);
        assert!(
            later == earlier + 1,
            "committed entries are applied in log order without a gap: entry {later} after \
             entry {earlier} in one chunk"
        );
    }
    let first = entries.first().map_or(0, |entry| entry.log_id.index);
    assert!(
        first > applied.log_index || applied.log_index == 0,
        "an entry is never applied twice: a chunk from entry {first} after entry {} was applied",
        applied.log_index
    );
}

/// The lease request an entry carries, if any (kept before the entry goes to the store).
fn lease_change(entry: &ApplyEntry) -> Option<Request> {
    match &entry.payload {
        revkv_storage::EntryPayload::Request(
            request @ (Request::LeaseGrant { .. }
            | Request::LeaseRevoke { .. }
            | Request::LeaseCheckpoint { .. }
            | Request::LeaseCheckpointClear { .. }),
        ) => Some(request.clone()),
        _ => None,
    }
}

fn write_result(outcome: ApplyOutcome) -> WriteResult {
    WriteResult {
        revision: outcome.revision,
        outcome: outcome
            .result
            .map_err(|rejection| Rejection::from_storage(&rejection)),
    }
}

/// Turns an openraft entry into what the store applies.
fn to_apply_entry(entry: Entry) -> io::Result<ApplyEntry> {
    let log_id = to_storage_log_id(&entry.log_id);
    let payload = match entry.payload {
        EntryPayload::Blank => revkv_storage::EntryPayload::Blank,
        EntryPayload::Normal(request) => revkv_storage::EntryPayload::Request(request.0),
        EntryPayload::Membership(membership) => {
            let stored = StoredMembership::new(Some(entry.log_id), membership);
            revkv_storage::EntryPayload::Membership(codec::encode(&stored).map_err(invalid_data)?)
        }
    };
    Ok(ApplyEntry { log_id, payload })
}

fn decode_membership(bytes: Option<&[u8]>) -> io::Result<StoredMembership> {
    match bytes {
        Some(bytes) => codec::decode(bytes).map_err(invalid_data),
        None => Ok(StoredMembership::default()),
    }
}

fn snapshot_from_export(
    data: SnapshotFile,
    summary: &revkv_storage::SnapshotSummary,
) -> io::Result<Snapshot> {
    let last_log_id: Option<LogId> = summary.applied.last_applied.map(from_storage_log_id);
    let meta = SnapshotMeta {
        last_log_id,
        last_membership: decode_membership(summary.applied.membership.as_deref())?,
    };
    Ok(Snapshot {
        meta,
        snapshot: data,
    })
}

/// Builds snapshots from the store.
///
/// The store is itself durable, so "building a snapshot" only has to make it durable up to the
/// applied log id and name that id: openraft then purges the log behind it. openraft 0.10 keeps
/// only the built snapshot's *meta* (`core/sm/worker.rs`, `build_snapshot`; `storage/helper.rs`
/// likewise), and asks `get_current_snapshot` for data whenever a follower needs one, which exports
/// the store at that moment with meta from the same read. So the builder returns empty data: an
/// export here would cost the whole store and be dropped unread.
pub struct SnapshotBuilder {
    store: Arc<MvccStore>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let store = self.store.clone();
        let applied = run_blocking(move || {
            store.flush()?;
            store.applied_state()
        })
        .await?;
        let meta = SnapshotMeta {
            last_log_id: applied.last_applied.map(from_storage_log_id),
            last_membership: decode_membership(applied.membership.as_deref())?,
        };
        Ok(Snapshot {
            meta,
            snapshot: SnapshotFile::empty(),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let store = self.store.clone();
        let applied = run_blocking(move || store.applied_state()).await?;
        Ok((
            applied.last_applied.map(from_storage_log_id),
            decode_membership(applied.membership.as_deref())?,
        ))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder, io::Error>> + Unpin + OptionalSend,
    {
        let mut chunk = Vec::new();
        let mut responders = Vec::new();
        while let Some((entry, responder)) = entries.try_next().await? {
            chunk.push(to_apply_entry(entry)?);
            responders.push(responder);
            if chunk.len() >= MAX_ENTRIES_PER_APPLY_BATCH {
                let applied = self
                    .apply_chunk(std::mem::take(&mut chunk), std::mem::take(&mut responders))
                    .await;
                self.faults.kept("applying committed entries", applied)?;
            }
        }
        if !chunk.is_empty() {
            let applied = self.apply_chunk(chunk, responders).await;
            self.faults.kept("applying committed entries", applied)?;
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            store: self.store.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let store = self.store.clone();
        let imported = run_blocking(move || {
            let mut reader = snapshot.reader()?;
            store.import_snapshot(&mut reader)
        })
        .await;
        let summary = self.faults.kept("installing a snapshot", imported)?;
        let store = self.store.clone();
        let leases = run_blocking(move || store.leases()).await?;
        self.lessor.load(&leases, crate::clock::Instant::now());
        let installed: Option<LogId> = summary.applied.last_applied.map(from_storage_log_id);
        if installed != meta.last_log_id {
            return Err(invalid_data(format!(
                "snapshot data is at {installed:?} but its meta says {:?}",
                meta.last_log_id
            )));
        }
        self.applied.send_replace(AppliedPosition {
            log_index: installed.map_or(0, |log_id| log_id.index),
            revision: summary.current_revision,
        });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // Before anything is applied there is no snapshot to offer a follower.
        let store = self.store.clone();
        let files = self.snapshot_files.clone();
        let exported = run_blocking(move || files.export(&store)).await;
        let (data, summary) = self.faults.kept("exporting a snapshot", exported)?;
        if summary.applied.last_applied.is_none() {
            return Ok(None);
        }
        snapshot_from_export(data, &summary).map(Some)
    }
}
