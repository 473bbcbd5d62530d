//! openraft's `RaftLogStorage` over the storage crate's `RaftLogStore` (its own file).
//!
//! Entries, the vote and log ids are encoded through the codec module (versioned records).
//! `append` puts the entries in the in-memory tail (`log_tail.rs`), where the log reader finds them
//! at once, and queues them for the writer thread (`log_writer.rs`), which makes them durable and
//! then fires the flush callback. openraft replicates entries once `append` returns and counts this
//! member's copy only after the callback, so the leader's fsync overlaps the followers' and no
//! write is acknowledged before a quorum holds it durably.
//!
//! Purging is guarded by the state machine's durability: the state file may lag behind what it has
//! applied by up to its durable-commit interval, and after a crash those entries are replayed from
//! this log. So before purging through index P, the state machine is flushed if its last durable
//! applied index is below P. See docs/design/durability.md, "Why the state file may skip fsyncs".

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use revkv_storage::{codec, MvccStore, RaftLogStore, StorageFailure};

use crate::blocking::{invalid_data, run_blocking};
use crate::log_tail::{LogTail, TailLimits};
use crate::log_writer::LogWriter;
use crate::storage_fault::FirstStorageFault;
use crate::timings::StorageTimings;
use crate::types::alias::{Entry, IOFlushed, LogId, LogState, Vote};
use crate::types::{from_storage_log_id, to_storage_log_id, TypeConfig};
use crate::write_path_trace::{self, Stage};

/// The raft log of one member. Cheap to clone: every clone shares the same file, tail and writer.
#[derive(Clone)]
pub struct LogStorage {
    log: Arc<RaftLogStore>,
    state_machine_store: Arc<MvccStore>,
    tail: Arc<Mutex<LogTail>>,
    writer: Arc<LogWriter>,
    /// This member's id, when appends of other members' entries (a follower's) are written on
    /// the calling task ([`LogWriter::append_inline`]). `None`: every append goes to the thread.
    inline_appends_unless_leader: Option<u64>,
}

impl LogStorage {
    /// Starts the log's writer thread over `log`. The tail starts empty: everything the file holds
    /// is durable already.
    pub fn new(
        log: Arc<RaftLogStore>,
        state_machine_store: Arc<MvccStore>,
        timings: StorageTimings,
        tail_limits: TailLimits,
    ) -> io::Result<Self> {
        let durable_through = log
            .last_entry()
            .map_err(io::Error::other)?
            .map(|(index, _)| index)
            .or(log
                .last_purged()
                .map_err(io::Error::other)?
                .map(|id| id.index));
        let tail = Arc::new(Mutex::new(LogTail::new(tail_limits, durable_through)));
        let writer = LogWriter::start(log.clone(), tail.clone(), timings)?;
        Ok(LogStorage {
            log,
            state_machine_store,
            tail,
            writer: Arc::new(writer),
            inline_appends_unless_leader: None,
        })
    }

    /// Writes appends of entries made by another member's leadership, which only a follower
    /// appends, on openraft's task instead of the writer thread. A leader's own entries still go
    /// to the thread, so that it replicates them while its fsync runs.
    pub fn with_inline_follower_appends(mut self, own_node_id: u64) -> Self {
        self.inline_appends_unless_leader = Some(own_node_id);
        self
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, LogTail> {
        self.tail.lock().expect("log tail")
    }

    /// A reader of the in-memory tail's size, for the memory metrics.
    pub(crate) fn tail_size(&self) -> crate::log_tail::LogTailSize {
        crate::log_tail::LogTailSize::new(self.tail.clone())
    }

    /// Where this log (and, through the member, its state machine) keeps its first failure.
    pub(crate) fn first_fault(&self) -> FirstStorageFault {
        self.writer.first_fault().clone()
    }

    /// Passes `result` on, keeping its error if it is the member's first storage failure.
    fn kept<T>(&self, what: &str, result: io::Result<T>) -> io::Result<T> {
        self.writer.first_fault().kept(what, result)
    }
}

fn decode_entry(index: u64, bytes: &[u8]) -> io::Result<Entry> {
    let entry: Entry = codec::decode(bytes).map_err(invalid_data)?;
    if entry.log_id.index != index {
        return Err(invalid_data(format!(
            "log entry stored at index {index} says it is entry {}",
            entry.log_id.index
        )));
    }
    Ok(entry)
}

fn index_range(range: impl RangeBounds<u64>) -> std::ops::Range<u64> {
    let start = match range.start_bound() {
        Bound::Included(start) => *start,
        Bound::Excluded(start) => start.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(end) => end.saturating_add(1),
        Bound::Excluded(end) => *end,
        Bound::Unbounded => u64::MAX,
    };
    start..end
}

impl RaftLogReader<TypeConfig> for LogStorage {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let range = index_range(range);
        if range.start >= range.end {
            return Ok(Vec::new());
        }
        // Take what the tail holds first: everything below its first entry is durable in the file,
        // so the file read below cannot miss an entry that the tail let go in between.
        let (from_tail, tail_first) = {
            let tail = self.tail();
            (tail.entries_in(range.start, range.end), tail.first_index())
        };
        let file_end = tail_first.map_or(range.end, |first| first.min(range.end));
        if range.start >= file_end {
            return Ok(from_tail);
        }
        let log = self.log.clone();
        let file_range = range.start..file_end;
        let stored = self.kept(
            "reading the raft log",
            run_blocking(move || log.entries(file_range)).await,
        )?;
        let mut entries = Vec::with_capacity(stored.len() + from_tail.len());
        for (index, bytes) in &stored {
            entries.push(decode_entry(*index, bytes)?);
        }
        entries.extend(from_tail);
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let log = self.log.clone();
        let stored = self.kept("reading the vote", run_blocking(move || log.vote()).await)?;
        stored
            .map(|bytes| codec::decode(&bytes).map_err(invalid_data))
            .transpose()
    }
}

impl RaftLogStorage<TypeConfig> for LogStorage {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState, io::Error> {
        let log = self.log.clone();
        let read =
            run_blocking(move || Ok::<_, StorageFailure>((log.last_entry()?, log.last_purged()?)))
                .await;
        let (last_entry, last_purged) = self.kept("reading the raft log's state", read)?;
        let last_purged_log_id = last_purged.map(from_storage_log_id);
        let last_in_file = match last_entry {
            Some((index, bytes)) => Some(decode_entry(index, &bytes)?.log_id),
            None => last_purged_log_id,
        };
        // Entries still on their way to the file count: openraft has been told they are appended.
        let last_log_id = self.tail().last_log_id().or(last_in_file);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let encoded = codec::encode(vote).map_err(invalid_data)?;
        self.writer.save_vote(encoded).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.writer
            .save_committed(committed.as_ref().map(to_storage_log_id));
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        if let Some(pending) = self.writer.pending_committed() {
            return Ok(Some(from_storage_log_id(pending)));
        }
        let log = self.log.clone();
        let committed = self.kept(
            "reading the committed id",
            run_blocking(move || log.committed()).await,
        )?;
        Ok(committed.map(from_storage_log_id))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut encoded = Vec::new();
        let mut held = Vec::new();
        for entry in entries {
            let bytes = codec::encode(&entry).map_err(invalid_data)?;
            encoded.push((entry.log_id.index, bytes));
            held.push((entry, encoded.last().map_or(0, |(_, bytes)| bytes.len())));
        }
        // The last entry names the newest leader in the batch: another member's means this member
        // appends as its follower.
        let made_by_another_leader = held.last().is_some_and(|(entry, _)| {
            self.inline_appends_unless_leader
                .is_some_and(|own_id| entry.log_id.leader_id.node_id != own_id)
        });
        self.tail().push_all(held).map_err(invalid_data)?;
        if let Some((last_index, _)) = encoded.last() {
            write_path_trace::mark(Stage::Appended, *last_index);
        }
        if made_by_another_leader {
            self.writer.append_inline(encoded, callback).await;
        } else {
            self.writer.append(encoded, callback).await;
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let keep_through = last_log_id.map(|log_id| log_id.index);
        self.writer.truncate_after(keep_through).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let upto = to_storage_log_id(&log_id);
        let state = self.state_machine_store.clone();
        let flushed = run_blocking(move || {
            let durable_through = state.durable_applied().map(|applied| applied.index);
            if durable_through.is_none_or(|index| index < upto.index) {
                state.flush()?;
            }
            let durable_through = state.durable_applied().map(|applied| applied.index);
            if durable_through.is_none_or(|index| index < upto.index) {
                // openraft purges only entries covered by a snapshot, which are applied, so this
                // does not happen in a member; a log store used on its own (as openraft's
                // conformance suite does) has no applied state to protect.
                tracing::warn!(
                    purge_through = upto.index,
                    ?durable_through,
                    "purging log entries the state machine has not applied durably"
                );
            }
            Ok::<(), StorageFailure>(())
        })
        .await;
        self.kept("flushing the state file before a purge", flushed)?;
        self.writer.purge_through(upto).await
    }
}
