//! openraft's `RaftLogStorage` over the storage crate's `RaftLogStore` (its own redb file).
//!
//! Entries, the vote and log ids are encoded through the codec module (versioned records). Each
//! `append` call is one durable redb transaction, however many entries openraft batched into it,
//! and the flush callback fires once that transaction has committed.
//!
//! Purging is guarded by the state machine's durability: the state file may lag behind what it has
//! applied by up to its durable-commit interval, and after a crash those entries are replayed from
//! this log. So before purging through index P, the state machine is flushed if its last durable
//! applied index is below P. See docs/ARCHITECTURE.md, "Why the state file may skip fsyncs".

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use revkv_storage::{codec, MvccStore, RaftLogStore};

use crate::blocking::{invalid_data, run_blocking};
use crate::timings::StorageTimings;
use crate::types::alias::{Entry, IOFlushed, LogId, LogState, Vote};
use crate::types::{from_storage_log_id, to_storage_log_id, TypeConfig};

/// The raft log of one member. Cheap to clone: every clone shares the same files.
#[derive(Clone)]
pub struct LogStorage {
    log: Arc<RaftLogStore>,
    state_machine_store: Arc<MvccStore>,
    timings: StorageTimings,
}

impl LogStorage {
    pub fn new(
        log: Arc<RaftLogStore>,
        state_machine_store: Arc<MvccStore>,
        timings: StorageTimings,
    ) -> Self {
        LogStorage {
            log,
            state_machine_store,
            timings,
        }
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
        let log = self.log.clone();
        let stored = run_blocking(move || log.entries(range)).await?;
        stored
            .iter()
            .map(|(index, bytes)| decode_entry(*index, bytes))
            .collect()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let log = self.log.clone();
        let stored = run_blocking(move || log.vote()).await?;
        stored
            .map(|bytes| codec::decode(&bytes).map_err(invalid_data))
            .transpose()
    }
}

impl RaftLogStorage<TypeConfig> for LogStorage {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState, io::Error> {
        let log = self.log.clone();
        let (last_entry, last_purged) =
            run_blocking(move || Ok((log.last_entry()?, log.last_purged()?))).await?;
        let last_purged_log_id = last_purged.map(from_storage_log_id);
        let last_log_id = match last_entry {
            Some((index, bytes)) => Some(decode_entry(index, &bytes)?.log_id),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let bytes = codec::encode(vote).map_err(invalid_data)?;
        let log = self.log.clone();
        run_blocking(move || log.save_vote(&bytes)).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let committed = committed.as_ref().map(to_storage_log_id);
        let log = self.log.clone();
        run_blocking(move || log.save_committed(committed)).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let log = self.log.clone();
        let committed = run_blocking(move || log.committed()).await?;
        Ok(committed.map(from_storage_log_id))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let mut encoded = Vec::new();
        for entry in entries {
            let bytes = codec::encode(&entry).map_err(invalid_data)?;
            encoded.push((entry.log_id.index, bytes));
        }
        let log = self.log.clone();
        let entry_count = encoded.len();
        let result = run_blocking(move || {
            log.append(
                encoded
                    .iter()
                    .map(|(index, bytes)| (*index, bytes.as_slice())),
            )
        })
        .await;
        match result {
            Ok(()) => {
                self.timings.log_appended(started.elapsed(), entry_count);
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                callback.io_completed(Err(io::Error::new(error.kind(), error.to_string())));
                Err(error)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let keep_through = last_log_id.map(|log_id| log_id.index);
        let log = self.log.clone();
        run_blocking(move || log.truncate_after(keep_through)).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let upto = to_storage_log_id(&log_id);
        let log = self.log.clone();
        let state = self.state_machine_store.clone();
        run_blocking(move || {
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
            log.purge_through(upto)
        })
        .await
    }
}
