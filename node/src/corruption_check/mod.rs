//! The consistency check, as etcd's `--experimental-initial-corrupt-check` and
//! `--experimental-corrupt-check-time`: members compare their hashes of the history at one
//! revision, and a member whose hash differs raises the CORRUPT alarm for it through raft. While
//! that alarm stands every member refuses writes (`corrupt`; etcd's "etcdserver: corrupt
//! cluster"), and reads are still served, as etcd serves them; an operator repairs or replaces
//! the member and disarms the alarm (`DELETE /v1/alarms`).
//!
//! Two triggers, both off by default as in etcd:
//! - the initial check (`initial`): once, when this member has caught up after its start; it
//!   compares this member with the others, whether it leads or not (etcd runs it before serving
//!   and refuses to start; revkv raises the alarm instead, so the finding is replicated and seen
//!   by every client);
//! - the periodic check (`interval`): on the leader only, as etcd's.
//!
//! `verdict.rs` decides what a round of answers means; this file asks and acts.

mod verdict;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use revkv_metrics::CorruptionCheckResult;
use revkv_raft::clock::Instant;
use revkv_raft::{KeySpaceHashAnswer, MemberKeySpaceHash};
use revkv_storage::{Alarm, AlarmAction, AlarmKind, Request};
use tokio::sync::watch;

use crate::backend::KvBackend;
use crate::error::NodeError;
use crate::member_backend::MemberBackend;
pub use verdict::{judge, MemberAnswer, Verdict};

/// How long each member has to hash its history. A hash walks the whole uncompacted history, so it
/// is given far longer than a write; a member slower than this is left out of the round.
const PEER_HASH_TIMEOUT: Duration = Duration::from_secs(30);

/// Rounds per check when a compaction keeps moving the revision under it; then the check is
/// skipped until the next one.
const MAX_ROUNDS_PER_CHECK: usize = 3;

/// Proposals of the alarm before the check gives up raising it (each bounded by the request
/// timeout); a leader election in between is the usual reason one fails.
const RAISE_ATTEMPTS: usize = 5;

/// The pause before a round or a proposal is retried: long enough for the compaction to be applied everywhere.
const PAUSE_BEFORE_RETRY: Duration = Duration::from_millis(200);

/// The longest the initial check waits for this member to catch up after its start.
const INITIAL_CHECK_READY_WAIT: Duration = Duration::from_secs(120);

/// How often the initial check looks whether this member has caught up.
const READY_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The consistency check's settings (`revkv serve --initial-corrupt-check`,
/// `--corrupt-check-time`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CorruptionCheckSettings {
    /// Check once this member has caught up after its start.
    pub initial: bool,
    /// Check this often while this member leads; `None`: never.
    pub interval: Option<Duration>,
}

/// How one check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    Consistent {
        revision: u64,
        compared: usize,
    },
    /// The alarm was raised for these members.
    Mismatch {
        revision: u64,
        suspects: Vec<u64>,
    },
    Skipped {
        reason: String,
    },
}

/// Starts the checks the settings ask for; they end when `stop` turns true.
pub fn spawn(
    backend: Arc<MemberBackend>,
    settings: CorruptionCheckSettings,
    stop: watch::Receiver<bool>,
) {
    if settings.initial {
        let backend = backend.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = initial_check(&backend) => {}
                () = stopped(stop) => {}
            }
        });
    }
    if let Some(interval) = settings.interval {
        tokio::spawn(async move {
            tokio::select! {
                () = periodic_checks(&backend, interval) => {}
                () = stopped(stop) => {}
            }
        });
    }
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// Waits until this member has caught up, then checks once.
async fn initial_check(backend: &MemberBackend) {
    let deadline = Instant::now() + INITIAL_CHECK_READY_WAIT;
    while !backend.is_ready().await {
        if Instant::now() >= deadline {
            let reason = format!("the member did not catch up in {INITIAL_CHECK_READY_WAIT:?}");
            record(backend, &CheckOutcome::Skipped { reason });
            return;
        }
        revkv_raft::clock::sleep(READY_POLL_INTERVAL).await;
    }
    run_and_record(backend, "initial").await;
}

/// Checks every `interval` while this member leads.
async fn periodic_checks(backend: &MemberBackend, interval: Duration) {
    let mut ticks = revkv_raft::clock::interval_at(Instant::now() + interval, interval);
    loop {
        ticks.tick().await;
        if backend.member().is_leader() {
            run_and_record(backend, "periodic").await;
        }
    }
}

async fn run_and_record(backend: &MemberBackend, trigger: &'static str) {
    match check_once(backend).await {
        Ok(outcome) => record(backend, &outcome),
        Err(error) => {
            let reason = format!("{trigger} check failed: {error}");
            record(backend, &CheckOutcome::Skipped { reason });
        }
    }
}

/// Counts the outcome and says it in the log.
fn record(backend: &MemberBackend, outcome: &CheckOutcome) {
    let result = match outcome {
        CheckOutcome::Consistent { revision, compared } => {
            tracing::info!(revision, compared, "consistency check: members agree");
            CorruptionCheckResult::Ok
        }
        CheckOutcome::Mismatch { revision, suspects } => {
            tracing::error!(
                revision,
                ?suspects,
                "consistency check: members' data differ; the CORRUPT alarm is raised for the \
                 suspects and writes are refused until an operator repairs them and disarms it"
            );
            CorruptionCheckResult::Mismatch
        }
        CheckOutcome::Skipped { reason } => {
            tracing::warn!(%reason, "consistency check skipped");
            CorruptionCheckResult::Skipped
        }
    };
    backend.metrics().consistency.record_check(result);
}

/// One check: rounds at this member's current revision until one is conclusive (bounded), and the
/// alarm raised for every suspect of a mismatch.
pub async fn check_once(backend: &MemberBackend) -> Result<CheckOutcome, NodeError> {
    let mut last_reason = String::new();
    for round in 0..MAX_ROUNDS_PER_CHECK {
        if round > 0 {
            revkv_raft::clock::sleep(PAUSE_BEFORE_RETRY).await;
        }
        let revision = backend.member().store().current_revision()?;
        let members = backend
            .member()
            .key_space_hashes(revision, PEER_HASH_TIMEOUT);
        let answers = members.await;
        let member_count = answers.len();
        match judge(&checker_answers(answers), member_count) {
            Verdict::Consistent { compared } => {
                return Ok(CheckOutcome::Consistent { revision, compared })
            }
            Verdict::Mismatch { suspects } => {
                raise_corrupt_alarms(backend, &suspects).await;
                return Ok(CheckOutcome::Mismatch { revision, suspects });
            }
            Verdict::Inconclusive { reason } => return Ok(CheckOutcome::Skipped { reason }),
            Verdict::Retry { reason } => last_reason = reason,
        }
    }
    Ok(CheckOutcome::Skipped {
        reason: format!("{MAX_ROUNDS_PER_CHECK} rounds in a row met a compaction: {last_reason}"),
    })
}

/// The raft layer's answers in the checker's terms.
fn checker_answers(answers: Vec<MemberKeySpaceHash>) -> BTreeMap<u64, MemberAnswer> {
    answers
        .into_iter()
        .map(|member| {
            let answer = match member.answer {
                Ok(KeySpaceHashAnswer::Hashed {
                    hash,
                    compact_revision,
                }) => MemberAnswer::Hashed {
                    hash,
                    compact_revision,
                },
                Ok(KeySpaceHashAnswer::Compacted { compact_revision }) => {
                    MemberAnswer::Compacted { compact_revision }
                }
                Ok(KeySpaceHashAnswer::Behind { applied_revision }) => {
                    MemberAnswer::Behind { applied_revision }
                }
                Err(why) => MemberAnswer::Silent(why),
            };
            (member.member_id, answer)
        })
        .collect()
}

/// Raises the CORRUPT alarm, through raft, for each suspect that does not have it yet; a failed
/// proposal (no leader for a moment) is tried again, at most `RAISE_ATTEMPTS` times.
async fn raise_corrupt_alarms(backend: &MemberBackend, suspects: &[u64]) {
    for attempt in 1..=RAISE_ATTEMPTS {
        match try_raise_corrupt_alarms(backend, suspects).await {
            Ok(()) => return,
            Err(error) if attempt < RAISE_ATTEMPTS => {
                tracing::warn!(%error, "raising the CORRUPT alarm failed; trying again");
                revkv_raft::clock::sleep(PAUSE_BEFORE_RETRY).await;
            }
            Err(error) => tracing::error!(
                %error,
                ?suspects,
                "could not raise the CORRUPT alarm; the next check finds the mismatch again"
            ),
        }
    }
}

async fn try_raise_corrupt_alarms(
    backend: &MemberBackend,
    suspects: &[u64],
) -> Result<(), NodeError> {
    let raised = backend.alarms()?;
    for &member_id in suspects {
        let alarm = Alarm {
            member_id,
            kind: AlarmKind::Corrupt,
        };
        if raised.contains(&alarm) {
            continue;
        }
        let action = AlarmAction::Activate;
        backend.write(Request::Alarm { action, alarm }).await?;
    }
    Ok(())
}
