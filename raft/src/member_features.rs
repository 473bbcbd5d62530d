//! What each member's build can read, asked before the leader appends an entry that only newer
//! builds decode (issue 63, item 8): a txn with a nested txn, a compare over a range, or a put
//! that keeps the current value or lease (`docs/design/txn-extensions.md`).
//!
//! etcd gates such changes by cluster version: a feature is used once every member runs a version
//! that has it. A revkv member lists the features of its build on the peer route
//! `/raft/features`; a member of an older build answers 404 there, so it has none. The leader asks
//! the members it has not yet heard say yes, once per member and peer URL: a member's build
//! changes only when it restarts, and a member restarted on an older build that then meets such an
//! entry stops on an entry it cannot decode, as an etcd member refuses to start below its
//! cluster's version.

use std::collections::BTreeSet;
use std::sync::Mutex;

use revkv_storage::{LearnerPromotionChange, RangeEnd, Request, TxnOp, TxnRequest};

use crate::types::ClientRequest;

/// A capability of a build. Its name is what travels, so a build can list features an older one
/// has never heard of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// Nested txns, compares over a range and keeping puts inside txns, in log entries.
    TxnExtensions,
    /// The learners waiting to be promoted once they catch up (`Request::LearnerPromotion`), in
    /// log entries and snapshots.
    LearnerPromotion,
}

impl Feature {
    /// Every feature of this build.
    pub const ALL: [Feature; 2] = [Feature::TxnExtensions, Feature::LearnerPromotion];

    /// The feature a peer's answer names, if this build knows it.
    pub fn named(name: &str) -> Option<Feature> {
        Feature::ALL
            .into_iter()
            .find(|feature| feature.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Feature::TxnExtensions => "txn-extensions",
            Feature::LearnerPromotion => "learner-promotion",
        }
    }

    /// What the feature lets a client do, for a refusal that names it.
    pub fn what_it_allows(self) -> &'static str {
        match self {
            Feature::TxnExtensions => {
                "nested txns, compares over a key range and ignore_value or ignore_lease inside a txn"
            }
            Feature::LearnerPromotion => "learners that promote themselves once caught up",
        }
    }
}

/// The features this build has, as `/raft/features` lists them.
pub fn features_of_this_build() -> Vec<String> {
    Feature::ALL
        .iter()
        .map(|feature| feature.name().to_string())
        .collect()
}

/// The feature a request needs every member to have, if any.
pub fn needed_by(request: &ClientRequest) -> Option<Feature> {
    match &request.0 {
        Request::Txn(txn) if uses_txn_extensions(txn) => Some(Feature::TxnExtensions),
        // Only a new intent: a `Forget` follows an intent that every member of its time could
        // read (and every later member replays from the log or a snapshot), so it needs no
        // asking, and asking would stall it on any member that is down.
        Request::LearnerPromotion(LearnerPromotionChange::Intend(_)) => {
            Some(Feature::LearnerPromotion)
        }
        _ => None,
    }
}

/// True when the txn holds a nested txn, a compare over a range, a keeping put or a get at a
/// revision (a nested txn covers whatever it holds). A get at a revision decodes on older builds,
/// but their validation refuses it inside a txn when they apply it, where newer members apply it:
/// their states would part (`docs/design/txn-extensions.md`).
fn uses_txn_extensions(txn: &TxnRequest) -> bool {
    let compares_a_range = txn
        .compare
        .iter()
        .any(|compare| compare.range_end != RangeEnd::Single);
    compares_a_range
        || txn.success.iter().chain(&txn.failure).any(|op| match op {
            TxnOp::Txn(_) | TxnOp::PutKeeping { .. } => true,
            TxnOp::Get(get) => get.revision.is_some(),
            TxnOp::Put(_) | TxnOp::DeleteRange(_) => false,
        })
}

/// The members (by id and peer URL) that have said they have a feature. Members no longer in the
/// membership are forgotten each time it is consulted, so it holds at most the membership's size
/// times the number of features; a member removed and added again under another URL is asked
/// again.
#[derive(Default)]
pub(crate) struct ConfirmedFeatures {
    confirmed: Mutex<BTreeSet<(u64, String, Feature)>>,
}

impl ConfirmedFeatures {
    pub(crate) fn has(&self, member: &(u64, String), feature: Feature) -> bool {
        let confirmed = self.confirmed.lock().expect("confirmed features lock");
        confirmed.contains(&(member.0, member.1.clone(), feature))
    }

    /// Forgets every member that is not one of `members` (removed, or moved to another URL).
    pub(crate) fn forget_all_but(&self, members: &[(u64, String)]) {
        let mut confirmed = self.confirmed.lock().expect("confirmed features lock");
        confirmed.retain(|(id, url, _)| {
            members
                .iter()
                .any(|member| member.0 == *id && member.1 == *url)
        });
    }

    /// Records every feature of this build that `names` (a member's answer) lists, so that the
    /// member is not asked again for any of them while it keeps its id and URL.
    pub(crate) fn confirm_named(&self, member: &(u64, String), names: &[String]) {
        let mut confirmed = self.confirmed.lock().expect("confirmed features lock");
        for feature in names.iter().filter_map(|name| Feature::named(name)) {
            confirmed.insert((member.0, member.1.clone(), feature));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_confirms_every_feature_it_names_that_this_build_knows_and_only_for_that_url() {
        let confirmed = ConfirmedFeatures::default();
        let member = (4, "http://127.0.0.1:1".to_string());
        let names = vec![
            "learner-promotion".to_string(),
            "from-a-newer-build".to_string(),
        ];
        confirmed.confirm_named(&member, &names);
        assert!(confirmed.has(&member, Feature::LearnerPromotion));
        assert!(!confirmed.has(&member, Feature::TxnExtensions));
        let moved = (4, "http://127.0.0.1:2".to_string());
        assert!(!confirmed.has(&moved, Feature::LearnerPromotion));
        confirmed.forget_all_but(std::slice::from_ref(&moved));
        assert!(!confirmed.has(&member, Feature::LearnerPromotion));
    }

    #[test]
    fn every_feature_is_found_by_its_name() {
        for feature in Feature::ALL {
            assert_eq!(Feature::named(feature.name()), Some(feature));
        }
        assert_eq!(Feature::named("no-such-feature"), None);
    }
}
