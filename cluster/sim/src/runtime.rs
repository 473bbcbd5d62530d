//! The thread a simulation runs on: one tokio runtime with a paused clock and a seeded scheduler,
//! openraft's randomness and `fastrand`'s drawn from the same seed, blocking work run inline, and
//! tasks that inherit their spawner's member clock (`revkv_raft::clock`).
//!
//! With all of that, what happens next is decided by the seed alone: tasks run one at a time in
//! an order the seeded scheduler picks, time moves only when every task waits (straight to the
//! next timer), and nothing runs on another thread.

use revkv_raft::runtime::{
    run_blocking_work_inline_on_this_thread, seed_this_thread, unseed_this_thread,
};

/// Why a simulation could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimulationRuntimeError {
    /// tokio was built without `--cfg tokio_unstable` (a `RUSTFLAGS` variable replaced
    /// `.cargo/config.toml`'s flags), so its scheduler cannot be seeded and runs would differ.
    #[error(
        "tokio was built without --cfg tokio_unstable, so its scheduler cannot be seeded: \
         unset RUSTFLAGS (.cargo/config.toml sets the flag) or add --cfg tokio_unstable to it"
    )]
    SchedulerNotSeedable,
    #[error("the runtime did not start: {0}")]
    Start(#[from] std::io::Error),
}

/// The calling thread, set up for one seed's run; dropping it puts the thread back as it was.
pub struct SimulationThread {
    pub runtime: tokio::runtime::Runtime,
}

impl SimulationThread {
    /// Sets up the calling thread for `seed`. One simulation per thread at a time.
    pub fn enter(seed: u64) -> Result<Self, SimulationRuntimeError> {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        builder.enable_all().start_paused(true);
        seed_the_scheduler(&mut builder, seed)?;
        let runtime = builder.build()?;
        seed_this_thread(seed);
        // Lease ids are drawn from fastrand's thread-local generator.
        fastrand::seed(seed);
        run_blocking_work_inline_on_this_thread(true);
        Ok(SimulationThread { runtime })
    }
}

impl Drop for SimulationThread {
    fn drop(&mut self) {
        run_blocking_work_inline_on_this_thread(false);
        unseed_this_thread();
    }
}

#[cfg(tokio_unstable)]
fn seed_the_scheduler(
    builder: &mut tokio::runtime::Builder,
    seed: u64,
) -> Result<(), SimulationRuntimeError> {
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    // A task belongs to the member whose code spawned it and reads that member's clock.
    builder
        .on_task_spawn(|task| revkv_raft::clock::task_spawned(task.id()))
        .on_task_terminate(|task| revkv_raft::clock::task_finished(task.id()));
    Ok(())
}

#[cfg(not(tokio_unstable))]
fn seed_the_scheduler(
    _builder: &mut tokio::runtime::Builder,
    _seed: u64,
) -> Result<(), SimulationRuntimeError> {
    Err(SimulationRuntimeError::SchedulerNotSeedable)
}
