//! Leader changes as the harness sees them, for the lease checker: every member's `/v1/status` is
//! polled a few times a second, and each time a higher raft term with a leader shows up, it is
//! recorded with the interval in which it was first seen.
//!
//! Every answer that names a leader is kept too, with the member that gave it and when it was
//! asked and answered, for the leader-claims checker (`check/leader_claims.rs`): a member cut off
//! from a quorum must stop calling itself leader, and the others must stop naming it, once its
//! lease has lapsed.
//!
//! The lease checker needs them because a new leader restarts every lease's full TTL when it
//! takes over (docs/design/leases.md, "The bound"), so each leader change may delay an expiry by up to
//! one TTL. Polling the members (rather than counting the nemesis's faults) also catches the
//! elections nobody asked for: a slow link or a loaded machine can move leadership too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::members::SharedEndpoints;

/// How often the members are asked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long one status request may take (a paused or partitioned member does not answer).
const STATUS_TIMEOUT: Duration = Duration::from_millis(300);
/// At most this many leader changes, and as many answers naming a leader, are recorded (a
/// 45-second run sees a few dozen changes and about 1,400 such answers).
const MAX_RECORDED: usize = 100_000;

/// A time in which the nemesis had split the members so that no group held a majority, or had
/// cut the leader's outgoing links (which can keep the others from electing a leader until it
/// ends: `Nemesis::cut_outgoing_links` says why): nothing could commit, so no lease could be
/// revoked, until it ended. No leadership may be won during it, and the first one after it may be
/// seen only after a lease's bound, so the lease checker learns of it from the nemesis rather
/// than from the leaderships seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuorumLoss {
    /// When the nemesis began to cut the links (no later than the loss began).
    pub from: Duration,
    /// When every link had healed again (no earlier than the loss ended).
    pub until: Duration,
}

/// A time in which the nemesis let one member's calls reach only `reaches` (its side of a
/// partition, or nobody when its outgoing links were cut), for the leader-claims checker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Isolation {
    pub member: u64,
    /// The members its calls could still reach, itself included.
    pub reaches: Vec<u64>,
    /// How many members made a majority then.
    pub majority: usize,
    /// When the nemesis began to cut the links.
    pub from: Duration,
    /// When every link had healed again.
    pub until: Duration,
}

/// One leadership (a term with a leader), first seen by the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadershipSeen {
    pub term: u64,
    /// The start of the last poll round before it in which every member answered: all of them,
    /// the new leader too, then had lower terms, so the leadership began after it.
    pub after: Duration,
    /// When an answer naming it arrived: it had begun by then.
    pub by: Duration,
}

/// One member's status answer that named a leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderNamed {
    /// The member that answered.
    pub member: u64,
    /// The member it named as leader (itself, when it claims leadership).
    pub leader: u64,
    pub term: u64,
    /// When the status request was sent: the member decided its answer after it.
    pub asked: Duration,
    /// When the answer arrived: the member had decided it by then.
    pub answered: Duration,
}

/// What the status poller saw, for the checkers.
#[derive(Debug, Default)]
pub struct StatusesSeen {
    /// Each new term with a leader, in the order seen.
    pub leaderships: Vec<LeadershipSeen>,
    /// Every answer that named a leader.
    pub leaders_named: Vec<LeaderNamed>,
}

/// Polls every member's status until `stop` turns true, recording each new term with a leader
/// and every answer that names one.
pub async fn observe_leaderships(
    endpoints: SharedEndpoints,
    started: Instant,
    seen: Arc<Mutex<StatusesSeen>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let http = reqwest::Client::builder()
        .timeout(STATUS_TIMEOUT)
        .build()
        .expect("a plain HTTP client always builds");
    let mut highest_term = 0;
    let mut last_full_round = started.elapsed();
    while !*stop.borrow() {
        let round_started = started.elapsed();
        let urls: Vec<(u64, String)> = endpoints
            .read()
            .expect("endpoints lock")
            .iter()
            .map(|(id, url)| (*id, format!("{url}/v1/status")))
            .collect();
        let asked = urls.len();
        let mut asks = tokio::task::JoinSet::new();
        for (member, url) in urls {
            let http = http.clone();
            asks.spawn(async move { (member, member_term(&http, &url).await) });
        }
        let mut answered = 0;
        while let Some(answer) = asks.join_next().await {
            let Ok((member, Some((term, leader)))) = answer else {
                continue;
            };
            answered += 1;
            let answered_at = started.elapsed();
            let mut seen = seen.lock().expect("statuses lock");
            if let Some(leader) = leader {
                if seen.leaders_named.len() < MAX_RECORDED {
                    seen.leaders_named.push(LeaderNamed {
                        member,
                        leader,
                        term,
                        asked: round_started,
                        answered: answered_at,
                    });
                }
            }
            if leader.is_some() && term > highest_term {
                highest_term = term;
                if seen.leaderships.len() < MAX_RECORDED {
                    seen.leaderships.push(LeadershipSeen {
                        term,
                        after: last_full_round,
                        by: answered_at,
                    });
                }
            }
        }
        if answered == asked {
            last_full_round = round_started;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            _ = stop.changed() => {}
        }
    }
}

/// A member's raft term, and the leader it names, if any.
async fn member_term(http: &reqwest::Client, url: &str) -> Option<(u64, Option<u64>)> {
    let status: serde_json::Value = http.get(url).send().await.ok()?.json().await.ok()?;
    let term = status["raft_term"].as_u64()?;
    Some((term, status["leader_id"].as_u64()))
}
