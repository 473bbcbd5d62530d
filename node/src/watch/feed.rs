//! What wakes the watch hub: the member's applied revision. The replicated member feeds it from the
//! state machine's applied position; a plain store (tests, tools) from its own revision channel.

use std::future::Future;

use revkv_raft::AppliedPosition;
use tokio::sync::watch;

/// A source of the applied revision that can be waited on.
pub trait RevisionFeed: Send + 'static {
    /// The applied revision now.
    fn current(&mut self) -> u64;

    /// Waits until the applied revision changes and answers it, or `None` when the source is gone.
    fn changed(&mut self) -> impl Future<Output = Option<u64>> + Send;
}

impl RevisionFeed for watch::Receiver<u64> {
    fn current(&mut self) -> u64 {
        *self.borrow_and_update()
    }

    async fn changed(&mut self) -> Option<u64> {
        watch::Receiver::changed(self).await.ok()?;
        Some(*self.borrow_and_update())
    }
}

impl RevisionFeed for watch::Receiver<AppliedPosition> {
    fn current(&mut self) -> u64 {
        self.borrow_and_update().revision
    }

    async fn changed(&mut self) -> Option<u64> {
        // Entries that change nothing (membership, no-ops) move the log index but not the
        // revision; waking the hub for them costs one comparison.
        watch::Receiver::changed(self).await.ok()?;
        Some(self.borrow_and_update().revision)
    }
}
