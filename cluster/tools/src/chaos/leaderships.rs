//! Leader changes as the harness sees them, for the lease checker: every member's `/v1/status` is
//! polled a few times a second, and each time a higher raft term with a leader shows up, it is
//! recorded with the interval in which it was first seen.
//!
//! The lease checker needs them because a new leader restarts every lease's full TTL when it
//! takes over (docs/ARCHITECTURE.md, "Leases"), so each leader change may delay an expiry by up to
//! one TTL. Polling the members (rather than counting the nemesis's faults) also catches the
//! elections nobody asked for: a slow link or a loaded machine can move leadership too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::members::SharedEndpoints;

/// How often the members are asked. A leader that expires a lease has led for at least one TTL
/// (it restarted every deadline when it took over), so it is seen within one round.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long one status request may take (a paused or partitioned member does not answer).
const STATUS_TIMEOUT: Duration = Duration::from_millis(300);
/// At most this many leader changes are recorded (a 45-second run sees a few dozen).
const MAX_RECORDED: usize = 100_000;

/// One leadership (a term with a leader), first seen by the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadershipSeen {
    pub term: u64,
    /// The start of the last poll round that saw only lower terms: the leadership is assumed to
    /// have begun after it (see [`POLL_INTERVAL`] for why that holds for the leaders that matter).
    pub after: Duration,
    /// When an answer naming it arrived: it had begun by then.
    pub by: Duration,
}

/// Polls every member's status until `stop` turns true, recording each new term with a leader.
pub async fn observe_leaderships(
    endpoints: SharedEndpoints,
    started: Instant,
    seen: Arc<Mutex<Vec<LeadershipSeen>>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let http = reqwest::Client::builder()
        .timeout(STATUS_TIMEOUT)
        .build()
        .expect("a plain HTTP client always builds");
    let mut highest_term = 0;
    let mut previous_round = started.elapsed();
    while !*stop.borrow() {
        let round_started = started.elapsed();
        let urls: Vec<String> = endpoints
            .read()
            .expect("endpoints lock")
            .iter()
            .map(|(_, url)| format!("{url}/v1/status"))
            .collect();
        let mut asks = tokio::task::JoinSet::new();
        for url in urls {
            let http = http.clone();
            asks.spawn(async move { leadership_term(&http, &url).await });
        }
        while let Some(answer) = asks.join_next().await {
            let Ok(Some(term)) = answer else { continue };
            if term > highest_term {
                highest_term = term;
                let mut seen = seen.lock().expect("leaderships lock");
                if seen.len() < MAX_RECORDED {
                    seen.push(LeadershipSeen {
                        term,
                        after: previous_round,
                        by: started.elapsed(),
                    });
                }
            }
        }
        previous_round = round_started;
        tokio::select! {
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The raft term of a member's status, if the member names a leader in it.
async fn leadership_term(http: &reqwest::Client, url: &str) -> Option<u64> {
    let status: serde_json::Value = http.get(url).send().await.ok()?.json().await.ok()?;
    status["leader_id"].as_u64()?;
    status["raft_term"].as_u64()
}
