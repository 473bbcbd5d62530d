//! Publishing a founding member's client URLs to the membership, for as long as it takes.
//!
//! Founding members bootstrap with identical memberships that carry only peer URLs (raft needs
//! equal entries at equal log ids), so each member then publishes its own client URLs (HTTP, and
//! gRPC if it serves it) through a replicated `SetNodes` change, once a leader is known and the
//! membership has reached it. A member started long before a quorum of its cluster, or in a
//! cluster without a leader for a while, must still get there: the task keeps trying while the
//! member runs, with a pause that doubles up to `MAX_PAUSE`, and logs failures at a bounded rate
//! (each at debug; a warning once it has failed for `WARNING_INTERVAL`, then at most one per
//! interval). Whether the URLs are published is read from the membership itself
//! (`RaftMember::client_urls_published`), so the member's status says so.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;
use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;

use crate::member_inner::MemberInner;
use crate::peer::AdminRequest;

/// The pause after the first failed attempt; it doubles after each further failure.
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between attempts: a member whose cluster comes up late publishes within a
/// few seconds of it, and a member that can never publish costs one attempt per five seconds.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// At most one warning per this interval while publishing keeps failing (every failure is logged
/// at debug).
const WARNING_INTERVAL: Duration = Duration::from_secs(30);

/// What one attempt found.
enum Attempt {
    /// The membership holds this member's URLs, or they are not this member's to publish.
    Done,
    /// Not yet (no leader, the membership not received, the change refused); try again later.
    NotYet(String),
}

/// Starts the task. It ends once the URLs are published (or are not this member's to publish),
/// or when `stop` turns true (the member shuts down) or raft stops.
pub(crate) fn spawn(inner: Arc<MemberInner>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut pause = FIRST_PAUSE;
        let mut failures: u64 = 0;
        // A failure or two is normal while a new cluster elects its first leader: the first
        // warning comes only after an interval of failing.
        let mut last_warning = Instant::now();
        loop {
            let problem = match attempt(&inner).await {
                Attempt::Done => break,
                Attempt::NotYet(problem) => problem,
            };
            failures += 1;
            if last_warning.elapsed() >= WARNING_INTERVAL {
                last_warning = Instant::now();
                tracing::warn!(
                    failures,
                    %problem,
                    "this member's client URLs are not published to the membership yet; still trying"
                );
            } else {
                tracing::debug!(failures, %problem, "publishing this member's client URLs, will retry");
            }
            tokio::select! {
                _ = crate::clock::sleep(pause) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
        if failures > 0 {
            tracing::info!(
                failures,
                "published this member's client URLs after {failures} failed attempts"
            );
        }
    });
}

/// One attempt: waits (bounded) for a leader, then publishes the URLs unless the membership holds
/// them already.
async fn attempt(inner: &Arc<MemberInner>) -> Attempt {
    // Right after bootstrap the membership is not in the metrics yet; once a leader is known, it
    // is (unless this member learned of the leader before the log that holds it).
    let mut metrics = inner.raft.metrics();
    let wait = crate::clock::timeout(
        inner.config.peer_limits.call_timeout,
        metrics.wait_until(|metrics| metrics.current_leader.is_some()),
    );
    match wait.await {
        Ok(Ok(_)) => {}
        // Raft has stopped: there is nothing left to publish to.
        Ok(Err(_)) => return Attempt::Done,
        Err(_) => return Attempt::NotYet("no leader known".into()),
    }
    let advertised = inner.config.advertise.clone();
    let recorded = inner
        .raft
        .metrics()
        .borrow_watched()
        .membership_config
        .get_node(&inner.id)
        .cloned();
    match recorded {
        Some(node) if node == advertised => Attempt::Done,
        // A joining learner: whoever adds it names its client URL.
        None if inner.config.join => Attempt::Done,
        None => Attempt::NotYet("this member is not in the membership it knows yet".into()),
        // A different peer URL: not ours to fix.
        Some(node) if node.peer_url != advertised.peer_url => Attempt::Done,
        Some(_) => {
            let update = AdminRequest::UpdateNode {
                id: inner.id,
                node: advertised,
            };
            match MemberInner::run_admin_on_leader(inner, update).await {
                Ok(()) => Attempt::Done,
                Err(error) => Attempt::NotYet(error.to_string()),
            }
        }
    }
}
