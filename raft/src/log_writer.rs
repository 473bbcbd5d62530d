//! The raft log's writer thread: every change to the log file, in the order openraft asked for it.
//!
//! `append` only queues its entries here (after putting them in the in-memory tail), so openraft
//! can replicate them while this thread makes them durable: the leader's fsync overlaps the
//! followers'. The thread takes every append queued behind the first (up to a bound), writes them
//! in one durable transaction, marks them durable in the tail, and then fires their flush
//! callbacks in order (group commit across `append` calls, not only within one).
//! Under a simulation the same loop runs as a task instead of a thread (`WriterThread::run_as_task`).
//!
//! The vote, truncation and purge travel the same queue, so the file sees every change in the
//! order openraft issued it, and each of them is answered only once it is durable. The committed
//! log id is different: openraft saves it with every commit and it needs no fsync, and it must be
//! written only once the log holds the entry it names (a crash never leaves a committed id beyond
//! the log's end). So it goes into a slot: the caller writes it at once when the entry is durable
//! and the log files are free (one `pwrite`, no thread wakes), and otherwise the thread writes it
//! after its next write. Waking the thread for every commit cost a context switch per write.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use revkv_storage::{LogId as StorageLogId, RaftLogStore, StorageFailure};
use tokio::sync::{mpsc, oneshot};

use crate::log_tail::LogTail;
use crate::storage_fault::FirstStorageFault;
use crate::timings::StorageTimings;
use crate::types::alias::IOFlushed;
use crate::write_path_trace::{self, Stage};

/// Commands waiting for the writer, at most. A full queue makes `append` wait: backpressure from a
/// slow disk reaches openraft instead of growing memory.
const QUEUE_CAPACITY: usize = 256;

/// Entries written in one transaction, at most; more queued appends wait for the next one.
const MAX_ENTRIES_PER_WRITE: usize = 8192;

/// Encoded bytes written in one transaction, at most (one append may exceed it alone).
const MAX_BYTES_PER_WRITE: usize = 64 * 1024 * 1024;

/// The largest append written on the caller's task ([`LogWriter::append_inline`]): its write and
/// fsync hold one of the runtime's threads, so a follower catching up with a large batch hands it
/// to the thread instead. A steady stream of a few writes per append is far below it.
const MAX_INLINE_APPEND_BYTES: usize = 1024 * 1024;

/// One change for the writer thread.
enum Command {
    Append {
        /// (index, encoded entry), contiguous.
        entries: Vec<(u64, Vec<u8>)>,
        callback: IOFlushed,
        queued_at: Instant,
    },
    SaveVote {
        encoded: Vec<u8>,
        done: oneshot::Sender<io::Result<()>>,
    },
    TruncateAfter {
        index: Option<u64>,
        done: oneshot::Sender<io::Result<()>>,
    },
    PurgeThrough {
        upto: StorageLogId,
        done: oneshot::Sender<io::Result<()>>,
    },
    /// Nothing to do but look at the committed slot.
    Wake,
}

/// The sending side of the writer, shared by every clone of the log storage. Dropping the last
/// one closes the queue and waits for the thread to finish what it was given.
pub(crate) struct LogWriter {
    queue: Option<mpsc::Sender<Command>>,
    /// Ordered commands (every kind but `Wake`) queued or being carried out by the thread. While
    /// it is zero the thread touches the log only to save the committed id, so an append may be
    /// written on the caller's thread without overtaking anything.
    unfinished: Arc<AtomicUsize>,
    committed: Arc<Mutex<CommittedSlot>>,
    log: Arc<RaftLogStore>,
    tail: Arc<Mutex<LogTail>>,
    timings: StorageTimings,
    faults: FirstStorageFault,
    /// The writer's own thread; `None` when it runs as a task of an inline thread's runtime
    /// (which drains the closed queue and ends by itself, or ends with that runtime).
    thread: Option<JoinHandle<()>>,
}

/// The committed id: the newest handed over, and the newest written to the log's metadata.
#[derive(Default)]
struct CommittedSlot {
    pending: Option<StorageLogId>,
    written: Option<StorageLogId>,
}

impl CommittedSlot {
    /// Writes the pending id if it is new and the log holds its entry durably (`durable_through`);
    /// `try_write` answers `None` when it could not write now. Answers false when it could not.
    fn write_if_due(
        &mut self,
        durable_through: Option<u64>,
        try_write: impl FnOnce(Option<StorageLogId>) -> Option<Result<(), StorageFailure>>,
    ) -> bool {
        let Some(pending) = self.pending.filter(|_| self.pending != self.written) else {
            return true;
        };
        // The entry must be in the file, not only queued: otherwise a crash could leave a
        // committed id past the log's end. The writer saves it after the write that holds it.
        if durable_through.is_none_or(|durable| pending.index > durable) {
            return true;
        }
        match try_write(Some(pending)) {
            None => false,
            Some(Ok(())) => {
                self.written = Some(pending);
                true
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "could not save the committed log id");
                true
            }
        }
    }
}

impl LogWriter {
    /// Starts the writer thread over `log`, keeping `tail` informed of what became durable. On a
    /// thread whose blocking work runs inline (`runtime.rs`), the writer is a task of the current
    /// runtime instead.
    pub(crate) fn start(
        log: Arc<RaftLogStore>,
        tail: Arc<Mutex<LogTail>>,
        timings: StorageTimings,
    ) -> io::Result<Self> {
        let (queue, commands) = mpsc::channel(QUEUE_CAPACITY);
        let committed = Arc::new(Mutex::new(CommittedSlot::default()));
        let unfinished = Arc::new(AtomicUsize::new(0));
        let faults = FirstStorageFault::default();
        let thread = WriterThread {
            log: log.clone(),
            tail: tail.clone(),
            timings: timings.clone(),
            faults: faults.clone(),
            commands,
            committed: committed.clone(),
            unfinished: unfinished.clone(),
        };
        let thread = if crate::runtime::blocking_work_runs_inline() {
            let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
            runtime.spawn(thread.run_as_task());
            None
        } else {
            let thread = std::thread::Builder::new()
                .name("raft-log-writer".into())
                .spawn(move || thread.run())?;
            Some(thread)
        };
        Ok(LogWriter {
            queue: Some(queue),
            unfinished,
            committed,
            log,
            tail,
            timings,
            faults,
            thread,
        })
    }

    /// Queues entries; `callback` fires once they are durable (or their write failed).
    pub(crate) async fn append(&self, entries: Vec<(u64, Vec<u8>)>, callback: IOFlushed) {
        let command = Command::Append {
            entries,
            callback,
            queued_at: Instant::now(),
        };
        self.unfinished.fetch_add(1, Ordering::SeqCst);
        if let Err(mpsc::error::SendError(Command::Append { callback, .. })) =
            self.queue().send(command).await
        {
            self.unfinished.fetch_sub(1, Ordering::SeqCst);
            callback.io_completed(Err(writer_gone()));
        }
    }

    /// Writes entries durably on the caller's thread and fires `callback`, when the writer thread
    /// has nothing queued that this append would overtake and the append is at most
    /// [`MAX_INLINE_APPEND_BYTES`]; otherwise queues them as [`LogWriter::append`] does. A follower
    /// uses this: it answers its leader only once the entries are durable, and it has one append
    /// from its leader at a time, so the thread's wake-ups (one to start the write, one to report
    /// it) are pure latency there.
    pub(crate) async fn append_inline(&self, entries: Vec<(u64, Vec<u8>)>, callback: IOFlushed) {
        let bytes = entries.iter().map(|(_, bytes)| bytes.len()).sum();
        if bytes > MAX_INLINE_APPEND_BYTES || self.unfinished.load(Ordering::SeqCst) > 0 {
            return self.append(entries, callback).await;
        }
        let batch = AppendBatch {
            bytes,
            entries,
            callbacks: vec![callback],
            first_queued_at: Instant::now(),
        };
        write_batch(&self.log, &self.tail, &self.timings, &self.faults, batch);
        save_committed_if_changed(&self.log, &self.tail, &self.committed);
    }

    pub(crate) async fn save_vote(&self, encoded: Vec<u8>) -> io::Result<()> {
        self.call(|done| Command::SaveVote { encoded, done }).await
    }

    pub(crate) async fn truncate_after(&self, index: Option<u64>) -> io::Result<()> {
        self.call(|done| Command::TruncateAfter { index, done })
            .await
    }

    pub(crate) async fn purge_through(&self, upto: StorageLogId) -> io::Result<()> {
        self.call(|done| Command::PurgeThrough { upto, done }).await
    }

    /// Hands over a new committed id and saves it (without an fsync) now if its entry is durable
    /// and the log files are free; otherwise the thread saves it after its next write.
    pub(crate) fn save_committed(&self, committed: Option<StorageLogId>) {
        let mut slot = self.committed.lock().expect("committed slot");
        slot.pending = committed;
        // The slot is set before the durable point is read, and the thread marks entries durable
        // before it reads the slot, so at least one of the two sees both and writes the id.
        let durable_through = self.tail.lock().expect("log tail").durable_through();
        let written = slot.write_if_due(durable_through, |id| self.log.try_save_committed(id));
        drop(slot);
        if !written {
            // The files are busy (an fsync, a read): the thread writes it when it is done. A
            // full queue means the thread is busy and will look at the slot anyway.
            let _ = self.queue().try_send(Command::Wake);
        }
    }

    /// Where the writer keeps the first failure of the log's files.
    pub(crate) fn first_fault(&self) -> &FirstStorageFault {
        &self.faults
    }

    /// The committed id handed over most recently, if any was in this process.
    pub(crate) fn pending_committed(&self) -> Option<StorageLogId> {
        self.committed.lock().expect("committed slot").pending
    }

    async fn call(
        &self,
        command: impl FnOnce(oneshot::Sender<io::Result<()>>) -> Command,
    ) -> io::Result<()> {
        let (done, answer) = oneshot::channel();
        self.unfinished.fetch_add(1, Ordering::SeqCst);
        if self.queue().send(command(done)).await.is_err() {
            self.unfinished.fetch_sub(1, Ordering::SeqCst);
            return Err(writer_gone());
        }
        answer.await.map_err(|_| writer_gone())?
    }

    fn queue(&self) -> &mpsc::Sender<Command> {
        self.queue.as_ref().expect("the queue closes only on drop")
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            // The thread ends once it has drained the closed queue; joining makes sure the log
            // file is closed before a member restarted in the same process opens it again.
            let _ = thread.join();
        }
    }
}

fn writer_gone() -> io::Error {
    io::Error::other("the raft log writer has stopped")
}

/// The thread's side: the store, the queue, and what it last wrote of the committed id.
struct WriterThread {
    log: Arc<RaftLogStore>,
    tail: Arc<Mutex<LogTail>>,
    timings: StorageTimings,
    faults: FirstStorageFault,
    commands: mpsc::Receiver<Command>,
    committed: Arc<Mutex<CommittedSlot>>,
    unfinished: Arc<AtomicUsize>,
}

/// Appends taken from the queue to be written together.
struct AppendBatch {
    entries: Vec<(u64, Vec<u8>)>,
    callbacks: Vec<IOFlushed>,
    first_queued_at: Instant,
    bytes: usize,
}

impl WriterThread {
    /// The thread's loop: waits for each command blocking the thread.
    fn run(mut self) {
        let mut next = self.commands.blocking_recv();
        while let Some(command) = next {
            next = match self.carry_out(command) {
                Some(left_over) => Some(left_over),
                None => self.commands.blocking_recv(),
            };
        }
    }

    /// The same loop as a task, for a thread whose blocking work runs inline
    /// (`runtime::run_blocking_work_inline_on_this_thread`): it awaits each command instead, and
    /// its writes and fsyncs run on the runtime's one thread, in the order the tasks run.
    /// Each command first waits the simulated disk's latency (`runtime::simulated_disk_latency`).
    async fn run_as_task(mut self) {
        let mut next = self.commands.recv().await;
        while let Some(command) = next {
            tokio::time::sleep(crate::runtime::simulated_disk_latency()).await;
            next = match self.carry_out(command) {
                Some(left_over) => Some(left_over),
                None => self.commands.recv().await,
            };
        }
    }

    /// Carries out `command` (with the appends queued right behind it, for an append). Returns
    /// a command it took from the queue but did not carry out, if any.
    fn carry_out(&mut self, command: Command) -> Option<Command> {
        match command {
            Command::Append {
                entries,
                callback,
                queued_at,
            } => self.write_appends(entries, callback, queued_at),
            Command::Wake => {
                self.save_committed_if_changed();
                None
            }
            other => {
                self.run_ordered(other);
                self.save_committed_if_changed();
                self.finished(1);
                None
            }
        }
    }

    /// Writes the given append and every append queued right behind it (within the bounds) in
    /// one durable transaction. Returns the command that ended the batch, if one did.
    fn write_appends(
        &mut self,
        entries: Vec<(u64, Vec<u8>)>,
        callback: IOFlushed,
        queued_at: Instant,
    ) -> Option<Command> {
        let mut batch = AppendBatch {
            bytes: entries.iter().map(|(_, bytes)| bytes.len()).sum(),
            entries,
            callbacks: vec![callback],
            first_queued_at: queued_at,
        };
        let mut left_over = None;
        while batch.entries.len() < MAX_ENTRIES_PER_WRITE && batch.bytes < MAX_BYTES_PER_WRITE {
            match self.commands.try_recv() {
                Ok(Command::Append {
                    entries, callback, ..
                }) => {
                    batch.bytes += entries.iter().map(|(_, bytes)| bytes.len()).sum::<usize>();
                    batch.entries.extend(entries);
                    batch.callbacks.push(callback);
                }
                Ok(Command::Wake) => {}
                Ok(other) => {
                    left_over = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let appends = batch.callbacks.len();
        write_batch(&self.log, &self.tail, &self.timings, &self.faults, batch);
        self.save_committed_if_changed();
        self.finished(appends);
        left_over
    }

    /// Counts `commands` ordered commands as carried out, after their effects and answers.
    fn finished(&self, commands: usize) {
        let before = self.unfinished.fetch_sub(commands, Ordering::SeqCst);
        assert!(
            before >= commands,
            "more commands finished than were queued"
        );
    }

    fn run_ordered(&mut self, command: Command) {
        match command {
            Command::SaveVote { encoded, done } => {
                let result = self.log.save_vote(&encoded).map_err(io::Error::other);
                let _ = done.send(self.faults.kept("saving the vote", result));
            }
            Command::TruncateAfter { index, done } => {
                let result = self.log.truncate_after(index).map_err(io::Error::other);
                if result.is_ok() {
                    // The tail is cut here, in queue order, so entries queued before the
                    // truncation are written, marked durable and then forgotten consistently.
                    self.tail.lock().expect("log tail").truncate_after(index);
                }
                let _ = done.send(self.faults.kept("truncating the log", result));
            }
            Command::PurgeThrough { upto, done } => {
                let result = self.log.purge_through(upto).map_err(io::Error::other);
                if result.is_ok() {
                    self.tail
                        .lock()
                        .expect("log tail")
                        .purge_through(upto.index);
                }
                let _ = done.send(self.faults.kept("purging the log", result));
            }
            Command::Append { .. } | Command::Wake => {}
        }
    }

    fn save_committed_if_changed(&mut self) {
        save_committed_if_changed(&self.log, &self.tail, &self.committed);
    }
}

/// Writes one batch of appends durably, marks it durable in the tail and fires its callbacks.
fn write_batch(
    log: &RaftLogStore,
    tail: &Mutex<LogTail>,
    timings: &StorageTimings,
    faults: &FirstStorageFault,
    batch: AppendBatch,
) {
    let last_index = batch.entries.last().map(|(index, _)| *index);
    let entry_count = batch.entries.len();
    let result = log.append(
        batch
            .entries
            .iter()
            .map(|(index, bytes)| (*index, bytes.as_slice())),
    );
    match result {
        Ok(()) => {
            if let Some(last_index) = last_index {
                write_path_trace::mark(Stage::Durable, last_index);
                tail.lock().expect("log tail").mark_durable(last_index);
            }
            timings.log_appended(batch.first_queued_at.elapsed(), entry_count);
            for callback in batch.callbacks {
                callback.io_completed(Ok(()));
            }
        }
        Err(error) => {
            tracing::error!(%error, "raft log append failed");
            faults.keep("appending to the raft log", &error);
            for callback in batch.callbacks {
                callback.io_completed(Err(io::Error::other(error.to_string())));
            }
        }
    }
}

/// Saves the committed id handed over, if it changed and the log holds the entry it names.
fn save_committed_if_changed(
    log: &RaftLogStore,
    tail: &Mutex<LogTail>,
    committed: &Mutex<CommittedSlot>,
) {
    let mut slot = committed.lock().expect("committed slot");
    let durable_through = tail.lock().expect("log tail").durable_through();
    slot.write_if_due(durable_through, |id| Some(log.save_committed(id)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_tail::TailLimits;

    /// A writer over a new log in `directory`, started on the current thread.
    fn start_writer(directory: &std::path::Path) -> LogWriter {
        let log = Arc::new(
            RaftLogStore::open(directory.join("raft-log"), Default::default()).expect("open log"),
        );
        let tail = Arc::new(Mutex::new(LogTail::new(TailLimits::default(), None)));
        LogWriter::start(log, tail, StorageTimings::default()).expect("start the writer")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn on_an_inline_thread_the_writer_is_a_task_of_its_runtime_and_still_writes() {
        let directory = tempfile::tempdir().expect("temporary directory");
        crate::runtime::run_blocking_work_inline_on_this_thread(true);
        let writer = start_writer(directory.path());
        let saved = writer.save_vote(b"vote-1".to_vec()).await;
        crate::runtime::run_blocking_work_inline_on_this_thread(false);
        saved.expect("the vote is saved by the task");
        assert!(writer.thread.is_none(), "no thread of its own");
        assert_eq!(
            writer.log.vote().expect("read the vote"),
            Some(b"vote-1".to_vec())
        );
        let threaded = start_writer(&directory.path().join("threaded"));
        assert!(
            threaded.thread.is_some(),
            "an unmarked thread starts the writer's thread"
        );
    }

    fn log_id(index: u64) -> StorageLogId {
        StorageLogId {
            term: 1,
            node_id: 1,
            index,
        }
    }

    #[test]
    fn the_committed_id_is_written_only_once_its_entry_is_durable_and_only_once() {
        let mut slot = CommittedSlot {
            pending: Some(log_id(5)),
            written: None,
        };
        let mut writes = Vec::new();
        assert!(slot.write_if_due(Some(4), |id| {
            writes.push(id);
            Some(Ok(()))
        }));
        assert!(writes.is_empty(), "entry 5 is not durable yet");
        assert!(slot.write_if_due(Some(5), |id| {
            writes.push(id);
            Some(Ok(()))
        }));
        assert_eq!(writes, vec![Some(log_id(5))]);
        assert!(slot.write_if_due(Some(9), |id| {
            writes.push(id);
            Some(Ok(()))
        }));
        assert_eq!(
            writes.len(),
            1,
            "an id already written is not written again"
        );
    }

    #[test]
    fn busy_log_files_leave_the_committed_id_pending_for_the_writer() {
        let mut slot = CommittedSlot {
            pending: Some(log_id(3)),
            written: None,
        };
        assert!(!slot.write_if_due(Some(3), |_| None));
        assert_eq!(slot.written, None);
        assert!(slot.write_if_due(Some(3), |_| Some(Ok(()))));
        assert_eq!(slot.written, Some(log_id(3)));
    }
}
