//! Learners that promote themselves (`member add --auto-promote`, issue 65, item 4;
//! `docs/design/auto-promote-learners.md`): the intents are replicated state
//! (`Request::LearnerPromotion`, kept by the store), and this task, on whichever member leads,
//! promotes each intended learner through a membership change once its log is within the
//! intent's bound of the leader's, then forgets the intent. A learner that never catches up is
//! never promoted; a new leader reads the same intents and goes on.
//!
//! An intent applies only while the membership holds a learner with its id *and* its peer URL,
//! so it never promotes a different process that later joins under the same id. An intent for a
//! voter (promoted by hand, or promoted just before a leader change forgot to forget it) is
//! forgotten; one for a member the membership does not hold waits, since the learner's add
//! follows its intent, but only for `stranded_intent_grace`: an intent whose add never happened
//! (an outcome-unknown write, a cancelled call) is then forgotten, so it cannot hold one of the
//! store's places for intents forever.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use revkv_storage::{LearnerPromotion, LearnerPromotionChange, Request};
use tokio::sync::watch;

use crate::clock::Instant;
use crate::member_inner::{MemberInner, Metrics};
use crate::peer::{ForwardedWrite, PeerError};
use crate::types::ClientRequest;

/// Starts the task; it ends when `stop` turns true (or its sender is dropped).
pub(crate) fn spawn(inner: Arc<MemberInner>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut ticks = crate::clock::interval(inner.config.learner_promotion.check_interval);
        let mut stranded = StrandedIntents::default();
        loop {
            tokio::select! {
                _ = ticks.tick() => check_once(&inner, &mut stranded).await,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
            }
        }
    });
}

/// Where an intended learner stands in the membership the leader sees.
#[derive(Debug, PartialEq, Eq)]
enum Standing {
    /// A learner at the intent's peer URL, this many entries behind (`None`: not known yet).
    Learner { lag: Option<u64> },
    /// A voter already: the intent is done.
    Voter,
    /// Not in the membership, or there under another peer URL: the intent waits.
    Elsewhere,
}

/// The intents this leader has seen name a member its membership does not hold, and since when.
#[derive(Debug, Default)]
struct StrandedIntents {
    since: HashMap<(u64, String), Instant>,
}

impl StrandedIntents {
    /// Notes the intents stranded at this check (forgetting any no longer stranded) and answers
    /// those stranded for `grace` or longer.
    fn overdue(
        &mut self,
        stranded: &[&LearnerPromotion],
        now: Instant,
        grace: Duration,
    ) -> Vec<LearnerPromotion> {
        let is_stranded = |(member_id, peer_url): &(u64, String)| {
            stranded
                .iter()
                .any(|intent| intent.member_id == *member_id && intent.peer_url == *peer_url)
        };
        self.since.retain(|key, _| is_stranded(key));
        let mut overdue = Vec::new();
        for intent in stranded {
            let key = (intent.member_id, intent.peer_url.clone());
            let since = *self.since.entry(key).or_insert(now);
            if now.saturating_duration_since(since) >= grace {
                overdue.push((*intent).clone());
            }
        }
        overdue
    }
}

/// One look at every intended learner, on the leader only.
async fn check_once(inner: &MemberInner, stranded: &mut StrandedIntents) {
    let metrics = inner.raft.metrics().borrow_watched().clone();
    if metrics.current_leader != Some(inner.id) {
        inner.config.learner_promotion_events.lags(&[]);
        // A leader to be counts a stranded intent's grace from its own first look.
        stranded.since.clear();
        return;
    }
    // Only a membership the state machine has applied: it is committed, and every change of the
    // intents before it is in the store (a new leader that has not applied the `Forget` ahead of
    // a learner re-added without `--auto-promote` must not read the old intent beside it).
    if !membership_applied(&metrics) {
        return;
    }
    let promotions = match inner.store.learner_promotions() {
        Ok(promotions) => promotions,
        Err(error) => {
            tracing::debug!(%error, "reading the learners to promote failed; will retry");
            return;
        }
    };
    let mut lags = Vec::with_capacity(promotions.len());
    let mut elsewhere = Vec::new();
    for promotion in &promotions {
        match standing(&metrics, promotion) {
            Standing::Voter => forget(inner, promotion.member_id).await,
            Standing::Elsewhere => elsewhere.push(promotion),
            Standing::Learner { lag } => {
                lags.push((promotion.member_id, lag));
                let heard = heard_within(&metrics, promotion.member_id, inner.heard_within());
                if let Some(lag) = caught_up(lag, promotion.max_lag_entries, heard) {
                    promote(inner, promotion, lag).await;
                }
            }
        }
    }
    inner.config.learner_promotion_events.lags(&lags);
    let grace = inner.config.learner_promotion.stranded_intent_grace;
    for intent in stranded.overdue(&elsewhere, Instant::now(), grace) {
        forget_stranded(inner, &intent, grace).await;
    }
}

/// Forgets an intent whose learner has not joined within `grace` of this leader's first look.
async fn forget_stranded(inner: &MemberInner, intent: &LearnerPromotion, grace: Duration) {
    let id = intent.member_id;
    tracing::warn!(
        member = id,
        peer_url = %intent.peer_url,
        "forgetting the auto-promotion of member {id} at {}: no learner with that id and peer \
         URL joined within {grace:?}; add it again with --auto-promote",
        intent.peer_url
    );
    forget(inner, id).await;
}

/// Whether the membership in `metrics` is at or below the last applied entry.
fn membership_applied(metrics: &Metrics) -> bool {
    let membership_index = metrics
        .membership_config
        .log_id()
        .as_ref()
        .map(|id| id.index);
    let applied_index = metrics.last_applied.as_ref().map(|id| id.index);
    entry_applied(membership_index, applied_index)
}

/// Whether the entry at `entry_index` (`None`: the initial membership, in no entry) is applied
/// when the state machine has applied up to `applied_index` (`None`: nothing yet).
fn entry_applied(entry_index: Option<u64>, applied_index: Option<u64>) -> bool {
    match (entry_index, applied_index) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(entry), Some(applied)) => entry <= applied,
    }
}

/// Where `promotion`'s learner stands in `metrics`' membership.
fn standing(metrics: &Metrics, promotion: &LearnerPromotion) -> Standing {
    let membership = &metrics.membership_config;
    let id = promotion.member_id;
    if membership.voter_ids().any(|voter| voter == id) {
        return Standing::Voter;
    }
    match membership.get_node(&id) {
        Some(node) if node.peer_url == promotion.peer_url => Standing::Learner {
            lag: lag_of(metrics, id),
        },
        _ => Standing::Elsewhere,
    }
}

/// How many entries of the leader's log `id` is known not to hold; `None` until the leader
/// knows of one entry it holds (a learner that never answered is not "caught up" on an empty
/// log).
fn lag_of(metrics: &Metrics, id: u64) -> Option<u64> {
    let replication = metrics.replication.as_ref()?;
    let matched = replication.get(&id)?.as_ref()?.index;
    let last = metrics.last_log_index.unwrap_or(0);
    Some(last.saturating_sub(matched))
}

/// The lag of a learner to promote now: known, within `bound`, and the leader has heard from it
/// recently (a learner that caught up and then stopped answering would otherwise look caught up
/// until `bound` more entries came, and its promotion would leave the cluster a voter short).
fn caught_up(lag: Option<u64>, bound: u64, heard_recently: bool) -> Option<u64> {
    #[cfg(feature = "planted-bugs")]
    if crate::planted_bugs::learner_lag_is_compared_the_wrong_way() {
        return lag.filter(|lag| *lag > bound && heard_recently);
    }
    lag.filter(|lag| *lag <= bound && heard_recently)
}

/// Whether the leader's last answer from `id` is at most `within` old.
fn heard_within(metrics: &Metrics, id: u64, within: Duration) -> bool {
    let Some(Some(last)) = metrics.heartbeat.as_ref().and_then(|heard| heard.get(&id)) else {
        return false;
    };
    crate::clock::Instant::now().saturating_duration_since(**last) <= within
}

/// Promotes one caught-up learner and forgets its intent; a failure (another membership change
/// in flight, leadership moving) is tried again at the next check.
async fn promote(inner: &MemberInner, promotion: &LearnerPromotion, lag: u64) {
    let id = promotion.member_id;
    match inner.promote_checked_learner(id).await {
        Ok(_) => {
            tracing::info!(
                member = id,
                lag,
                bound = promotion.max_lag_entries,
                "promoted learner {id} automatically: {lag} entries behind, within {}",
                promotion.max_lag_entries
            );
            inner.config.learner_promotion_events.promoted(id, lag);
            forget(inner, id).await;
        }
        Err(error) => {
            tracing::debug!(member = id, %error, "promoting a caught-up learner failed; will retry")
        }
    }
}

/// Forgets the intent for `member_id` through raft (a failure is retried at the next check).
async fn forget(inner: &MemberInner, member_id: u64) {
    if let Err(error) = inner
        .write_learner_promotion(LearnerPromotionChange::Forget { member_id })
        .await
    {
        tracing::debug!(member = member_id, %error, "forgetting a promotion failed; will retry");
    }
}

impl MemberInner {
    /// How recent the leader's last answer from a learner must be for it to count as caught up:
    /// two of the longest election timeouts, by which a member that answers at all has answered a
    /// heartbeat.
    fn heard_within(&self) -> Duration {
        self.config.timing.election_timeout_max * 2
    }

    /// etcd's readiness check before a manual promote (`ErrLearnerNotReady`), with the
    /// auto-promotion's rule and the leader's default bound (`--auto-promote-max-lag`) where etcd
    /// asks for 90 % of the leader's log, since a tenth of a long log is millions of entries: the
    /// learner's log is known, at most the bound behind, and the leader heard from it lately. A
    /// voter passes, as promoting it changes nothing.
    ///
    /// openraft publishes a learner's progress and its answers in its metrics a moment after they
    /// happen, so a learner that has just caught up (a voter's add is a blocking learner add, then
    /// this promote) may not show it yet: the check waits for the metrics to show the learner
    /// ready, at most as long as an answer may be old, and refuses only then.
    pub(crate) async fn check_learner_ready(&self, id: u64) -> Result<(), PeerError> {
        let bound = self.config.learner_promotion.default_max_lag_entries;
        let heard_within_duration = self.heard_within();
        let ready = |metrics: &Metrics| {
            let is_voter = metrics
                .membership_config
                .voter_ids()
                .any(|voter| voter == id);
            let heard = heard_within(metrics, id, heard_within_duration);
            is_voter || caught_up(lag_of(metrics, id), bound, heard).is_some()
        };
        let mut watched = self.raft.metrics();
        let deadline = crate::clock::Instant::now() + heard_within_duration;
        if crate::member_inner::wait_for(&mut watched, deadline, ready).await {
            return Ok(());
        }
        let metrics = self.raft.metrics().borrow_watched().clone();
        let lag = lag_of(&metrics, id);
        let standing = match lag {
            None => "holds no entry the leader knows of".to_string(),
            Some(lag) if lag > bound => format!("is {lag} entries behind, more than {bound}"),
            Some(_) => "has not answered the leader lately".to_string(),
        };
        Err(PeerError::LearnerNotReady(format!(
            "learner {id} {standing}; can only promote a learner member which is in sync with leader"
        )))
    }

    /// Writes one change to the intents through raft, on this member, which must lead; a change
    /// the store refuses is `Refused` with its words.
    pub(crate) async fn write_learner_promotion(
        &self,
        change: LearnerPromotionChange,
    ) -> Result<(), PeerError> {
        let written = self
            .write_as_leader(ClientRequest(Request::LearnerPromotion(change)))
            .await?;
        refused_by_the_store(written)
    }

    /// The intent for `member_id` moved to `node`'s peer URL, when one is held at another URL.
    pub(crate) fn learner_promotion_moved_to(
        &self,
        member_id: u64,
        node: &crate::types::MemberNode,
    ) -> Result<Option<LearnerPromotion>, PeerError> {
        let held = self.held_learner_promotions()?;
        Ok(held
            .into_iter()
            .find(|promotion| promotion.member_id == member_id)
            .filter(|promotion| promotion.peer_url != node.peer_url)
            .map(|promotion| LearnerPromotion {
                peer_url: node.peer_url.clone(),
                ..promotion
            }))
    }

    /// Writes an intent moved with its learner, without asking the members for the feature:
    /// every member has applied this learner's earlier intent, so every member reads the entry,
    /// and the learner is asked nothing while it moves (it listens at the new URL only once
    /// restarted there, as with etcd's `member update`).
    pub(crate) async fn move_learner_promotion(
        &self,
        moved: LearnerPromotion,
    ) -> Result<(), PeerError> {
        let change = LearnerPromotionChange::Intend(moved);
        let written = self
            .append_as_leader(ClientRequest(Request::LearnerPromotion(change)))
            .await?;
        refused_by_the_store(written)
    }

    /// The intents the store holds; a store that cannot be read is unavailable for now.
    fn held_learner_promotions(&self) -> Result<Vec<LearnerPromotion>, PeerError> {
        self.store
            .learner_promotions()
            .map_err(|error| PeerError::Unavailable(error.to_string()))
    }

    /// Whether the store holds an intent for `member_id`.
    pub(crate) fn learner_promotion_held(&self, member_id: u64) -> Result<bool, PeerError> {
        let held = self.held_learner_promotions()?;
        Ok(held
            .iter()
            .any(|promotion| promotion.member_id == member_id))
    }

    /// Forgets the intent for `member_id` if the store holds one (before a learner is added
    /// again without one, and after a member is removed).
    pub(crate) async fn forget_learner_promotion_if_held(
        &self,
        member_id: u64,
    ) -> Result<(), PeerError> {
        if self.learner_promotion_held(member_id)? {
            self.write_learner_promotion(LearnerPromotionChange::Forget { member_id })
                .await?;
        }
        Ok(())
    }
}

/// The answer to a written change of the intents: a change the store refused is `Refused` with
/// its words.
fn refused_by_the_store(written: ForwardedWrite) -> Result<(), PeerError> {
    written
        .result
        .outcome
        .map(|_| ())
        .map_err(|rejection| PeerError::Refused(rejection.into_storage().to_string()))
}

#[cfg(test)]
mod tests {
    use super::{caught_up, entry_applied, Instant, LearnerPromotion, StrandedIntents};
    use std::time::Duration;

    fn intent(member_id: u64, peer_url: &str) -> LearnerPromotion {
        LearnerPromotion {
            member_id,
            peer_url: peer_url.to_owned(),
            max_lag_entries: 1000,
        }
    }

    fn ids(intents: Vec<LearnerPromotion>) -> Vec<u64> {
        intents.into_iter().map(|intent| intent.member_id).collect()
    }

    #[test]
    fn a_stranded_intent_is_overdue_only_after_its_grace_and_only_while_stranded() {
        let grace = Duration::from_secs(60);
        let start = Instant::now();
        let mut stranded = StrandedIntents::default();
        let (four, five) = (intent(4, "http://a"), intent(5, "http://b"));
        assert!(ids(stranded.overdue(&[&four], start, grace)).is_empty());
        let later = start + Duration::from_secs(30);
        assert!(ids(stranded.overdue(&[&four, &five], later, grace)).is_empty());
        assert_eq!(
            ids(stranded.overdue(&[&four, &five], start + grace, grace)),
            vec![4],
            "member 5 has been stranded for 30 s only"
        );
        // Member 4 joined (no longer stranded): its clock is forgotten, and a new stranding of the
        // same intent starts from zero.
        assert_eq!(
            ids(stranded.overdue(&[&five], later + grace, grace)),
            vec![5]
        );
        let much_later = later + grace * 3;
        assert!(ids(stranded.overdue(&[&four], much_later, grace)).is_empty());
        // Another peer URL under the same id is another intent.
        let four_elsewhere = intent(4, "http://c");
        let last = much_later + grace;
        assert_eq!(
            ids(stranded.overdue(&[&four, &four_elsewhere], last, grace)),
            vec![4],
            "only the intent at http://a has been stranded for the grace"
        );
    }

    #[test]
    fn a_membership_counts_only_once_its_entry_is_applied() {
        assert!(
            entry_applied(None, None),
            "the initial membership is in no entry"
        );
        assert!(entry_applied(Some(7), Some(7)));
        assert!(entry_applied(Some(7), Some(9)));
        assert!(
            !entry_applied(Some(7), Some(6)),
            "committed or not, not applied yet"
        );
        assert!(!entry_applied(Some(7), None));
    }

    #[test]
    fn a_learner_is_caught_up_only_within_its_bound_and_when_heard_from() {
        assert_eq!(caught_up(Some(5), 5, true), Some(5));
        assert_eq!(caught_up(Some(0), 5, true), Some(0));
        assert_eq!(caught_up(Some(6), 5, true), None, "beyond the bound");
        assert_eq!(caught_up(None, 5, true), None, "no entry known held");
        assert_eq!(caught_up(Some(0), 5, false), None, "not heard from lately");
    }
}
