//! The leader's expiry task: every `LeaseSettings::expiry_check_interval` it brings the lessor in
//! step with this member's role and, when this member leads, proposes the revoke of each lease
//! past its deadline through raft, and at most one checkpoint of the leases due for one
//! (`lease_checkpoint.rs`), so every member deletes the same keys at the same log
//! position. A follower's task does nothing but follow the role. At most
//! `max_revokes_in_flight` revokes are proposed per check; a revoke whose proposal fails
//! (leadership moved for a moment, no quorum, a timeout) is proposed again at the next check if
//! this member still leads, one still on its way after `revoke_retry_after`, and a revoke of a
//! lease that is already gone is simply refused by the store.

use std::sync::Arc;

use crate::clock::Instant;
use revkv_storage::{Request, Response};
use tokio::sync::watch;

use crate::lessor::LeaseRole;
use crate::member_inner::MemberInner;
use crate::types::ClientRequest;

/// Starts the task; it ends when `stop` turns true (or its sender is dropped).
pub(crate) fn spawn(inner: Arc<MemberInner>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut ticks = crate::clock::interval(inner.config.lease.expiry_check_interval);
        loop {
            tokio::select! {
                _ = ticks.tick() => check_once(&inner).await,
                // A member that just took over checks at once (its leases without a checkpoint
                // are due); a notification while a check runs is kept for the next loop.
                () = inner.lease_check_now.notified() => check_once(&inner).await,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
            }
        }
    });
}

/// One check: follow the role, revoke what has expired and checkpoint what is due.
async fn check_once(inner: &MemberInner) {
    if !matches!(
        inner.lead_leases(),
        Ok(LeaseRole::Leading | LeaseRole::TookOver)
    ) {
        return;
    }
    let revokes = revoke_expired(inner);
    let checkpoint = crate::lease_checkpoint::propose_due_checkpoint(inner);
    futures::future::join(revokes, checkpoint).await;
}

/// Proposes the revoke of each lease past its deadline (bounded), counting those applied.
async fn revoke_expired(inner: &MemberInner) {
    let now = Instant::now();
    let settings = &inner.config.lease;
    let expired = inner.lessor.take_expired(
        now,
        settings.max_revokes_in_flight,
        settings.revoke_retry_after,
    );
    let revokes = expired.into_iter().map(|expired| async move {
        let id = expired.id;
        let revoke = ClientRequest(Request::LeaseRevoke { id });
        match inner.write_as_leader(revoke).await {
            // The lag is measured when the leader has applied the revoke (`write_as_leader`
            // answers after the apply); a lease a client revoked first is refused, not counted.
            Ok(written) if matches!(written.result.outcome, Ok(Response::LeaseRevoke(_))) => {
                let lag = Instant::now().saturating_duration_since(expired.deadline);
                inner.config.lease_events.expired(lag);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(lease = id, %error, "revoking an expired lease failed; will retry");
                inner.lessor.revoke_failed(id);
            }
        }
    });
    futures::future::join_all(revokes).await;
}
