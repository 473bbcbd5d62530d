//! What the members' hashes at one revision say, as a pure function of their answers: all equal,
//! some member disagreeing (and which), or nothing to conclude yet. No I/O, so every rule is a unit
//! test below.
//!
//! The rules, etcd's with a majority on top:
//! - Hashes compare only under one compact revision (the hash covers it, and a member that has
//!   applied a compaction the others have not yet would differ for no fault). A member whose
//!   history at the revision was compacted away, or compact revisions that differ, mean a
//!   compaction moved meanwhile: the check is retried at a newer revision, never a mismatch.
//! - A member that does not answer, or has not applied the revision yet, is left out: silence is
//!   not corruption.
//! - With fewer than two hashes there is nothing to compare.
//! - When a strict majority of the membership holds one hash, every member that answered another
//!   is a suspect (etcd raises the alarm for the member that disagrees). When no hash has a
//!   majority the copies diverge but nobody can tell which is right, so every member that answered
//!   is a suspect: the alarm stops writes either way, and the operator checks them all.

use std::collections::BTreeMap;

/// One member's answer, in the checker's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberAnswer {
    Hashed {
        hash: u64,
        compact_revision: u64,
    },
    /// Its history at the revision was compacted away.
    Compacted {
        compact_revision: u64,
    },
    /// It had not applied the revision within its wait.
    Behind {
        applied_revision: u64,
    },
    /// No answer (unreachable, timed out, failed); the text says why.
    Silent(String),
}

/// What one round of answers says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every member that answered holds the same hash (at least two did).
    Consistent { compared: usize },
    /// Some members' hashes differ; `suspects` are the members to raise the alarm for.
    Mismatch { suspects: Vec<u64> },
    /// A compaction moved under the check: ask again at a newer revision.
    Retry { reason: String },
    /// Too few hashes to compare.
    Inconclusive { reason: String },
}

/// Judges one round: `answers` by member id, from a membership of `member_count` members.
pub fn judge(answers: &BTreeMap<u64, MemberAnswer>, member_count: usize) -> Verdict {
    let mut hashes = BTreeMap::new();
    let mut compact_revisions = std::collections::BTreeSet::new();
    for (member_id, answer) in answers {
        match answer {
            MemberAnswer::Hashed {
                hash,
                compact_revision,
            } => {
                hashes.insert(*member_id, *hash);
                compact_revisions.insert(*compact_revision);
            }
            MemberAnswer::Compacted { compact_revision } => {
                return Verdict::Retry {
                    reason: format!(
                        "member {member_id} compacted past the revision (to {compact_revision})"
                    ),
                };
            }
            MemberAnswer::Behind { .. } | MemberAnswer::Silent(_) => {}
        }
    }
    if compact_revisions.len() > 1 {
        return Verdict::Retry {
            reason: format!("members answered under compact revisions {compact_revisions:?}"),
        };
    }
    if hashes.len() < 2 {
        return Verdict::Inconclusive {
            reason: format!(
                "{} of {member_count} members answered a hash; two are needed",
                hashes.len()
            ),
        };
    }
    suspects_among(&hashes, member_count)
}

/// The verdict over hashes taken under one compact revision.
fn suspects_among(hashes: &BTreeMap<u64, u64>, member_count: usize) -> Verdict {
    let mut holders: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (member_id, hash) in hashes {
        holders.entry(*hash).or_default().push(*member_id);
    }
    if holders.len() == 1 {
        return Verdict::Consistent {
            compared: hashes.len(),
        };
    }
    let majority = holders
        .values()
        .find(|members| members.len() * 2 > member_count);
    let suspects = match majority {
        Some(majority) => hashes
            .keys()
            .filter(|member_id| !majority.contains(member_id))
            .copied()
            .collect(),
        None => hashes.keys().copied().collect(),
    };
    Verdict::Mismatch { suspects }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashed(hash: u64) -> MemberAnswer {
        MemberAnswer::Hashed {
            hash,
            compact_revision: 0,
        }
    }

    fn answers(list: &[(u64, MemberAnswer)]) -> BTreeMap<u64, MemberAnswer> {
        list.iter().cloned().collect()
    }

    #[test]
    fn equal_hashes_are_consistent() {
        let round = answers(&[(1, hashed(7)), (2, hashed(7)), (3, hashed(7))]);
        assert_eq!(judge(&round, 3), Verdict::Consistent { compared: 3 });
    }

    #[test]
    fn the_member_outside_the_majority_is_the_suspect() {
        let round = answers(&[(1, hashed(7)), (2, hashed(9)), (3, hashed(7))]);
        assert_eq!(judge(&round, 3), Verdict::Mismatch { suspects: vec![2] });
        let five = answers(&[
            (1, hashed(7)),
            (2, hashed(8)),
            (3, hashed(7)),
            (4, hashed(9)),
            (5, hashed(7)),
        ]);
        assert_eq!(
            judge(&five, 5),
            Verdict::Mismatch {
                suspects: vec![2, 4]
            }
        );
    }

    #[test]
    fn without_a_majority_every_member_that_answered_is_a_suspect() {
        // Two of three answered and they disagree: nobody can tell which copy is right.
        let round = answers(&[
            (1, hashed(7)),
            (2, hashed(9)),
            (3, MemberAnswer::Silent("timed out".into())),
        ]);
        assert_eq!(
            judge(&round, 3),
            Verdict::Mismatch {
                suspects: vec![1, 2]
            }
        );
    }

    #[test]
    fn a_member_that_does_not_answer_is_not_a_mismatch() {
        let round = answers(&[
            (1, hashed(7)),
            (2, MemberAnswer::Silent("connection refused".into())),
            (3, hashed(7)),
        ]);
        assert_eq!(judge(&round, 3), Verdict::Consistent { compared: 2 });
        let behind = answers(&[
            (1, hashed(7)),
            (
                2,
                MemberAnswer::Behind {
                    applied_revision: 3,
                },
            ),
            (3, hashed(7)),
        ]);
        assert_eq!(judge(&behind, 3), Verdict::Consistent { compared: 2 });
    }

    #[test]
    fn one_hash_alone_is_inconclusive() {
        let round = answers(&[
            (1, hashed(7)),
            (2, MemberAnswer::Silent("down".into())),
            (3, MemberAnswer::Silent("down".into())),
        ]);
        assert!(matches!(judge(&round, 3), Verdict::Inconclusive { .. }));
    }

    #[test]
    fn a_compaction_under_the_check_is_retried_not_a_mismatch() {
        let compacted = answers(&[
            (1, hashed(7)),
            (
                2,
                MemberAnswer::Compacted {
                    compact_revision: 40,
                },
            ),
            (3, hashed(7)),
        ]);
        assert!(matches!(judge(&compacted, 3), Verdict::Retry { .. }));
        // Member 2 applied a compaction the others have not yet: its hash differs for no fault.
        let moved = answers(&[
            (1, hashed(7)),
            (
                2,
                MemberAnswer::Hashed {
                    hash: 99,
                    compact_revision: 40,
                },
            ),
            (3, hashed(7)),
        ]);
        assert!(matches!(judge(&moved, 3), Verdict::Retry { .. }));
    }
}
