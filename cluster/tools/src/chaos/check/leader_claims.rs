//! The leader-claims checker (issue 63, item 2): a member whose calls cannot reach a majority
//! must stop calling itself leader, and the members it cannot reach must stop naming it, once its
//! lease has lapsed. etcd's leader steps down after an election timeout without a quorum
//! (CheckQuorum); revkv's stops naming itself once no quorum has acknowledged it for its lease,
//! the longest election timeout (`raft/src/status.rs`), and a follower no leader has reached for
//! as long names none. A client that picks the leader from a member's status must never be sent
//! to a member that cannot commit for longer than that.
//!
//! Only answers asked after the cut began plus `bound` and answered before it healed count: the
//! member decided its answer between the two, so an answer that broke the rule could not have
//! been decided before the bound. What is not checked: a member naming a leader on its own side of
//! a partition smaller than a majority (openraft's leader keeps heartbeating its side, so its
//! followers name it while it names none; etcd's stepped-down leader stops heartbeating).

use std::time::Duration;

use super::Violation;
use crate::chaos::leaderships::{Isolation, LeaderNamed};

/// A harness member's lease: its longest election timeout, twice the shortest (`revkv serve`
/// derives it so from `--election-timeout-ms`).
pub const HARNESS_LEADER_LEASE: Duration =
    Duration::from_millis(2 * crate::harness::ELECTION_TIMEOUT_MS);

/// What the checker allows past the start of a cut, on top of the lease: acknowledgements already
/// past the proxies when it began, and a loaded machine's delay in answering a status request.
pub const CLAIM_MARGIN: Duration = Duration::from_secs(1);

/// Every answer that named a leader it could not have had, one violation each (at most
/// `MAX_REPORTED`, then a count of the rest).
pub fn check_leader_claims(
    leaders_named: &[LeaderNamed],
    isolations: &[Isolation],
    bound: Duration,
) -> Vec<Violation> {
    const MAX_REPORTED: usize = 10;
    let mut violations = Vec::new();
    let mut unreported = 0;
    for named in leaders_named {
        let Some(isolation) = isolations
            .iter()
            .find(|isolation| breaks_the_rule(named, isolation, bound))
        else {
            continue;
        };
        if violations.len() == MAX_REPORTED {
            unreported += 1;
            continue;
        }
        violations.push(Violation {
            kind: "leader-claim",
            detail: describe(named, isolation),
            operations: Vec::new(),
        });
    }
    if unreported > 0 {
        violations.push(Violation {
            kind: "leader-claim",
            detail: format!("and {unreported} more answers like these"),
            operations: Vec::new(),
        });
    }
    violations
}

/// True when `named` was decided inside `isolation`, past the bound, and names its isolated
/// member as leader either from that member itself, without a majority on its side, or from a
/// member its calls could not reach.
fn breaks_the_rule(named: &LeaderNamed, isolation: &Isolation, bound: Duration) -> bool {
    let decided_inside = named.asked >= isolation.from + bound && named.answered <= isolation.until;
    if !decided_inside || named.leader != isolation.member {
        return false;
    }
    if named.member == isolation.member {
        isolation.reaches.len() < isolation.majority
    } else {
        !isolation.reaches.contains(&named.member)
    }
}

fn describe(named: &LeaderNamed, isolation: &Isolation) -> String {
    let whom = match named.member == named.leader {
        true => format!("member {} called itself leader", named.member),
        false => format!(
            "member {} named member {} leader",
            named.member, named.leader
        ),
    };
    format!(
        "{whom} (term {}) in an answer asked at {:?} and received at {:?}, though member {}'s \
         calls reached only {:?} (a majority is {}) from {:?} until {:?}",
        named.term,
        named.asked,
        named.answered,
        isolation.member,
        isolation.reaches,
        isolation.majority,
        isolation.from,
        isolation.until,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_millis(1_600);

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn named(member: u64, leader: u64, asked_ms: u64) -> LeaderNamed {
        LeaderNamed {
            member,
            leader,
            term: 3,
            asked: ms(asked_ms),
            answered: ms(asked_ms + 20),
        }
    }

    /// Member 1 alone, its calls reaching nobody, from 10 s to 15 s.
    fn member_1_cut_off() -> Vec<Isolation> {
        vec![Isolation {
            member: 1,
            reaches: vec![1],
            majority: 2,
            from: ms(10_000),
            until: ms(15_000),
        }]
    }

    /// What a correct run looks like: member 1 leads before the cut and names itself until its
    /// lease lapses; the others name it until theirs does, then elect member 2; after the heal
    /// everyone names member 2.
    fn correct_answers() -> Vec<LeaderNamed> {
        vec![
            named(1, 1, 9_900),
            named(2, 1, 9_900),
            named(1, 1, 10_300),
            named(3, 1, 10_400),
            named(2, 2, 11_200),
            named(3, 2, 11_200),
            named(1, 2, 12_000),
            named(1, 1, 15_100),
            named(1, 2, 15_200),
        ]
    }

    #[test]
    fn a_correct_run_passes() {
        let violations = check_leader_claims(&correct_answers(), &member_1_cut_off(), BOUND);
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn a_member_cut_off_that_still_calls_itself_leader_is_reported() {
        let mut answers = correct_answers();
        answers.push(named(1, 1, 13_000));
        let violations = check_leader_claims(&answers, &member_1_cut_off(), BOUND);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0]
            .detail
            .contains("member 1 called itself leader"));
    }

    #[test]
    fn a_member_naming_a_leader_that_cannot_reach_it_is_reported() {
        let mut answers = correct_answers();
        answers.push(named(3, 1, 12_500));
        let violations = check_leader_claims(&answers, &member_1_cut_off(), BOUND);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0]
            .detail
            .contains("member 3 named member 1 leader"));
    }

    #[test]
    fn a_claim_within_the_bound_or_after_the_heal_is_not_reported() {
        let answers = [named(1, 1, 11_500), named(1, 1, 14_990)];
        let violations = check_leader_claims(&answers, &member_1_cut_off(), BOUND);
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn a_leader_with_a_majority_on_its_side_may_go_on_leading() {
        let majority_side = vec![Isolation {
            member: 1,
            reaches: vec![1, 2, 3],
            majority: 3,
            from: ms(10_000),
            until: ms(15_000),
        }];
        let answers = [named(1, 1, 13_000), named(2, 1, 13_000)];
        assert!(check_leader_claims(&answers, &majority_side, BOUND).is_empty());
        // Its followers on the other side of the cut may not name it.
        let violations = check_leader_claims(&[named(4, 1, 13_000)], &majority_side, BOUND);
        assert_eq!(violations.len(), 1, "{violations:?}");
    }

    #[test]
    fn many_claims_are_reported_up_to_the_limit_then_counted() {
        let answers: Vec<LeaderNamed> = (0..25).map(|i| named(1, 1, 12_000 + i * 100)).collect();
        let violations = check_leader_claims(&answers, &member_1_cut_off(), BOUND);
        assert_eq!(violations.len(), 11);
        assert_eq!(violations[10].detail, "and 15 more answers like these");
    }
}
