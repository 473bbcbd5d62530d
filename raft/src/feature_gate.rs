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
        self.require_feature_of(self.members_with_peer_urls(), feature)
            .await
    }

    /// As `require_feature`, and of `joining` too: a member about to be added, which the
    /// membership does not hold yet but which will read the entry.
    pub(crate) async fn require_feature_joining(
        &self,
        feature: Feature,
        joining: (u64, String),
    ) -> Result<(), PeerError> {
        let mut members = self.members_with_peer_urls();
        // A confirmation kept for an earlier member at this id and URL, since removed, says
        // nothing of the process joining now: only members the membership holds keep theirs.
        self.confirmed_features.forget_all_but(&members);
        members.retain(|member| member.0 != joining.0);
        members.push(joining);
        self.require_feature_of(members, feature).await
    }

    async fn require_feature_of(
        &self,
        members: Vec<(u64, String)>,
        feature: Feature,
    ) -> Result<(), PeerError> {
        let timeout = self.config.peer_limits.call_timeout;
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
        let mut silent = Vec::new();
        for (member, answer) in futures::future::join_all(asks).await {
            if let Ok(names) = &answer {
                self.confirmed_features.confirm_named(&member, names);
            }
            match answer {
                Ok(names) if names.iter().any(|name| name == feature.name()) => {}
                Ok(_) | Err(CallError::NotServed(_)) => {
                    lacking.push(format!("member {} runs a build without it", member.0))
                }
                Err(error) => silent.push(format!("member {} did not say ({error})", member.0)),
            }
        }
        if !lacking.is_empty() {
            lacking.extend(silent);
            return Err(PeerError::Refused(format!(
                "{} ({}) need every member at a build that reads them: {}; upgrade those \
                 members first",
                feature.what_it_allows(),
                feature.name(),
                lacking.join(", ")
            )));
        }
        if !silent.is_empty() {
            // Nothing says a build lacks it, only that some member did not answer: worth trying
            // again once it does, so "unavailable", not a refusal with upgrade advice.
            return Err(PeerError::Unavailable(format!(
                "{} ({}) wait for every member to say its build reads them: {}",
                feature.what_it_allows(),
                feature.name(),
                silent.join(", ")
            )));
        }
        Ok(())
    }
}
