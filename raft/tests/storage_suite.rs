//! openraft's storage conformance suite (`openraft::testing::log::Suite::test_all`), run against
//! revkv's redb-backed log storage and state machine on real files.

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use revkv_raft::{LogStorage, StateMachine, TypeConfig};
use revkv_storage::{MvccStore, RaftLogStore, StoreOptions};

/// Builds a fresh log and state machine in a new temporary directory for every suite case; the
/// directory lives as long as the case (the suite's "guard" value).
struct RedbStoreBuilder;

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
        Ok((
            dir,
            LogStorage::new(log, state, Default::default(), Default::default())
                .expect("start the log writer"),
            state_machine,
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redb_storage_passes_openraft_conformance_suite() {
    Suite::test_all(RedbStoreBuilder)
        .await
        .expect("every case of the suite passes");
}
