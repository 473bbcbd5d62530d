//! The lease calls only the leader can answer, whether called locally or forwarded by a follower:
//! grant (the leader picks a free id and applies the minimum TTL), keep-alive and time-to-live
//! (which read and move the leader's deadlines). Each answers `NotLeader` elsewhere so the caller
//! finds the leader and retries, like every call in `leader.rs`.
//!
//! Keep-alive and time-to-live first confirm the leadership with a ReadIndex round and wait until
//! this member has applied through that index. The confirmation makes a renewal safe against a
//! newer leader (its reset deadlines come after the confirmation); the wait makes sure a leader
//! elected a moment ago has applied every grant committed before it, so it does not answer
//! `not_found` for a lease it has not applied yet.

use crate::clock::Instant;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use revkv_storage::Request;

use crate::lessor::{LeaseRole, Renewal};
use crate::member_inner::MemberInner;
use crate::peer::{
    ForwardedWrite, LeaseGrantCall, LeaseTimeToLive, LeaseTimeToLiveCall, PeerError,
};
use crate::types::{ClientRequest, Rejection};

/// Lease ids the leader picks are below 2^53, so they survive JSON readers that hold numbers as
/// doubles (JavaScript) unchanged.
const LARGEST_PICKED_LEASE_ID: i64 = (1 << 53) - 1;

impl MemberInner {
    /// Grants a lease on this member, which must be the leader. A grant without an id gets a free
    /// random one; if a concurrent grant took it first, another is tried (bounded).
    pub(crate) async fn grant_lease_as_leader(
        &self,
        call: LeaseGrantCall,
    ) -> Result<ForwardedWrite, PeerError> {
        self.lead_leases()?;
        let ttl_seconds = call
            .ttl_seconds
            .max(self.config.timing.min_lease_ttl_seconds());
        let attempts = if call.id.is_some() {
            1
        } else {
            self.config.lease.grant_id_attempts.max(1)
        };
        let mut last = None;
        for _attempt in 0..attempts {
            let id = call.id.unwrap_or_else(|| self.unused_lease_id());
            let grant = Request::LeaseGrant { id, ttl_seconds };
            let written = self.write_as_leader(ClientRequest(grant)).await?;
            let taken = matches!(written.result.outcome, Err(Rejection::LeaseExists { .. }));
            if !taken || call.id.is_some() {
                return Ok(written);
            }
            last = Some(written);
        }
        Ok(last.expect("at least one attempt ran"))
    }

    /// A random id no lease this member knows of has. Applying the grant checks again, because a
    /// grant still in flight is not in the lessor yet.
    fn unused_lease_id(&self) -> i64 {
        // A handful of draws from 2^53 ids: a collision with up to `max_leases` leases is rare
        // enough that the last draw is taken as it is, and apply's duplicate check is the guard.
        const DRAWS: usize = 8;
        let mut id = fastrand::i64(1..=LARGEST_PICKED_LEASE_ID);
        for _ in 1..DRAWS {
            if !self.lessor.contains(id) {
                break;
            }
            id = fastrand::i64(1..=LARGEST_PICKED_LEASE_ID);
        }
        id
    }

    /// Renews lease `id` to its granted TTL on this member, which must be the leader; answers the
    /// granted TTL in seconds.
    ///
    /// A lease with a checkpoint (or one on its way) is renewed in two steps: the deadline here,
    /// then a `LeaseCheckpointClear` through raft, and the renewal is acknowledged only once the
    /// clear is applied, so that no later leader restarts the lease from the older checkpoint.
    pub(crate) async fn keep_lease_alive_as_leader(&self, id: i64) -> Result<i64, PeerError> {
        let confirmed_at = self.confirm_leadership_and_catch_up().await?;
        self.lead_leases_caught_up()?;
        let (granted_ttl_seconds, needs_checkpoint_clear) =
            match self.lessor.renew(id, confirmed_at, Instant::now()) {
                Renewal::Renewed {
                    granted_ttl_seconds,
                    needs_checkpoint_clear,
                } => (granted_ttl_seconds, needs_checkpoint_clear),
                Renewal::NotFound => return Err(PeerError::LeaseNotFound(id)),
                Renewal::Expired => {
                    return Err(self.wait_for_the_revoke_of_an_expired_lease(id).await)
                }
                Renewal::NotLeading => {
                    return Err(PeerError::Unavailable(
                        "leadership moved during the keep-alive; retry".into(),
                    ))
                }
            };
        if needs_checkpoint_clear {
            let clear = ClientRequest(Request::LeaseCheckpointClear { id });
            let cleared = self.write_as_leader(clear).await?;
            if let Err(rejection) = cleared.result.outcome {
                // Revoked (or expired) while the clear was on its way.
                tracing::debug!(lease = id, ?rejection, "a checkpoint clear was refused");
                return Err(PeerError::LeaseNotFound(id));
            }
        }
        self.config.lease_events.kept_alive();
        Ok(granted_ttl_seconds)
    }

    /// A keep-alive reached lease `id` after its deadline: waits (bounded) until its revoke is
    /// applied here and answers "not found", as etcd's lessor does, so the client that hears it
    /// will not find the lease's keys. If this member stops leading first, the next leader may
    /// restart the lease, so the answer is "unavailable" and the client retries there.
    async fn wait_for_the_revoke_of_an_expired_lease(&self, id: i64) -> PeerError {
        let timeout = self.config.peer_limits.call_timeout;
        let mut applied = self.applied.clone();
        let mut metrics = self.raft.metrics();
        let waited = crate::clock::timeout(timeout, async {
            loop {
                if !self.lessor.contains(id) {
                    return PeerError::LeaseNotFound(id);
                }
                if self.lead_leases_caught_up().is_err() {
                    return PeerError::Unavailable(
                        "leadership moved while an expired lease's revoke was on its way; retry"
                            .into(),
                    );
                }
                let stopping = tokio::select! {
                    changed = applied.changed() => changed.is_err(),
                    changed = metrics.changed() => changed.is_err(),
                };
                if stopping {
                    return PeerError::Unavailable("the member is stopping".into());
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            PeerError::Unavailable(format!(
                "lease {id} expired and its revoke did not apply in {timeout:?}; retry"
            ))
        })
    }

    /// The granted and remaining TTL of lease `id` (and its keys, when asked) on this member,
    /// which must be the leader.
    pub(crate) async fn lease_time_to_live_as_leader(
        &self,
        call: LeaseTimeToLiveCall,
    ) -> Result<LeaseTimeToLive, PeerError> {
        self.confirm_leadership_and_catch_up().await?;
        self.lead_leases_caught_up()?;
        let reading = self
            .lessor
            .reading(call.id, Instant::now())
            .ok_or(PeerError::LeaseNotFound(call.id))?;
        let keys = if call.with_keys {
            let store = self.store.clone();
            let id = call.id;
            crate::runtime::offload(move || store.lease_keys(id))
                .await
                .map_err(|error| PeerError::Fatal(error.to_string()))?
                .map_err(|error| PeerError::Fatal(error.to_string()))?
        } else {
            Vec::new()
        };
        Ok(LeaseTimeToLive {
            id: call.id,
            granted_ttl_seconds: reading.granted_ttl_seconds,
            remaining_ttl_seconds: reading.remaining_ttl_seconds,
            keys,
        })
    }

    /// Confirms with a quorum that this member still leads and waits (bounded) until it has
    /// applied everything committed so far. Answers the moment before the confirmation started.
    async fn confirm_leadership_and_catch_up(&self) -> Result<Instant, PeerError> {
        let confirmed_at = Instant::now();
        let read_index = self.read_index_as_leader().await?;
        let mut applied = self.applied.clone();
        let timeout = self.config.peer_limits.call_timeout;
        let caught_up = crate::clock::timeout(
            timeout,
            applied.wait_for(|position| position.log_index >= read_index),
        )
        .await;
        match caught_up {
            Ok(Ok(_)) => Ok(confirmed_at),
            _ => Err(PeerError::Unavailable(format!(
                "the leader did not apply through index {read_index} in {timeout:?}"
            ))),
        }
    }

    /// Brings the lessor in step with this member's role (a member leading a new term, once it has
    /// applied an entry of that term, resets every deadline first) and answers `NotLeader`, naming
    /// the leader it knows, when it does not lead.
    pub(crate) fn lead_leases(&self) -> Result<LeaseRole, PeerError> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let leads = metrics.state == ServerState::Leader && metrics.current_leader == Some(self.id);
        // Caught up once an entry of this term is applied: everything committed before it is.
        let caught_up = metrics
            .last_applied
            .is_some_and(|log_id| log_id.leader_id.term == metrics.current_term);
        let role = self
            .lessor
            .follow_role(leads, caught_up, metrics.current_term, Instant::now());
        if role == LeaseRole::TookOver {
            // Checkpoint the leases that have none at once, so that a leader that does not last
            // still passes them on with a checkpoint.
            self.lease_check_now.notify_one();
        }
        if role != LeaseRole::NotLeading {
            return Ok(role);
        }
        let leader = metrics.current_leader.and_then(|leader| {
            let node = metrics.membership_config.get_node(&leader).cloned();
            node.map(|node| (leader, node))
        });
        Err(PeerError::NotLeader { leader })
    }

    /// Like `lead_leases`, but a leader that has not caught up with its term yet (so has not reset
    /// its deadlines) answers unavailable: a renewal or a reading must wait for the reset.
    fn lead_leases_caught_up(&self) -> Result<(), PeerError> {
        match self.lead_leases()? {
            LeaseRole::Leading | LeaseRole::TookOver => Ok(()),
            _ => Err(PeerError::Unavailable(
                "the new leader is still applying its predecessor's entries; retry".into(),
            )),
        }
    }
}
