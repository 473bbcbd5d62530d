//! The membership fault: the cluster grows to five, shrinks back to three, and has members
//! replaced, the leader among those removed as often as any other, as an operator's
//! `member add` and `member remove` do while clients keep working. A change that failed or timed
//! out may still have taken effect, so after each the run asks the leader which members the
//! cluster has and follows it: a member the cluster no longer has is retired, and one it never
//! added is stopped for good too. Half the adds, by the seed, make a learner that promotes itself
//! once caught up (`member add --learner --auto-promote`); once the run is healed, each such
//! member the cluster still has must have become a voter ([`wait_for_promotions`]).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::RngExt;
use revkv_node::{AddedMemberRole, KvBackend, LearnerJoin, MemberInfo};

use crate::cluster::Cluster;
use crate::trace::Trace;

/// The most members the cluster grows to, and the fewest it shrinks to.
const MOST_MEMBERS: usize = 5;
const FEWEST_MEMBERS: usize = 3;

/// The most one change may take before the fault stops waiting for its answer.
const CHANGE_DEADLINE: Duration = Duration::from_secs(30);

/// How long the fault tries to learn the membership from the leader after a change.
const MEMBERSHIP_READ_DEADLINE: Duration = Duration::from_secs(30);

/// How long, in simulated time, the healed cluster may take to promote the learners added to
/// promote themselves: many times the leader's check interval and a learner's catch-up.
const PROMOTION_DEADLINE: Duration = Duration::from_secs(30);

/// Makes one membership change the seed picks, with every member running.
pub async fn change_membership(random: &mut StdRng, cluster: &Cluster, trace: &Trace) {
    let count = cluster.ids().len();
    if cluster.running_ids().len() < count {
        return;
    }
    match random.random_range(0..3) {
        0 if count < MOST_MEMBERS => add(random, cluster, trace).await,
        1 if count > FEWEST_MEMBERS => remove(random, cluster, trace).await,
        // A replacement: a new member first while there is room, so a quorum never rests on
        // fewer members than before, as etcd's runbook advises for a healthy member.
        _ if count < MOST_MEMBERS => {
            add(random, cluster, trace).await;
            remove(random, cluster, trace).await;
        }
        _ => {
            remove(random, cluster, trace).await;
            add(random, cluster, trace).await;
        }
    }
}

/// A running member other than `not`, and its operations.
fn asked(cluster: &Cluster, not: u64) -> Option<(u64, std::sync::Arc<revkv_node::MemberBackend>)> {
    let id = cluster.running_ids().into_iter().find(|id| *id != not)?;
    Some((id, cluster.backend(id)?))
}

async fn add(random: &mut StdRng, cluster: &Cluster, trace: &Trace) {
    // A replacement's second step checks again: its first may have failed.
    if cluster.ids().len() >= MOST_MEMBERS {
        return;
    }
    let id = match cluster.join().await {
        Ok(id) => id,
        Err(error) => {
            trace.record(None, None, format!("a new member did not start: {error}"));
            return;
        }
    };
    let Some((through, backend)) = asked(cluster, id) else {
        return;
    };
    let (role, how) = if random.random_bool(0.5) {
        cluster.expect_promotion(id);
        let join = LearnerJoin::PromoteWhenCaughtUp {
            max_lag_entries: None,
        };
        (AddedMemberRole::Learner(join), " to promote itself")
    } else {
        (AddedMemberRole::Voter, "")
    };
    trace.record(Some(through), None, format!("fault: add m{id}{how}"));
    let added = tokio::time::timeout(
        CHANGE_DEADLINE,
        cluster.on_member(through, backend.add_member_at(Cluster::peer_url(id), role)),
    )
    .await;
    drop(backend);
    let outcome = match added {
        Ok(Ok((_, members))) => format!("done: {:?}", ids(&members)),
        Ok(Err(error)) => format!("refused: {error}"),
        Err(_) => format!("no answer in {CHANGE_DEADLINE:?}"),
    };
    trace.record(Some(through), None, format!("add m{id} {outcome}"));
    follow_the_cluster(cluster, trace).await;
}

async fn remove(random: &mut StdRng, cluster: &Cluster, trace: &Trace) {
    let ids = cluster.ids();
    // A replacement's second step checks again: an add that failed leaves no room to remove.
    if ids.len() <= FEWEST_MEMBERS {
        return;
    }
    let leader = cluster.leader().await;
    let target = match leader {
        Some(leader) if random.random_bool(0.5) => leader,
        _ => ids[random.random_range(0..ids.len())],
    };
    let Some((through, backend)) = asked(cluster, target) else {
        return;
    };
    let role = if leader == Some(target) {
        "the leader "
    } else {
        ""
    };
    trace.record(
        Some(through),
        None,
        format!("fault: remove {role}m{target}"),
    );
    let removed = tokio::time::timeout(
        CHANGE_DEADLINE,
        cluster.on_member(through, backend.remove_member(target)),
    )
    .await;
    drop(backend);
    let outcome = match removed {
        Ok(Ok(members)) => format!("done: {:?}", self::ids(&members)),
        Ok(Err(error)) => format!("refused: {error}"),
        Err(_) => format!("no answer in {CHANGE_DEADLINE:?}"),
    };
    trace.record(Some(through), None, format!("remove m{target} {outcome}"));
    follow_the_cluster(cluster, trace).await;
}

fn ids(members: &[MemberInfo]) -> Vec<u64> {
    members.iter().map(|member| member.id).collect()
}

/// The members the leader's latest configuration names, committed or not (a change still in
/// its log may yet take effect, so its member must keep running), once a leader that the run
/// counts answers.
async fn leader_membership(cluster: &Cluster) -> Option<Vec<MemberInfo>> {
    let deadline = tokio::time::Instant::now() + MEMBERSHIP_READ_DEADLINE;
    while tokio::time::Instant::now() < deadline {
        let leader = cluster.leader().await;
        if let Some(backend) = leader.and_then(|id| cluster.backend(id)) {
            return Some(backend.members_including_pending_change());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Retires every member the cluster does not have (removed, or never added), as an operator
/// stops what `member list` no longer shows. After each membership fault, and again once the
/// run is healed: a change the leader had not committed when it was read may have been dropped
/// since by a new leader (an add that timed out), leaving its member out of the cluster.
pub async fn follow_the_cluster(cluster: &Cluster, trace: &Trace) {
    let Some(members) = leader_membership(cluster).await else {
        trace.record(
            None,
            None,
            "the membership is unknown: no leader answered".into(),
        );
        return;
    };
    trace.record(None, None, format!("members now {:?}", ids(&members)));
    for id in cluster.ids() {
        if !members.iter().any(|member| member.id == id) {
            cluster.retire(id).await;
        }
    }
}

/// Waits until every member added to promote itself that the healed cluster still has is a voter
/// in the leader's committed membership; answers why not at the deadline. A learner that never
/// becomes one holds a replica the cluster's quorum does not count, which the operator asked not
/// to happen.
pub async fn wait_for_promotions(cluster: &Cluster, trace: &Trace) -> Result<(), String> {
    let expected = cluster.expected_promotions();
    let deadline = tokio::time::Instant::now() + PROMOTION_DEADLINE;
    let mut waiting = Vec::new();
    while tokio::time::Instant::now() < deadline {
        let leader = cluster.leader().await;
        if let Some(backend) = leader.and_then(|id| cluster.backend(id)) {
            // An error is no answer: waiting on, not an empty membership that passes.
            let Ok(members) = backend.members().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            waiting = members
                .iter()
                .filter(|member| member.is_learner && expected.contains(&member.id))
                .map(|member| member.id)
                .collect();
            if waiting.is_empty() {
                trace.record(None, None, format!("members now {:?}", ids(&members)));
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if waiting.is_empty() {
        return Err(format!(
            "no leader answered in {PROMOTION_DEADLINE:?} to say whether {expected:?} are voters"
        ));
    }
    Err(format!(
        "members {waiting:?} were added to promote themselves and are still learners \
         {PROMOTION_DEADLINE:?} after the heal"
    ))
}
