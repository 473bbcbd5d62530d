//! Reads sharing ReadIndex rounds: a round answers only the reads that arrived before it
//! started, reads that arrive while one is out share the next, and a failed round fails exactly
//! its own reads. Rounds here are held open by the test, so which reads each answers is decided
//! by the order of events, not by timing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::*;

/// Rounds that each wait for the test to end them; the n-th round answers read index n, or the
/// error the test ends it with.
struct HeldRounds {
    started: AtomicU64,
    ends: Semaphore,
    failing_round: AtomicU64,
}

impl HeldRounds {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            started: AtomicU64::new(0),
            ends: Semaphore::new(0),
            failing_round: AtomicU64::new(0),
        })
    }

    fn rounds(self: &Arc<Self>) -> Arc<ReadIndexRounds> {
        let held = self.clone();
        ReadIndexRounds::new(Arc::new(move || {
            let held = held.clone();
            Box::pin(async move {
                let round = held.started.fetch_add(1, Ordering::SeqCst) + 1;
                held.ends.acquire().await.expect("never closed").forget();
                if held.failing_round.load(Ordering::SeqCst) == round {
                    return Err(PeerError::Unavailable(format!("round {round} failed")));
                }
                Ok(round)
            })
        }))
    }

    fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    fn end_one_round(&self) {
        self.ends.add_permits(1);
    }
}

/// Yields to the runtime until `condition` holds; fails the test after many turns.
async fn until(condition: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if condition() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the condition never held");
}

fn spawn_read(rounds: &Arc<ReadIndexRounds>) -> tokio::task::JoinHandle<Result<u64, PeerError>> {
    let rounds = rounds.clone();
    tokio::spawn(async move { rounds.read_index().await })
}

fn waiting_reads(rounds: &ReadIndexRounds) -> usize {
    rounds.state.lock().unwrap().waiting.len()
}

#[tokio::test(flavor = "current_thread")]
async fn reads_that_arrive_during_a_round_share_the_next_one_and_not_that_one() {
    let held = HeldRounds::new();
    let rounds = held.rounds();
    let first = spawn_read(&rounds);
    until(|| held.started() == 1).await;

    let during: Vec<_> = (0..5).map(|_| spawn_read(&rounds)).collect();
    until(|| waiting_reads(&rounds) == 5).await;
    assert_eq!(
        waiting_reads(&rounds),
        5,
        "the five wait for the next round"
    );
    assert_eq!(held.started(), 1, "no second round while the first is out");

    held.end_one_round();
    assert_eq!(first.await.unwrap(), Ok(1));
    until(|| held.started() == 2).await;
    held.end_one_round();
    for read in during {
        assert_eq!(
            read.await.unwrap(),
            Ok(2),
            "answered by the round after their arrival"
        );
    }
    assert_eq!(held.started(), 2, "five reads, one round");
}

#[tokio::test(flavor = "current_thread")]
async fn rounds_stop_when_no_read_waits_and_start_again_for_the_next() {
    let held = HeldRounds::new();
    let rounds = held.rounds();
    held.end_one_round();
    assert_eq!(spawn_read(&rounds).await.unwrap(), Ok(1));
    until(|| !rounds.state.lock().unwrap().rounds_running).await;
    assert_eq!(held.started(), 1);

    held.end_one_round();
    assert_eq!(spawn_read(&rounds).await.unwrap(), Ok(2));
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_round_fails_its_own_reads_and_the_next_round_answers_the_rest() {
    let held = HeldRounds::new();
    held.failing_round.store(1, Ordering::SeqCst);
    let rounds = held.rounds();
    let failed: Vec<_> = (0..3).map(|_| spawn_read(&rounds)).collect();
    until(|| held.started() == 1).await;
    let later = spawn_read(&rounds);
    until(|| waiting_reads(&rounds) == 1).await;

    held.end_one_round();
    for read in failed {
        assert_eq!(
            read.await.unwrap(),
            Err(PeerError::Unavailable("round 1 failed".into()))
        );
    }
    held.end_one_round();
    assert_eq!(later.await.unwrap(), Ok(2));
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_beyond_the_waiting_limit_is_refused_and_the_others_still_answered() {
    let held = HeldRounds::new();
    let rounds = held.rounds();
    let first = spawn_read(&rounds);
    until(|| held.started() == 1).await;
    // Fill the list for the next round without tasks: the limit is on the list, not on tasks.
    let mut listening = Vec::new();
    {
        let mut state = rounds.state.lock().unwrap();
        for _ in 0..MAX_WAITING_READS {
            let (answer, answered) = oneshot::channel();
            state.waiting.push(answer);
            listening.push(answered);
        }
    }
    let refused = tokio::time::timeout(Duration::from_secs(60), rounds.read_index()).await;
    assert!(
        matches!(refused, Ok(Err(PeerError::Unavailable(_)))),
        "{refused:?}"
    );

    held.end_one_round();
    held.end_one_round();
    assert_eq!(first.await.unwrap(), Ok(1));
    for answered in listening {
        assert_eq!(answered.await.unwrap(), Ok(2));
    }
}
