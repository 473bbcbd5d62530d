//! Elections after a lost leader (issue 63 item 3): with Raft's Pre-Vote, three members whose
//! leader can still answer but no longer send (its outgoing calls cut) elect another within twice
//! the time a plain loss (the leader's power cut) takes, at the median and at the worst of a fixed
//! set of seeds; without Pre-Vote the same seeds break that bound, which shows the check can fail.
//! Times are the simulation's, the same on every machine; `revkv-sim --elections` runs 1,000 seeds.

use revkv_sim::elections::{
    measure_leader_loss, within_twice_a_plain_loss, ElectionSettings, LeaderLoss, Leaderless,
    Spread,
};

/// Seeds 1 to 60: without Pre-Vote, seed 26 among them kept the others leaderless for 22 s.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=60;

/// Each loss's spread over `SEEDS`, measured two seeds at a time.
fn spreads(settings: ElectionSettings) -> (Spread, Spread) {
    let runs: Vec<(u64, LeaderLoss)> = SEEDS
        .flat_map(|seed| {
            [
                (seed, LeaderLoss::PowerCut),
                (seed, LeaderLoss::OutgoingCallsCut),
            ]
        })
        .collect();
    let measured: Vec<Leaderless> = std::thread::scope(|scope| {
        let halves: Vec<_> = runs
            .chunks(runs.len().div_ceil(2))
            .map(|half| {
                scope.spawn(move || {
                    half.iter()
                        .map(|(seed, loss)| {
                            measure_leader_loss(*seed, *loss, settings)
                                .unwrap_or_else(|error| panic!("seed {seed} did not run: {error}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        halves
            .into_iter()
            .flat_map(|half| half.join().expect("a measuring thread panicked"))
            .collect()
    });
    let spread = |loss: LeaderLoss| Spread::of(&measured, loss).expect("every seed measured");
    (
        spread(LeaderLoss::PowerCut),
        spread(LeaderLoss::OutgoingCallsCut),
    )
}

#[test]
fn with_pre_vote_a_leader_that_can_only_answer_delays_the_next_election_at_most_twice() {
    let (plain, answering_only) = spreads(ElectionSettings { pre_vote: true });
    if let Err(why) = within_twice_a_plain_loss(&plain, &answering_only) {
        panic!("{why}\nplain loss: {plain:?}\ncut leader: {answering_only:?}");
    }
}

#[test]
fn without_pre_vote_the_same_seeds_break_the_bound() {
    let (plain, answering_only) = spreads(ElectionSettings { pre_vote: false });
    let outcome = within_twice_a_plain_loss(&plain, &answering_only);
    assert!(
        outcome.is_err(),
        "without Pre-Vote the seeds kept within twice a plain loss, so the check shows nothing: \
         plain {plain:?}, cut leader {answering_only:?}"
    );
}
