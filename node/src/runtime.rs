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

/// The most async worker threads a member's runtime may be given: far above the cores of any
/// machine a member runs on, so only a mistyped setting meets it (tokio would start them all).
pub const MAX_WORKER_THREADS: usize = 1024;

/// [`runtime_builder`] with `worker_threads` async worker threads, or tokio's default when `None`
/// (one per core, or the `TOKIO_WORKER_THREADS` environment variable). Several members sharing a
/// small machine may run one each (docs/guide/operations.md says what that costs and saves). A
/// count of 0 or above [`MAX_WORKER_THREADS`] is refused, where tokio would panic or comply.
pub fn runtime_builder_with_workers(
    worker_threads: Option<usize>,
) -> Result<tokio::runtime::Builder, String> {
    let mut builder = runtime_builder();
    if let Some(count) = worker_threads {
        if !(1..=MAX_WORKER_THREADS).contains(&count) {
            return Err(format!(
                "worker threads must be between 1 and {MAX_WORKER_THREADS}, not {count}"
            ));
        }
        builder.worker_threads(count);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_gets_the_worker_threads_it_was_given() {
        for count in [1, 3] {
            let runtime = runtime_builder_with_workers(Some(count))
                .unwrap()
                .build()
                .unwrap();
            assert_eq!(runtime.metrics().num_workers(), count);
        }
    }

    #[test]
    fn worker_thread_counts_out_of_range_are_refused_with_the_range() {
        for count in [0, MAX_WORKER_THREADS + 1] {
            let refusal = runtime_builder_with_workers(Some(count)).unwrap_err();
            assert!(refusal.contains("between 1 and 1024"), "{refusal}");
            assert!(refusal.contains(&count.to_string()), "{refusal}");
        }
    }
}
