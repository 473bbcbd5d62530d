//! The tokio runtime a member serves best on: the one the `revkv` binary runs every subcommand
//! on, offered to applications that embed a member so that they can build the same.

/// A multi-threaded runtime builder with every driver enabled and tokio's LIFO slot turned off.
///
/// With the slot, a task woken by the running task runs next on the same worker. An h2
/// connection task is woken by every stream that queues an answer (a gRPC request's handler
/// runs as a task of its own), so it ran after each handler and wrote each answer alone: one
/// `writev` per answer on the member, one per request on `revkv bench`'s client. Without the slot
/// it waits its turn behind the other handlers that are ready, and one write carries all their
/// answers. Measured on the 2-core machine (docs/BENCHMARKS.md, "Answers that share writes"):
/// the leader's writes per serializable read fell from 0.97 to 0.25, and 64 clients' reads over
/// 8 connections went from 66,000-76,000 to 116,000 a second; a single client's write latency
/// was unchanged.
///
/// `disable_lifo_slot` is one of tokio's unstable options: it exists only in a build with
/// `--cfg tokio_unstable` (this workspace's `.cargo/config.toml` sets it for every build). A
/// build without it, an embedding application's for one, gets a builder that keeps the slot.
pub fn runtime_builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder
}
