//! What the leader's learner promotions need from the embedder: their settings, and an observer
//! told of each promotion and of the waiting learners' lag (the node feeds its Prometheus metrics),
//! so this crate stays free of any metrics library. Apart from `learner_promotion.rs` so that the
//! member's configuration can name them without depending on the member itself.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How the leader promotes learners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearnerPromotionSettings {
    /// How often the leader looks at the intended learners' progress.
    pub check_interval: Duration,
    /// The bound of an intent that names none: a learner at most this many log entries behind
    /// the leader has caught up (`--auto-promote-max-lag`).
    pub default_max_lag_entries: u64,
    /// How long an intent may name a member the membership does not hold (its add never
    /// happened: an outcome-unknown write, a cancelled call) before the leader forgets it. An
    /// add's learner joins the membership one raft commit after its intent, so this is far
    /// longer than an add takes; a new leader starts counting again.
    pub stranded_intent_grace: Duration,
}

impl Default for LearnerPromotionSettings {
    fn default() -> Self {
        LearnerPromotionSettings {
            check_interval: Duration::from_millis(100),
            default_max_lag_entries: 1000,
            stranded_intent_grace: Duration::from_secs(60),
        }
    }
}

/// Receives what the promotion task sees and does, so this crate stays free of any metrics
/// library. Called on the task: implementations must be cheap.
pub trait LearnerPromotionObserver: Send + Sync + 'static {
    /// This leader promoted learner `member_id`, which was `lag` entries behind.
    fn learner_promoted(&self, member_id: u64, lag: u64);
    /// The lag of every intended learner at this check (`None`: the leader knows of no entry
    /// it holds yet); an empty list when this member does not lead or no learner waits.
    fn learner_lags(&self, lags: &[(u64, Option<u64>)]);
}

/// An optional observer.
#[derive(Clone, Default)]
pub struct LearnerPromotionEvents {
    observer: Option<Arc<dyn LearnerPromotionObserver>>,
}

impl LearnerPromotionEvents {
    pub fn new(observer: Arc<dyn LearnerPromotionObserver>) -> Self {
        LearnerPromotionEvents {
            observer: Some(observer),
        }
    }

    pub(crate) fn promoted(&self, member_id: u64, lag: u64) {
        if let Some(observer) = &self.observer {
            observer.learner_promoted(member_id, lag);
        }
    }

    pub(crate) fn lags(&self, lags: &[(u64, Option<u64>)]) {
        if let Some(observer) = &self.observer {
            observer.learner_lags(lags);
        }
    }
}

impl fmt::Debug for LearnerPromotionEvents {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::timings::write_observed(formatter, self.observer.is_some())
    }
}
