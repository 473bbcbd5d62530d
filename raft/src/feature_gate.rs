//! The leader's check before it appends an entry that only newer builds read (issue 63, item 8):
//! every member of the membership, learners included, is asked on `/raft/features` whether its
//! build has the feature, once per member and peer URL (`member_features.rs` says why that is
//! enough), and the entry is refused, naming each member that lacks the feature or did not answer.

use crate::member_features::Feature;
use crate::member_inner::MemberInner;
use crate::peer::client::CallError;
use crate::peer::{paths, PeerError};

impl MemberInner {
    /// Answers whether every member of the membership, learners included, has `feature`, asking
    /// those not yet heard from at once (each within the peer call timeout). A refusal names each
    /// member that lacks it or did not answer.
    pub(crate) async fn require_feature(&self, feature: Feature) -> Result<(), PeerError> {
        let timeout = self.config.peer_limits.call_timeout;
        let members = self.members_with_peer_urls();
        self.confirmed_features.forget_all_but(&members);
        let unconfirmed: Vec<(u64, String)> = members
            .into_iter()
            .filter(|member| member.0 != self.id && !self.confirmed_features.has(member, feature))
            .collect();
        let asks = unconfirmed.into_iter().map(|member| async move {
            let answer = self
                .peers
                .call::<_, Vec<String>>(&member.1, paths::FEATURES, &(), timeout)
                .await;
            (member, answer)
        });
        let mut lacking = Vec::new();
        for (member, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(names) if names.iter().any(|name| name == feature.name()) => {
                    self.confirmed_features.confirm(member, feature)
                }
                Ok(_) | Err(CallError::NotServed(_)) => {
                    lacking.push(format!("member {} runs a build without it", member.0))
                }
                Err(error) => lacking.push(format!("member {} did not say ({error})", member.0)),
            }
        }
        if lacking.is_empty() {
            return Ok(());
        }
        Err(PeerError::Refused(format!(
            "nested txns, compares over a key range and ignore_value or ignore_lease inside a txn \
             ({}) need every member at a build that reads them: {}; upgrade those members first",
            feature.name(),
            lacking.join(", ")
        )))
    }
}
