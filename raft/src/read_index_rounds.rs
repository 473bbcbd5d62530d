//! Linearizable reads at the leader share ReadIndex rounds, as etcd's linearizable read loop
//! shares them: one round is out at a time, and every read that arrives while it is out waits
//! for the next round, which starts as soon as the one out ends and answers all of them at once.
//!
//! openraft already shares one heartbeat between the reads waiting for it, but each read still
//! costs a message to the raft core, a pending-read entry, a heartbeat broadcast request and an
//! answer channel. With 64 clients reading, those and the call into openraft made up about 13 %
//! of the leader's CPU (docs/BENCHMARKS.md, "Reads that share one ReadIndex round, on a slower
//! host"); here they are paid once per round.
//!
//! Every round is bounded in time by whoever builds the rounds (`leader::read_index_rounds`), so
//! one round that never ends cannot hold every later read.
//!
//! The invariant that keeps reads linearizable: a read is answered only by a round that started
//! after the read arrived. A round takes the reads waiting when it starts and no others; a read
//! that arrives while a round is out joins the list for the next one.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::peer::PeerError;

/// The most reads that may wait for the next round at once; a read beyond it is refused as
/// unavailable rather than queued without end. Far above what the client listeners' stream
/// limits let through, so only a runaway caller meets it.
pub(crate) const MAX_WAITING_READS: usize = 100_000;

/// One ReadIndex round: the leader's read index, or why there is none.
pub(crate) type RoundFuture = Pin<Box<dyn Future<Output = Result<u64, PeerError>> + Send>>;

/// Starts one ReadIndex round (the leader's quorum confirmation) when called.
pub(crate) type StartRound = Arc<dyn Fn() -> RoundFuture + Send + Sync>;

/// The reads waiting for the next round, and whether a round is out.
pub(crate) struct ReadIndexRounds {
    start_round: StartRound,
    state: Mutex<RoundsState>,
}

#[derive(Default)]
struct RoundsState {
    /// Whether the task that runs rounds is running (a round is out, or about to start).
    rounds_running: bool,
    /// The reads that arrived since the round out started; the next round answers them.
    waiting: Vec<oneshot::Sender<Result<u64, PeerError>>>,
}

impl ReadIndexRounds {
    pub(crate) fn new(start_round: StartRound) -> Arc<Self> {
        Arc::new(Self {
            start_round,
            state: Mutex::new(RoundsState::default()),
        })
    }

    /// The read index of a round that started after this call: waits for the next round and
    /// answers what it found.
    pub(crate) async fn read_index(self: &Arc<Self>) -> Result<u64, PeerError> {
        let (answer, answered) = oneshot::channel();
        let start_rounds = {
            let mut state = self.state.lock().expect("read index rounds lock poisoned");
            if state.waiting.len() >= MAX_WAITING_READS {
                return Err(PeerError::Unavailable(format!(
                    "{MAX_WAITING_READS} linearizable reads already wait for the leader"
                )));
            }
            state.waiting.push(answer);
            !std::mem::replace(&mut state.rounds_running, true)
        };
        if start_rounds {
            tokio::spawn(self.clone().run_rounds());
        }
        answered.await.unwrap_or_else(|_| {
            Err(PeerError::Unavailable(
                "the member stopped before its read index round ended".into(),
            ))
        })
    }

    /// Runs rounds one after another while reads wait, each for the reads that were waiting when
    /// it started; ends when a round finds none.
    async fn run_rounds(self: Arc<Self>) {
        loop {
            let readers = {
                let mut state = self.state.lock().expect("read index rounds lock poisoned");
                if state.waiting.is_empty() {
                    state.rounds_running = false;
                    return;
                }
                std::mem::take(&mut state.waiting)
            };
            // Started only now, after every reader in `readers` arrived: the invariant above.
            let answer = (self.start_round)().await;
            for reader in readers {
                // A reader that gave up (its caller timed out) no longer listens; nothing to do.
                let _ = reader.send(answer.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests;
