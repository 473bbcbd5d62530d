//! Trace events that mark each stage a replicated write passes on a member, with the log index
//! it concerns: submitted and written on the leader, appended and durable in each log, sent to and
//! answered by each follower, applied. `scripts/write-path-latency.sh` turns them into a latency
//! breakdown of single-client writes (docs/BENCHMARKS.md). They are `trace` events under the
//! target `revkv::write_path`, off unless a log filter names them; then each costs one log line.

/// Where a write is.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stage {
    /// The leader hands a client write to raft (no index yet).
    Submitted,
    /// Entries go into this member's log tail and the writer's queue.
    Appended,
    /// The log writer's fsync covering the index ended.
    Durable,
    /// The leader sends entries through the index to a follower.
    Sent,
    /// The follower's answer to that send arrived.
    Replied,
    /// A follower received entries through the index.
    Received,
    /// The follower answered them (after its fsync).
    Answered,
    /// A chunk through the index starts applying.
    Applying,
    /// That chunk is applied and committed to the state file.
    Applied,
    /// The leader's raft answered the client write.
    Written,
}

/// Emits the stage event (when the `revkv::write_path` target is enabled at `trace`).
pub(crate) fn mark(stage: Stage, index: u64) {
    tracing::trace!(target: "revkv::write_path", stage = ?stage, index);
}
