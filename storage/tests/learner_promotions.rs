//! The learners waiting to be promoted (`Request::LearnerPromotion`) through the apply path:
//! recorded, replaced and forgotten at no revision, kept across a reopen, refused when malformed
//! or past the limit with nothing changed, carried by a raft snapshot and dropped by a restore.

use crate::support;

use revkv_storage::{LearnerPromotion, LearnerPromotionChange, Rejection, Request, Response};
use support::{
    assert_cleared_by_quiet_snapshot_and_dropped_by_restore, ok,
    snapshot_and_a_store_that_installed_it, TestStore,
};

fn intent(member_id: u64, peer_url: &str) -> LearnerPromotion {
    LearnerPromotion {
        member_id,
        peer_url: peer_url.into(),
        max_lag_entries: 1000,
    }
}

fn intend(promotion: &LearnerPromotion) -> Request {
    Request::LearnerPromotion(LearnerPromotionChange::Intend(promotion.clone()))
}

fn forget(member_id: u64) -> Request {
    Request::LearnerPromotion(LearnerPromotionChange::Forget { member_id })
}

#[test]
fn intents_are_recorded_at_no_revision_survive_a_reopen_and_are_forgotten() {
    let mut test = TestStore::new();
    test.put("k", "v");
    let revision = test.revision();
    let four = intent(4, "http://127.0.0.1:7104");
    let five = intent(5, "http://127.0.0.1:7105");
    ok(test.apply(intend(&five)));
    assert_eq!(
        ok(test.apply(intend(&four))),
        Response::LearnerPromotions(vec![four.clone(), five.clone()])
    );
    assert_eq!(test.revision(), revision, "an intent takes no revision");
    test.reopen(Default::default());
    assert_eq!(
        test.store.learner_promotions().unwrap(),
        [four.clone(), five]
    );
    assert_eq!(
        ok(test.apply(forget(5))),
        Response::LearnerPromotions(vec![four.clone()])
    );
    // Forgetting one that is not held changes nothing and is no error.
    ok(test.apply(forget(5)));
    assert_eq!(test.store.learner_promotions().unwrap(), [four]);
}

#[test]
fn malformed_intents_and_one_past_the_limit_are_refused_with_nothing_changed() {
    let mut test = TestStore::new();
    for id in 1..=64 {
        ok(test.apply(intend(&intent(id, "http://x"))));
    }
    let held = test.store.learner_promotions().unwrap();
    let malformed = [
        intent(65, "http://x"),
        intent(0, "http://x"),
        intent(3, ""),
        LearnerPromotion {
            max_lag_entries: 0,
            ..intent(3, "http://x")
        },
    ];
    for refused in malformed {
        let outcome = test.apply(intend(&refused));
        assert!(
            matches!(outcome.result, Err(Rejection::Invalid(_))),
            "{refused:?}"
        );
        assert_eq!(test.store.learner_promotions().unwrap(), held);
    }
}

#[test]
fn a_raft_snapshot_carries_the_intents_and_a_restore_drops_them() {
    let mut leader = TestStore::new();
    leader.put("k", "v");
    ok(leader.apply(intend(&intent(4, "http://127.0.0.1:7104"))));

    // A follower that installs the snapshot goes on with the same intents, should it lead.
    let (stream, follower) = snapshot_and_a_store_that_installed_it(&leader);
    assert_eq!(
        follower.store.learner_promotions().unwrap(),
        leader.store.learner_promotions().unwrap()
    );

    // A snapshot without intents clears those the installing store had, and a restore starts a
    // new cluster: the old members' learners do not come along.
    assert_cleared_by_quiet_snapshot_and_dropped_by_restore(&follower, &stream, |store| {
        store.learner_promotions().unwrap()
    });
}
