//! The leader's side of the member: what runs on the member that currently leads, whether the
//! call came from this member or was forwarded by another over the peer protocol. Writes, read
//! indexes and membership changes; each answers `NotLeader` when this member does not lead, so
//! the caller can find the leader and retry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::clock::Instant;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ChangeMembershipError, ClientWriteError, LinearizableReadError, RaftError};
use openraft::{ChangeMembers, ReadPolicy};

use crate::member_features::Feature;
use crate::member_inner::{wait_for, MemberInner, Metrics};
use crate::peer::client::CallError;
use crate::peer::{paths, AdminRequest, ForwardedWrite, PeerError};
use crate::read_index_rounds::ReadIndexRounds;
use crate::types::{ClientRequest, TypeConfig};
use crate::write_path_trace::{self, Stage};

impl MemberInner {
    /// Runs a membership change on the leader this member knows of (once; no retries).
    pub(crate) async fn run_admin_on_leader(
        inner: &Arc<MemberInner>,
        request: AdminRequest,
    ) -> Result<(), PeerError> {
        let (leader_id, leader) = {
            let metrics = inner.raft.metrics().borrow_watched().clone();
            let leader_id = metrics
                .current_leader
                .ok_or_else(|| PeerError::Unavailable("no leader".into()))?;
            let leader = metrics.membership_config.get_node(&leader_id).cloned();
            (
                leader_id,
                leader.ok_or_else(|| PeerError::Unavailable("leader unknown".into()))?,
            )
        };
        if leader_id == inner.id {
            return inner.admin_as_leader(request).await.map(|_| ());
        }
        let timeout = inner.config.peer_limits.call_timeout;
        let call =
            inner
                .peers
                .call::<_, Option<u64>>(&leader.peer_url, paths::ADMIN, &request, timeout);
        call.await.map(|_| ()).map_err(|error| match error {
            CallError::Remote(refusal) => refusal,
            other => PeerError::Unavailable(other.to_string()),
        })
    }

    /// Runs a client write on this member, which must be the leader.
    pub(crate) async fn write_as_leader(
        &self,
        request: ClientRequest,
    ) -> Result<ForwardedWrite, PeerError> {
        write_path_trace::mark(Stage::Submitted, 0);
        // An entry that members of older builds cannot decode waits for every member to read it.
        if let Some(feature) = crate::member_features::needed_by(&request) {
            self.require_feature(feature).await?;
        }
        self.append_as_leader(request).await
    }

    /// Appends a client write on this member, which must be the leader, with no feature check:
    /// for an entry every member is known to read.
    pub(crate) async fn append_as_leader(
        &self,
        request: ClientRequest,
    ) -> Result<ForwardedWrite, PeerError> {
        let written = self.raft.client_write(request).await;
        if let Ok(response) = &written {
            write_path_trace::mark(Stage::Written, response.log_id.index);
        }
        match written {
            Ok(response) => Ok(ForwardedWrite {
                log_index: response.log_id.index,
                result: response.data,
            }),
            // The entry was appended and then dropped when this member stopped leading; it may
            // still commit through the new leader. Checked before `peer_error`, which would take
            // it for a plain redirect (it carries a ForwardToLeader) and let the caller re-send it.
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(forward))) => Err(
                PeerError::OutcomeUnknown(format!("the write was discarded: {forward}")),
            ),
            Err(error) => Err(peer_error(error)),
        }
    }

    /// A read index from this member, which must be the leader: from a ReadIndex round that
    /// started after the call, shared with the other reads waiting for it
    /// (`read_index_rounds.rs`).
    pub(crate) async fn read_index_as_leader(&self) -> Result<u64, PeerError> {
        self.read_index_rounds.read_index().await
    }

    /// Runs a membership or leadership change on this member, which must be the leader. Answers
    /// the log index of the membership entry that made the change (none for a leader transfer).
    pub(crate) async fn admin_as_leader(
        &self,
        request: AdminRequest,
    ) -> Result<Option<u64>, PeerError> {
        let membership = self
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .clone();
        check_admin_target(&request, &membership)?;
        let removed = match request {
            AdminRequest::Remove { id } => Some(id),
            _ => None,
        };
        let moved_intent = match &request {
            AdminRequest::UpdateNode { id, node } => self.learner_promotion_moved_to(*id, node)?,
            _ => None,
        };
        let changes = match request {
            AdminRequest::TransferLeader { to } => {
                return self.transfer_leadership(to).await.map(|()| None)
            }
            AdminRequest::AddLearner { id, node } => {
                // An intent left from an earlier add of this id must not promote this learner.
                self.forget_learner_promotion_if_held(id).await?;
                let added = self.raft.add_learner(id, node, true).await;
                return self.membership_change_answer(added);
            }
            AdminRequest::AddLearnerToPromote {
                id,
                node,
                max_lag_entries,
            } => {
                check_learner_to_promote(&membership, id, &node)?;
                // The learner will read the intent (in the log or a snapshot) before it is a
                // member the gate would ask, so it is asked now.
                let joining = (id, node.peer_url.clone());
                self.require_feature_joining(Feature::LearnerPromotion, joining)
                    .await?;
                // A learner marked before keeps its mark if this add fails: only an intent this
                // request wrote is taken back.
                let marked_before = self.learner_promotion_held(id)?;
                // The intent first, so that the learner never exists without it: if the intent
                // cannot be written, nothing was added.
                let intent = revkv_storage::LearnerPromotion {
                    member_id: id,
                    peer_url: node.peer_url.clone(),
                    max_lag_entries: max_lag_entries
                        .unwrap_or(self.config.learner_promotion.default_max_lag_entries),
                };
                self.write_learner_promotion(revkv_storage::LearnerPromotionChange::Intend(intent))
                    .await?;
                let added = self.raft.add_learner(id, node, false).await;
                if added.is_err() && !marked_before {
                    // Nothing was added: take the intent back, so it does not wait for a learner
                    // that may never come (best effort; the next add of this id forgets it too).
                    let forgotten = self.forget_learner_promotion_if_held(id).await;
                    if let Err(error) = forgotten {
                        tracing::debug!(member = id, %error, "taking back an intent failed");
                    }
                }
                return self.membership_change_answer(added);
            }
            AdminRequest::Promote { id } => {
                self.check_learner_ready(id).await?;
                ChangeMembers::AddVoterIds(BTreeSet::from([id]))
            }
            AdminRequest::Remove { id } if is_voter(&membership, id) => {
                ChangeMembers::RemoveVoters(BTreeSet::from([id]))
            }
            AdminRequest::Remove { id } => ChangeMembers::RemoveNodes(BTreeSet::from([id])),
            AdminRequest::UpdateNode { id, node } => {
                ChangeMembers::SetNodes(BTreeMap::from([(id, node)]))
            }
        };
        let changed = self.raft.change_membership(changes, false).await;
        let answer = self.membership_change_answer(changed)?;
        if let Some(moved) = moved_intent {
            // The intent follows its learner to the new URL, or it would never apply again. The
            // move is done whatever happens here; a failure leaves the old intent, inert.
            let member = moved.member_id;
            if let Err(error) = self.move_learner_promotion(moved).await {
                tracing::warn!(member, %error, "the learner moved; its promotion stayed at the old URL");
            }
        }
        if let Some(removed) = removed {
            // What is left of a removed learner's intent would wait for nothing. The removal is
            // done whatever happens here, so a failure is not the caller's: an intent for a member
            // the membership does not hold promotes nobody, and the next add of the id forgets it.
            if let Err(error) = self.forget_learner_promotion_if_held(removed).await {
                tracing::debug!(member = removed, %error, "forgetting a removed member's promotion failed");
            }
        }
        Ok(answer)
    }

    /// Promotes learner `id` whose readiness the caller has checked by its own bound (the
    /// auto-promotion task, with the intent's bound rather than the manual promote's).
    pub(crate) async fn promote_checked_learner(&self, id: u64) -> Result<Option<u64>, PeerError> {
        let changes = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
        let changed = self.raft.change_membership(changes, false).await;
        self.membership_change_answer(changed)
    }

    /// The log index of the membership entry a change wrote, or the error the caller should see.
    fn membership_change_answer(
        &self,
        changed: Result<
            openraft::raft::ClientWriteResponse<TypeConfig>,
            RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
        >,
    ) -> Result<Option<u64>, PeerError> {
        match changed {
            Ok(response) => Ok(Some(response.log_id.index)),
            // Another membership change is still in flight (or this new leader has not committed
            // its first entry yet): the request is fine and succeeds when retried shortly, so it
            // is "unavailable, retry later" (503), not a bad request.
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                busy @ (ChangeMembershipError::InProgress(_)
                | ChangeMembershipError::UncommittedLeaderLog(_)),
            ))) => Err(PeerError::Unavailable(format!(
                "the membership cannot change right now: {busy}"
            ))),
            // The change was proposed but its entry was lost with the leader: it may or may not
            // have happened.
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(forward))) => {
                Err(PeerError::OutcomeUnknown(format!(
                    "the membership change was discarded: {forward}"
                )))
            }
            Err(error) => Err(peer_error(error)),
        }
    }

    /// Asks raft to hand leadership to `to` and waits (bounded) until it has.
    ///
    /// openraft's leader asks once: it stops its heartbeats and takes no new writes, and tells the
    /// voters, and `to` starts an election if its log holds the leader's. When that one message is
    /// lost, late, or finds `to` a few entries behind, nothing happens until an election timeout
    /// ends the transfer, often with leadership elsewhere. So, as etcd's leader does, this one
    /// gives `to` a moment to catch up first, and while it still leads it asks again whenever
    /// `to` has caught up with entries it lacked, and whenever a fraction of an election timeout
    /// passes without the hand-over (a bounded number of times).
    async fn transfer_leadership(&self, to: u64) -> Result<(), PeerError> {
        if self.raft.metrics().borrow_watched().current_leader == Some(to) {
            return Ok(());
        }
        let deadline = Instant::now() + self.config.peer_limits.call_timeout;
        self.refuse_transfer_to_a_silent_member(to, deadline)
            .await?;
        let election_timeout = self.config.timing.election_timeout_min;
        let mut metrics = self.raft.metrics();
        let catch_up_until = deadline.min(Instant::now() + election_timeout);
        wait_for(&mut metrics, catch_up_until, |now| holds_whole_log(now, to)).await;
        let mut asks = 0;
        let mut held_when_asked = None;
        let mut ask_again_at = Instant::now();
        loop {
            let now = metrics.borrow_watched().clone();
            let progress = transfer_progress(&now, (self.id, to), held_when_asked);
            let unanswered = Instant::now() >= ask_again_at;
            match progress {
                TransferProgress::Done => return Ok(()),
                TransferProgress::MovedElsewhere(leader) => {
                    return Err(PeerError::Unavailable(format!(
                        "an election made member {leader} the leader while leadership was being \
                         handed to member {to}"
                    )))
                }
                TransferProgress::Leading { caught_up }
                    if (caught_up || unanswered) && asks < MAX_TRANSFER_ASKS =>
                {
                    asks += 1;
                    held_when_asked = matched_index(&now, to);
                    ask_again_at = Instant::now() + election_timeout / 4;
                    self.ask_raft_to_transfer(to).await?;
                    continue;
                }
                TransferProgress::Leading { .. } | TransferProgress::Waiting => {}
            }
            // Only a member that still leads can ask again; while an election is under way (no
            // leader known) there is nothing to do but wait for the metrics to change.
            let may_ask_again =
                matches!(progress, TransferProgress::Leading { .. }) && asks < MAX_TRANSFER_ASKS;
            let wake_at = if may_ask_again {
                deadline.min(ask_again_at)
            } else {
                deadline
            };
            let changed = crate::clock::timeout_at(wake_at, metrics.changed()).await;
            if matches!(changed, Ok(Err(_))) || Instant::now() >= deadline {
                return Err(PeerError::Unavailable(format!(
                    "leadership did not move to {to} in time"
                )));
            }
        }
    }

    /// Asks openraft to hand leadership to `to`: it stops taking writes and heartbeats and tells
    /// the voters; `to` starts an election at once if its log holds the leader's.
    async fn ask_raft_to_transfer(&self, to: u64) -> Result<(), PeerError> {
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|error| PeerError::Fatal(error.to_string()))
    }

    /// Refuses to hand leadership to a member that has not answered this leader within one
    /// election timeout (stopped, frozen or cut off). openraft's leader stops its heartbeats once
    /// it starts a transfer and never calls it off, so handing leadership to a member that cannot
    /// take it leaves the cluster without a leader that accepts writes until another member's
    /// election timeout ends it. etcd's leader gives up such a transfer after an election timeout
    /// and keeps leading; refusing it up front keeps the cluster writable throughout.
    ///
    /// A leader just elected has no heartbeat answer from anyone yet (openraft times heartbeat
    /// answers only): an answer to one of its appends counts instead, and it waits up to the
    /// longest election timeout for either before refusing, within the call's time limit.
    async fn refuse_transfer_to_a_silent_member(
        &self,
        to: u64,
        deadline: Instant,
    ) -> Result<(), PeerError> {
        let longest_silence = self.config.timing.election_timeout_min;
        let heard_lately = |now: &Metrics| match last_answer_age(now, to) {
            Some(age) => age <= longest_silence,
            None => matched_index(now, to).is_some(),
        };
        let mut metrics = self.raft.metrics();
        let wait_until = deadline.min(Instant::now() + self.config.timing.election_timeout_max);
        if wait_for(&mut metrics, wait_until, heard_lately).await {
            return Ok(());
        }
        let silence = last_answer_age(&metrics.borrow_watched(), to);
        Err(PeerError::Unavailable(match silence {
            Some(silence) => format!(
                "member {to} has not answered the leader for {} ms (more than an election \
                 timeout, {} ms); leadership stays with member {}",
                silence.as_millis(),
                longest_silence.as_millis(),
                self.id
            ),
            None => format!(
                "member {to} has not answered the leader yet; leadership stays with member {}",
                self.id
            ),
        }))
    }
}

/// Maps a raft error to the peer protocol's refusal.
fn peer_error<E>(error: openraft::errors::RaftError<TypeConfig, E>) -> PeerError
where
    E: std::error::Error + openraft::TryAsRef<openraft::errors::ForwardToLeader<TypeConfig>>,
{
    if let Some(forward) = error.forward_to_leader() {
        let leader = forward.leader_id.zip(forward.leader_node.clone());
        return PeerError::NotLeader { leader };
    }
    match error {
        // Callers match the errors whose meaning is not "refused" (a discarded entry, a
        // membership change in progress) by type before calling this.
        openraft::errors::RaftError::APIError(api_error) => {
            PeerError::Refused(api_error.to_string())
        }
        openraft::errors::RaftError::Fatal(fatal) => PeerError::Fatal(fatal.to_string()),
    }
}

/// How long ago `to` last answered this leader (none when it never has, or this member does not
/// lead).
fn last_answer_age(metrics: &Metrics, to: u64) -> Option<std::time::Duration> {
    let answers = metrics.heartbeat.as_ref()?;
    let answered_at = answers.get(&to)?.as_ref()?;
    Some(answered_at.elapsed())
}

/// Where a leader transfer stands, as the leader's metrics show it.
enum TransferProgress {
    /// The target leads.
    Done,
    /// Another member won an election meanwhile: the transfer is over without moving leadership
    /// where it was asked to.
    MovedElsewhere(u64),
    /// This member still leads; `caught_up` when the target now holds every entry of its log,
    /// some of which it lacked when last asked.
    Leading { caught_up: bool },
    /// No leader is known (an election is under way).
    Waiting,
}

/// Where the transfer from `me` to `to` stands; `held_when_asked` is the last entry the leader
/// knew `to` held when it last asked.
fn transfer_progress(
    now: &Metrics,
    (me, to): (u64, u64),
    held_when_asked: Option<u64>,
) -> TransferProgress {
    match now.current_leader {
        Some(leader) if leader == to => TransferProgress::Done,
        Some(leader) if leader != me => TransferProgress::MovedElsewhere(leader),
        Some(_) => TransferProgress::Leading {
            caught_up: holds_whole_log(now, to) && matched_index(now, to) > held_when_asked,
        },
        None => TransferProgress::Waiting,
    }
}

/// How many times one leader transfer asks raft to hand over, at most: the first time, and again
/// when the target catches up or the hand-over does not come.
const MAX_TRANSFER_ASKS: u32 = 6;

/// The index of the last entry the leader knows `to` holds (none while it knows of none, or
/// when this member does not lead).
fn matched_index(metrics: &Metrics, to: u64) -> Option<u64> {
    let replication = metrics.replication.as_ref()?;
    replication.get(&to)?.as_ref().map(|log_id| log_id.index)
}

/// Whether the leader knows `to` holds every entry of its log.
fn holds_whole_log(metrics: &Metrics, to: u64) -> bool {
    metrics.replication.is_some() && matched_index(metrics, to) == metrics.last_log_index
}

/// Refuses a change that names a member the membership does not hold, and a leader transfer to a
/// member that is not a voter. Adding a learner names a new member, so it is never refused here.
fn check_admin_target(
    request: &AdminRequest,
    membership: &crate::types::alias::StoredMembership,
) -> Result<(), PeerError> {
    let named = match request {
        AdminRequest::AddLearner { .. } | AdminRequest::AddLearnerToPromote { .. } => return Ok(()),
        AdminRequest::Promote { id }
        | AdminRequest::Remove { id }
        | AdminRequest::UpdateNode { id, .. } => *id,
        AdminRequest::TransferLeader { to } => *to,
    };
    if membership.get_node(&named).is_none() {
        return Err(PeerError::UnknownMember(named));
    }
    if matches!(request, AdminRequest::TransferLeader { .. }) && !is_voter(membership, named) {
        return Err(PeerError::Refused(format!("member {named} is not a voter")));
    }
    Ok(())
}

/// Refuses to add, to be promoted, a member that is a voter already or a learner at another peer
/// URL: openraft would keep the member as it is, and the intent would never apply. A learner at
/// the same URL is fine: it is promoted once caught up.
fn check_learner_to_promote(
    membership: &crate::types::alias::StoredMembership,
    id: u64,
    node: &crate::types::MemberNode,
) -> Result<(), PeerError> {
    if is_voter(membership, id) {
        return Err(PeerError::Refused(format!(
            "member {id} is a voter already"
        )));
    }
    match membership.get_node(&id) {
        Some(held) if held.peer_url != node.peer_url => Err(PeerError::Refused(format!(
            "member {id} is a learner at {}, not {}; remove it first",
            held.peer_url, node.peer_url
        ))),
        _ => Ok(()),
    }
}

fn is_voter(membership: &crate::types::alias::StoredMembership, id: u64) -> bool {
    membership.voter_ids().any(|voter| voter == id)
}

/// How the leader confirms it still leads before a linearizable read: always a quorum round
/// (ReadIndex), which no clock can fool. The leader-lease policy is only ever a bug planted by the
/// simulator's tests (`planted_bugs.rs`), never in the server's build.
fn read_policy() -> ReadPolicy {
    #[cfg(feature = "planted-bugs")]
    if crate::planted_bugs::linearizable_reads_trust_the_leader_lease() {
        return ReadPolicy::LeaseRead;
    }
    ReadPolicy::ReadIndex
}

/// The rounds a member's linearizable reads share: each is one ReadIndex round of `raft`, given
/// up after `round_timeout` (openraft bounds a round by the leader lease already; this bound does
/// not depend on it).
pub(crate) fn read_index_rounds(
    raft: crate::member_inner::Raft,
    round_timeout: std::time::Duration,
) -> Arc<ReadIndexRounds> {
    ReadIndexRounds::new(Arc::new(move || {
        let raft = raft.clone();
        Box::pin(async move {
            crate::clock::timeout(round_timeout, one_read_index_round(&raft))
                .await
                .unwrap_or_else(|_| {
                    Err(PeerError::Unavailable(format!(
                        "the leader's ReadIndex round did not end in {round_timeout:?}"
                    )))
                })
        })
    }))
}

/// One ReadIndex round: the leader confirms with a quorum that it still leads and answers the
/// index its reads must see applied.
async fn one_read_index_round(raft: &crate::member_inner::Raft) -> Result<u64, PeerError> {
    match raft.get_read_linearizer(read_policy()).await {
        Ok(linearizer) => Ok(linearizer.read_log_id().index()),
        // A leader that cannot hear from a quorum cannot confirm it still leads: there is no
        // usable leader, which the client should retry later (503), not a bad request.
        Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(not_enough))) => Err(
            PeerError::Unavailable(format!("the leader cannot reach a quorum: {not_enough}")),
        ),
        Err(error) => Err(peer_error(error)),
    }
}
