//! openraft's storage conformance suite (`openraft::testing::log::Suite::test_all`), run against
//! revkv's redb-backed log storage and state machine on real files.

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use revkv_raft::{LogStorage, StateMachine, TypeConfig};
use revkv_storage::{MvccStore, RaftLogStore, StoreOptions};

/// Builds a fresh log and state machine in a new temporary directory for every suite case; the
/// directory lives as long as the case (the suite's "guard" value). With `inline_as_member`, the
/// log is that member's as a follower: appends of entries other leaders made are written on the
/// calling task whenever the writer thread is idle.
struct RedbStoreBuilder {
    inline_as_member: Option<u64>,
}

impl StoreBuilder<TypeConfig, LogStorage, StateMachine, tempfile::TempDir> for RedbStoreBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStorage, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let state = Arc::new(
            MvccStore::open(dir.path().join("state.redb"), StoreOptions::default())
                .expect("open state file"),
        );
        let log = Arc::new(
            RaftLogStore::open(
                dir.path().join("raft-log"),
                revkv_storage::LogOptions::default(),
            )
            .expect("open log file"),
        );
        let snapshot_files =
            revkv_raft::snapshot_file::SnapshotFiles::open(dir.path().join("snapshots"))
                .expect("snapshot directory");
        let state_machine = StateMachine::new(state.clone(), snapshot_files, Default::default())
            .expect("state machine");
        let mut log_storage = LogStorage::new(log, state, Default::default(), Default::default())
            .expect("start the log writer");
        if let Some(member_id) = self.inline_as_member {
            log_storage = log_storage.with_inline_follower_appends(member_id);
        }
        Ok((dir, log_storage, state_machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redb_storage_passes_openraft_conformance_suite() {
    Suite::test_all(RedbStoreBuilder {
        inline_as_member: None,
    })
    .await
    .expect("every case of the suite passes");
}

/// The suite's entries name leaders 0 to 9 or so; member 1000 is none of them, so every append
/// the thread does not hold up is written inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redb_storage_with_inline_follower_appends_passes_openraft_conformance_suite() {
    Suite::test_all(RedbStoreBuilder {
        inline_as_member: Some(1000),
    })
    .await
    .expect("every case of the suite passes");
}

/// The suite again with every storage call and the log writer on the test's one thread, as the
/// deterministic simulator (issue 37) runs its members.
#[tokio::test(flavor = "current_thread")]
async fn the_redb_storage_passes_the_suite_with_its_blocking_work_inline() {
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(true);
    let outcome = Suite::test_all(RedbStoreBuilder {
        inline_as_member: None,
    })
    .await;
    revkv_raft::runtime::run_blocking_work_inline_on_this_thread(false);
    outcome.expect("every case of the suite passes");
}
