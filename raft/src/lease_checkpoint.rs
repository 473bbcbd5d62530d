//! The leader's lease checkpoints (etcd's lease checkpointing, with the fix of etcd PR 13508):
//! once per expiry check, the leader proposes one `Request::LeaseCheckpoint` with the remaining
//! TTL of at most `LeaseSettings::max_leases_per_checkpoint` leases that are due, so a member that
//! starts leading restarts each lease from its checkpoint instead of its full TTL.
//!
//! A lease is due a checkpoint interval after its grant or its last renewal, and at once when a new
//! leader had no checkpoint of it; once checkpointed it needs none until it is renewed again. So a
//! lease renewed more often than the interval costs no checkpoint at all, and one that is not costs
//! one checkpoint per renewal (plus the renewal's checkpoint clear). The checkpoint carries the
//! applied index at which the leader read its deadlines (`computed_at_index`); the store refuses it
//! for a lease renewed (cleared) at a later index, so an older checkpoint cannot undo a renewal
//! whatever order the two entries reach the log in. docs/design/leases.md ("Why an older
//! checkpoint never undoes a renewal") has the argument.

use crate::clock::Instant;
use revkv_storage::{Request, Response};

use crate::member_inner::MemberInner;
use crate::types::ClientRequest;

/// Proposes one checkpoint of the leases due for one, if checkpoints are on and any are due. The
/// caller has checked that this member leads and has reset its deadlines.
pub(crate) async fn propose_due_checkpoint(inner: &MemberInner) {
    let settings = &inner.config.lease;
    if settings.checkpoint_interval.is_none() {
        return;
    }
    // Read before the deadlines: every entry at or below it has been told to the lessor.
    let computed_at_index = inner.applied.borrow().log_index;
    let now = Instant::now();
    let leases = inner
        .lessor
        .take_due_checkpoints(now, settings.max_leases_per_checkpoint.max(1));
    if leases.is_empty() {
        return;
    }
    let checkpoint = ClientRequest(Request::LeaseCheckpoint {
        computed_at_index,
        leases: leases.clone(),
    });
    match inner.write_as_leader(checkpoint).await {
        Ok(written) => {
            if let Ok(Response::LeaseCheckpoint { recorded }) = &written.result.outcome {
                tracing::trace!(
                    proposed = leases.len(),
                    recorded = recorded.len(),
                    "lease checkpoint applied"
                );
            }
        }
        Err(error) => {
            tracing::debug!(%error, leases = leases.len(), "a lease checkpoint failed; will retry");
            inner.lessor.checkpoint_failed(&leases, Instant::now());
        }
    }
}
