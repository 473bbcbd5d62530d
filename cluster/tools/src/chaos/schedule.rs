//! The fault schedule: which faults the nemesis injects, when, and for how long, drawn from the
//! run's seed. The same seed gives the same schedule (the same faults at the same offsets with the
//! same durations); which member "the leader" is gets decided when the fault starts, since that
//! depends on the run.

use std::time::Duration;

/// Which member a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Leader,
    /// A member that is not the leader, chosen by this number among the others.
    Follower(u64),
}

/// One fault the nemesis can inject.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// SIGKILL, then a restart on the same data after `down`.
    Kill { target: Target, down: Duration },
    /// SIGSTOP for `paused`, then SIGCONT. Longer than an election timeout, so a paused leader
    /// loses its leadership.
    Pause { target: Target, paused: Duration },
    /// Every link to and from the target cut for `cut`; with `one_way`, only the target's own
    /// connections to the others (it still answers theirs, over the connections they open).
    Partition {
        target: Target,
        cut: Duration,
        one_way: bool,
    },
    /// Every link to and from the target delayed by `delay` per chunk for `slow`.
    SlowLinks {
        target: Target,
        delay: Duration,
        slow: Duration,
    },
    /// Every link to and from the target loses connections with probability `loss` per chunk.
    LossyLinks {
        target: Target,
        loss: f64,
        lossy: Duration,
    },
    /// Leadership moves to another member.
    TransferLeader,
    /// History is compacted below what every watcher has seen, while they stay open.
    Compact,
    /// The target is removed from the cluster and a new, empty member joins in its place (added
    /// as a learner, caught up, promoted), as an operator replaces a failed machine. Removing the
    /// leader is the hardest case: it must hand over while its own removal commits.
    Replace { target: Target },
    /// New, empty members join one at a time until the cluster has five (skipped at five), so
    /// the faults that follow hit a five-member cluster, whose majority is three.
    GrowToFive,
    /// Members are removed one at a time until the cluster has three again (skipped at three);
    /// `target` names the first one removed, so the leader is removed too.
    ShrinkToThree { target: Target },
    /// The members are split into two or three groups for `cut`: links between groups are cut
    /// both ways, links within a group carry on. `assignment` seeds which member goes where, so a
    /// five-member cluster may split two against three or into groups none of which is a
    /// majority.
    PartitionGroups {
        groups: u64,
        assignment: u64,
        cut: Duration,
    },
}

impl Fault {
    /// The fault's name in the report.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Kill {
                target: Target::Leader,
                ..
            } => "kill-leader",
            Fault::Kill { .. } => "kill-follower",
            Fault::Pause {
                target: Target::Leader,
                ..
            } => "pause-leader",
            Fault::Pause { .. } => "pause-follower",
            Fault::Partition {
                target: Target::Leader,
                one_way: false,
                ..
            } => "partition-leader",
            Fault::Partition {
                target: Target::Leader,
                ..
            } => "partition-leader-one-way",
            Fault::Partition { one_way: false, .. } => "partition-follower",
            Fault::Partition { .. } => "partition-follower-one-way",
            Fault::SlowLinks { .. } => "slow-links",
            Fault::LossyLinks { .. } => "lossy-links",
            Fault::TransferLeader => "transfer-leader",
            Fault::Compact => "compact",
            Fault::Replace {
                target: Target::Leader,
            } => "replace-leader",
            Fault::Replace { .. } => "replace-follower",
            Fault::GrowToFive => "grow-to-five",
            Fault::ShrinkToThree { .. } => "shrink-to-three",
            Fault::PartitionGroups { .. } => "partition-groups",
        }
    }
}

/// One scheduled fault: it starts `after` the previous one ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub after: Duration,
    pub fault: Fault,
}

/// The schedule for `seed`: enough steps to fill `duration` (the nemesis stops at the deadline).
pub fn schedule(seed: u64, duration: Duration) -> Vec<Step> {
    let mut random = fastrand::Rng::with_seed(seed);
    let mut steps = Vec::new();
    let mut planned = Duration::ZERO;
    while planned < duration {
        let after = Duration::from_millis(random.u64(500..2_000));
        let fault = draw_fault(&mut random);
        planned += after + fault_length(&fault);
        steps.push(Step { after, fault });
    }
    steps
}

fn draw_fault(random: &mut fastrand::Rng) -> Fault {
    let target = if random.bool() {
        Target::Leader
    } else {
        Target::Follower(random.u64(..4))
    };
    let between = |random: &mut fastrand::Rng, low: u64, high: u64| {
        Duration::from_millis(random.u64(low..high))
    };
    match random.u32(..14) {
        0 | 1 => Fault::Kill {
            target,
            down: between(random, 200, 3_000),
        },
        2 => Fault::Pause {
            target,
            paused: between(random, 500, 3_000),
        },
        3 | 4 => Fault::Partition {
            target,
            cut: between(random, 500, 4_000),
            one_way: random.u32(..3) == 0,
        },
        5 => Fault::SlowLinks {
            target,
            delay: between(random, 5, 120),
            slow: between(random, 1_000, 4_000),
        },
        6 => Fault::LossyLinks {
            target,
            loss: 0.02 + random.f64() * 0.2,
            lossy: between(random, 1_000, 4_000),
        },
        7 => Fault::TransferLeader,
        8 => Fault::Replace { target },
        9 => Fault::Compact,
        10 => Fault::GrowToFive,
        11 => Fault::ShrinkToThree { target },
        _ => Fault::PartitionGroups {
            groups: random.u64(2..=3),
            assignment: random.u64(..),
            cut: between(random, 500, 4_000),
        },
    }
}

/// How long a fault lasts before the next one may start.
pub fn fault_length(fault: &Fault) -> Duration {
    match *fault {
        Fault::Kill { down, .. } => down,
        Fault::Pause { paused, .. } => paused,
        Fault::Partition { cut, .. } => cut,
        Fault::SlowLinks { slow, .. } => slow,
        Fault::LossyLinks { lossy, .. } => lossy,
        Fault::PartitionGroups { cut, .. } => cut,
        Fault::TransferLeader
        | Fault::Compact
        | Fault::Replace { .. }
        | Fault::GrowToFive
        | Fault::ShrinkToThree { .. } => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let duration = Duration::from_secs(600);
        let first = schedule(42, duration);
        assert_eq!(first, schedule(42, duration));
        assert_ne!(first, schedule(43, duration));
        let kinds: std::collections::BTreeSet<&str> =
            first.iter().map(|step| step.fault.name()).collect();
        assert!(
            kinds.len() >= 15,
            "a ten-minute schedule uses most faults: {kinds:?}"
        );
        for membership_fault in [
            "replace-leader",
            "grow-to-five",
            "shrink-to-three",
            "partition-groups",
        ] {
            assert!(
                kinds.contains(membership_fault),
                "{membership_fault}: {kinds:?}"
            );
        }
    }

    #[test]
    fn a_schedule_fills_its_duration() {
        let duration = Duration::from_secs(60);
        let steps = schedule(7, duration);
        let planned: Duration = steps
            .iter()
            .map(|step| step.after + fault_length(&step.fault))
            .sum();
        assert!(planned >= duration);
    }
}
