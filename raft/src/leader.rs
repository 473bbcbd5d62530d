//! The leader's side of the member: what runs on the member that currently leads, whether the
//! call came from this member or was forwarded by another over the peer protocol. Writes, read
//! indexes and membership changes; each answers `NotLeader` when this member does not lead, so
//! the caller can find the leader and retry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ChangeMembershipError, ClientWriteError, LinearizableReadError, RaftError};
use openraft::Instant as _;
use openraft::{ChangeMembers, ReadPolicy};
use tokio::time::Instant;

use crate::member_inner::MemberInner;
use crate::peer::client::CallError;
use crate::peer::{paths, AdminRequest, ForwardedWrite, PeerError};
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
            Err(error) => Err(self.peer_error(error)),
        }
    }

    /// A read index from this member, which must be the leader (one ReadIndex round, shared by
    /// concurrent callers).
    pub(crate) async fn read_index_as_leader(&self) -> Result<u64, PeerError> {
        match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
            Ok(linearizer) => Ok(linearizer.read_log_id().index()),
            // A leader that cannot hear from a quorum cannot confirm it still leads: there is no
            // usable leader, which the client should retry later (503), not a bad request.
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(not_enough))) => Err(
                PeerError::Unavailable(format!("the leader cannot reach a quorum: {not_enough}")),
            ),
            Err(error) => Err(self.peer_error(error)),
        }
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
        let is_voter = |id: u64| membership.voter_ids().any(|voter| voter == id);
        let is_member = |id: u64| membership.get_node(&id).is_some();
        let changed = match request {
            AdminRequest::AddLearner { id, node } => self.raft.add_learner(id, node, true).await,
            AdminRequest::Promote { id } if !is_member(id) => {
                return Err(PeerError::UnknownMember(id))
            }
            AdminRequest::Promote { id } => {
                let voters = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
                self.raft.change_membership(voters, false).await
            }
            AdminRequest::Remove { id } if !is_member(id) => {
                return Err(PeerError::UnknownMember(id))
            }
            AdminRequest::Remove { id } if is_voter(id) => {
                let voters = ChangeMembers::RemoveVoters(BTreeSet::from([id]));
                self.raft.change_membership(voters, false).await
            }
            AdminRequest::Remove { id } => {
                let nodes = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
                self.raft.change_membership(nodes, false).await
            }
            AdminRequest::TransferLeader { to } if !is_member(to) => {
                return Err(PeerError::UnknownMember(to))
            }
            AdminRequest::TransferLeader { to } if !is_voter(to) => {
                return Err(PeerError::Refused(format!("member {to} is not a voter")))
            }
            AdminRequest::TransferLeader { to } => {
                return self.transfer_leadership(to).await.map(|()| None)
            }
            AdminRequest::UpdateNode { id, .. } if !is_member(id) => {
                return Err(PeerError::UnknownMember(id))
            }
            AdminRequest::UpdateNode { id, node } => {
                let nodes = ChangeMembers::SetNodes(BTreeMap::from([(id, node)]));
                self.raft.change_membership(nodes, false).await
            }
        };
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
            Err(error) => Err(self.peer_error(error)),
        }
    }

    /// Asks raft to hand leadership to `to` and waits (bounded) until it has.
    async fn transfer_leadership(&self, to: u64) -> Result<(), PeerError> {
        if self.raft.metrics().borrow_watched().current_leader == Some(to) {
            return Ok(());
        }
        self.refuse_transfer_to_a_silent_member(to)?;
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|error| PeerError::Fatal(error.to_string()))?;
        let deadline = Instant::now() + self.config.peer_limits.call_timeout;
        let mut metrics = self.raft.metrics();
        loop {
            if metrics.borrow_watched().current_leader == Some(to) {
                return Ok(());
            }
            let changed = tokio::time::timeout_at(deadline, metrics.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(PeerError::Unavailable(format!(
                    "leadership did not move to {to} in time"
                )));
            }
        }
    }

    /// Refuses to hand leadership to a member that has not answered this leader within one
    /// election timeout (stopped, frozen or cut off). openraft's leader stops its heartbeats once
    /// it starts a transfer and never calls it off, so handing leadership to a member that cannot
    /// take it leaves the cluster without a leader that accepts writes until another member's
    /// election timeout ends it. etcd's leader gives up such a transfer after an election timeout
    /// and keeps leading; refusing it up front keeps the cluster writable throughout.
    fn refuse_transfer_to_a_silent_member(&self, to: u64) -> Result<(), PeerError> {
        let longest_silence = self.config.timing.election_timeout_min;
        let last_answer = self
            .raft
            .metrics()
            .borrow_watched()
            .heartbeat
            .as_ref()
            .and_then(|answers| answers.get(&to).cloned().flatten())
            .map(|answered_at| answered_at.elapsed());
        match last_answer {
            Some(silence) if silence <= longest_silence => Ok(()),
            Some(silence) => Err(PeerError::Unavailable(format!(
                "member {to} has not answered the leader for {} ms (more than an election \
                 timeout, {} ms); leadership stays with member {}",
                silence.as_millis(),
                longest_silence.as_millis(),
                self.id
            ))),
            None => Err(PeerError::Unavailable(format!(
                "member {to} has not answered the leader yet; leadership stays with member {}",
                self.id
            ))),
        }
    }

    /// Maps a raft error to the peer protocol's refusal.
    fn peer_error<E>(&self, error: openraft::errors::RaftError<TypeConfig, E>) -> PeerError
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
}
