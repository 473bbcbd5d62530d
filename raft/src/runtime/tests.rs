//! The runtime wrapper passes openraft's own runtime conformance suite, a seeded thread gets the
//! same election timeouts from the same seed, and blocking work runs where its thread says.

use openraft::Config;

use super::*;

/// The next `count` election timeouts openraft would draw on this thread.
fn election_timeouts(count: usize) -> Vec<u64> {
    let config = Config::default();
    (0..count)
        .map(|_| config.new_rand_election_timeout::<RevkvRuntime>())
        .collect()
}

#[test]
fn the_wrapper_passes_openrafts_runtime_suite() {
    openraft_rt::testing::Suite::<RevkvRuntime>::test_all();
}

#[test]
fn the_same_seed_draws_the_same_election_timeouts_and_another_seed_others() {
    seed_this_thread(7);
    let first = election_timeouts(16);
    seed_this_thread(7);
    let again = election_timeouts(16);
    seed_this_thread(8);
    let other_seed = election_timeouts(16);
    unseed_this_thread();
    assert_eq!(first, again);
    assert_ne!(first, other_seed);
    let config = Config::default();
    let range = config.election_timeout_min..config.election_timeout_max;
    assert!(first.iter().all(|timeout| range.contains(timeout)));
}

#[test]
fn a_seed_belongs_to_its_thread_and_ends_when_unseeded() {
    seed_this_thread(7);
    let seeded = election_timeouts(16);
    let other_thread_is_seeded = std::thread::spawn(this_thread_is_seeded)
        .join()
        .expect("the other thread");
    assert!(!other_thread_is_seeded);
    assert!(this_thread_is_seeded());
    unseed_this_thread();
    assert!(!this_thread_is_seeded());
    seed_this_thread(7);
    assert_eq!(election_timeouts(16), seeded);
    unseed_this_thread();
}

#[tokio::test(flavor = "current_thread")]
async fn offloaded_work_runs_on_the_pool_unless_this_thread_runs_it_inline() {
    let caller = std::thread::current().id();
    let on_the_pool = offload(|| std::thread::current().id())
        .await
        .expect("the pool runs the work");
    run_blocking_work_inline_on_this_thread(true);
    let inline = offload(|| std::thread::current().id()).await;
    let marked = blocking_work_runs_inline();
    run_blocking_work_inline_on_this_thread(false);
    assert_ne!(on_the_pool, caller);
    assert!(marked);
    assert_eq!(inline.expect("the work ran inline"), caller);
    assert!(!blocking_work_runs_inline());
}
