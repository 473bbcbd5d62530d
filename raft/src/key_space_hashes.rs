//! The members' hashes of their history at one revision, for the consistency check (etcd's
//! `getPeerHashKVs`): a member answers for itself on the peer route `/raft/key-space-hash`, and
//! `collect` asks every member of the membership at once, each bounded in time. What the answers
//! mean (who disagrees with whom) is decided above this crate, by the node's checker.

use std::time::Duration;

use revkv_storage::ReadError;

use crate::member_inner::MemberInner;
use crate::peer::client::CallError;
use crate::peer::{paths, KeySpaceHashAnswer, PeerError};

/// How long a member waits to apply the revision it is asked about. A healthy member applies what
/// the asking member has applied within a few heartbeats; one further behind answers `Behind`,
/// and the check leaves it out rather than waiting on it.
const APPLY_WAIT: Duration = Duration::from_secs(2);

/// One member's answer, or why there was none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberKeySpaceHash {
    pub member_id: u64,
    /// `Err` holds why the member gave no answer (unreachable, timed out, failed to hash).
    pub answer: Result<KeySpaceHashAnswer, String>,
}

impl MemberInner {
    /// This member's hash of its history at `revision`, after waiting (bounded) to apply it.
    pub(crate) async fn key_space_hash(
        &self,
        revision: u64,
    ) -> Result<KeySpaceHashAnswer, PeerError> {
        let mut applied = self.applied.clone();
        let reached = applied.wait_for(|position| position.revision >= revision);
        if !matches!(crate::clock::timeout(APPLY_WAIT, reached).await, Ok(Ok(_))) {
            let applied_revision = self.applied.borrow().revision;
            return Ok(KeySpaceHashAnswer::Behind { applied_revision });
        }
        let store = self.store.clone();
        let hashed = crate::runtime::offload(move || store.key_space_hash(revision))
            .await
            .map_err(|error| PeerError::Fatal(error.to_string()))?;
        match hashed {
            Ok(hash) => Ok(KeySpaceHashAnswer::Hashed {
                hash: hash.hash,
                compact_revision: hash.compact_revision,
            }),
            Err(ReadError::Compacted {
                compact_revision, ..
            }) => Ok(KeySpaceHashAnswer::Compacted { compact_revision }),
            Err(ReadError::FutureRevision { current, .. }) => Ok(KeySpaceHashAnswer::Behind {
                applied_revision: current,
            }),
            Err(ReadError::Busy(reason)) => Err(PeerError::Unavailable(reason)),
            Err(fault) => Err(PeerError::Fatal(fault.to_string())),
        }
    }

    /// Every member's answer for `revision` (this member's own included), asked at once; a member
    /// that does not answer within `timeout` is reported without an answer.
    pub(crate) async fn collect_key_space_hashes(
        &self,
        revision: u64,
        timeout: Duration,
    ) -> Vec<MemberKeySpaceHash> {
        let members = self.members_with_peer_urls();
        let asks = members.into_iter().map(|(member_id, peer_url)| async move {
            let answer = if member_id == self.id {
                match crate::clock::timeout(timeout, self.key_space_hash(revision)).await {
                    Ok(answer) => answer.map_err(|error| error.to_string()),
                    Err(_) => Err(format!("no hash within {timeout:?}")),
                }
            } else {
                let call = self
                    .peers
                    .call(&peer_url, paths::KEY_SPACE_HASH, &revision, timeout);
                call.await.map_err(|error: CallError| error.to_string())
            };
            MemberKeySpaceHash { member_id, answer }
        });
        futures::future::join_all(asks).await
    }
}
