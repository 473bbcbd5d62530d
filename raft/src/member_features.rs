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

use revkv_storage::{RangeEnd, Request, TxnOp, TxnRequest};

use crate::types::ClientRequest;

/// A capability of a build. Its name is what travels, so a build can list features an older one
/// has never heard of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// Nested txns, compares over a range and keeping puts inside txns, in log entries.
    TxnExtensions,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::TxnExtensions => "txn-extensions",
        }
    }
}

/// The features this build has, as `/raft/features` lists them.
pub fn features_of_this_build() -> Vec<String> {
    [Feature::TxnExtensions]
        .iter()
        .map(|feature| feature.name().to_string())
        .collect()
}

/// The feature a request needs every member to have, if any.
pub fn needed_by(request: &ClientRequest) -> Option<Feature> {
    match &request.0 {
        Request::Txn(txn) if uses_txn_extensions(txn) => Some(Feature::TxnExtensions),
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

    pub(crate) fn confirm(&self, member: (u64, String), feature: Feature) {
        let mut confirmed = self.confirmed.lock().expect("confirmed features lock");
        confirmed.insert((member.0, member.1, feature));
    }
}
