//! Transactions that only read, answered from a read snapshot instead of through the raft log,
//! as etcd answers them (`isTxnReadonly` in its `v3_server.go`): a txn whose branches hold gets
//! and nothing else changes nothing, so it needs no log entry, no
//! fsync and no apply on every member. The compares and the chosen branches' gets all see one
//! revision, the current one (or the earlier one a get names), which is what the same txn applied
//! through the log would have seen (a txn that writes nothing reads the revision before its own,
//! `apply.rs`), and no revision is taken.
//!
//! Which consistency the read needs (a read-index barrier, or none for gets that are all
//! serializable) is the caller's to arrange before it calls [`MvccStore::read_txn`].

use crate::error::ReadError;
use crate::mvcc::read::ResolvedRange;
use crate::mvcc::tables::{ReadTables, StoreState};
use crate::mvcc::txn_tree::TakenPath;
use crate::mvcc::{check_readable_revision, MvccStore};
use crate::types::{Compare, RangeRequest, ReadTxnResult, TxnOp, TxnOpResponse, TxnRequest};

use std::sync::Arc;

impl MvccStore {
    /// Evaluates `txn`, which must only read ([`TxnRequest::reads_only`]; a txn that writes is
    /// refused as invalid), at the current revision of one read snapshot. The caller validated
    /// it (`validate_request`), as it would before proposing it.
    pub fn read_txn(&self, txn: &TxnRequest) -> Result<ReadTxnResult, ReadError> {
        if !txn.reads_only() {
            return Err(ReadError::Invalid(
                "a txn that writes goes through the raft log, not the read path".into(),
            ));
        }
        let (tables, state) = self.read_tables()?;
        let snapshot_compact_revision = state.compact_revision;
        match self.read_txn_once(txn, (tables, state)) {
            // A compaction above this snapshot's revision was applied while it read
            // (`key_index.rs`): the current revision of a newer snapshot is readable. A get below
            // the snapshot's own compact revision was refused before reading: no retry.
            Err(ReadError::Compacted { requested, .. })
                if requested >= snapshot_compact_revision =>
            {
                self.read_txn_once(txn, self.read_tables_fresh()?)
            }
            answer => answer,
        }
    }

    fn read_txn_once(
        &self,
        txn: &TxnRequest,
        (tables, state): (ReadTables<'_>, Arc<StoreState>),
    ) -> Result<ReadTxnResult, ReadError> {
        let revision = state.current_revision;
        let path = TakenPath::decide(txn, &mut |compares: &[Compare]| {
            tables.compares_hold_at(compares, revision)
        })?;
        // As in `apply.rs`, every get's revision is checked before any get runs, so a txn is
        // refused whole, never answered in part.
        for op in path.ops_to_run(txn) {
            if let TxnOp::Get(RangeRequest {
                revision: Some(read_at),
                ..
            }) = op
            {
                check_readable_revision(*read_at, &state)?;
            }
        }
        let cap = self.options.limits.max_range_keys;
        let response = path.run(txn, &mut |op| {
            let TxnOp::Get(get) = op else {
                return Err(ReadError::Invalid("a read-only txn holds only gets".into()));
            };
            let keys = get
                .range
                .as_ref()
                .ok_or_else(|| ReadError::Invalid("a range read needs a key or prefix".into()))?;
            let resolved = ResolvedRange {
                start: keys.start.clone(),
                end: keys.exclusive_end(),
                revision: get.revision.unwrap_or(revision),
                limit: get.limit.unwrap_or(cap).min(cap),
                keys_only: get.keys_only,
                count_only: get.count_only,
                known_count: None,
            };
            Ok(TxnOpResponse::Get(tables.read_range(&resolved)?))
        })?;
        Ok(ReadTxnResult { revision, response })
    }
}
