//! Transactions that only read, answered from a read snapshot instead of through the raft log,
//! as etcd answers them (`isTxnReadonly` in its `v3_server.go`): a txn whose branches hold gets
//! and nothing else changes nothing, so it needs no log entry, no fsync and no apply on every
//! member. The compares and the chosen branch's gets all see one revision, the current one, which
//! is what the same txn applied through the log would have seen (a txn that writes nothing reads
//! the revision before its own, `apply.rs`), and no revision is taken.
//!
//! Which consistency the read needs (a read-index barrier, or none for gets that are all
//! serializable) is the caller's to arrange before it calls [`MvccStore::read_txn`].

use crate::error::ReadError;
use crate::mvcc::apply::compare_holds;
use crate::mvcc::read::ResolvedRange;
use crate::mvcc::tables::{ReadTables, StoreState};
use crate::mvcc::MvccStore;
use crate::types::{CompareTarget, ReadTxnResult, TxnOp, TxnOpResponse, TxnRequest, TxnResponse};

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
        match self.read_txn_once(txn, self.read_tables()?) {
            // A compaction above this snapshot's revision was applied while it read
            // (`key_index.rs`): the current revision of a newer snapshot is readable.
            Err(ReadError::Compacted { .. }) => self.read_txn_once(txn, self.read_tables_fresh()?),
            answer => answer,
        }
    }

    fn read_txn_once(
        &self,
        txn: &TxnRequest,
        (tables, state): (ReadTables<'_>, Arc<StoreState>),
    ) -> Result<ReadTxnResult, ReadError> {
        let revision = state.current_revision;
        let mut succeeded = true;
        for compare in &txn.compare {
            let with_value = matches!(compare.target, CompareTarget::Value(_));
            let current = tables.kv_at(&compare.key, revision, with_value)?;
            if !compare_holds(current.as_ref(), compare) {
                succeeded = false;
                break;
            }
        }
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let cap = self.options.limits.max_range_keys;
        let mut responses = Vec::with_capacity(branch.len());
        for op in branch {
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
                revision,
                limit: get.limit.unwrap_or(cap).min(cap),
                keys_only: get.keys_only,
                count_only: get.count_only,
                known_count: None,
            };
            responses.push(TxnOpResponse::Get(tables.read_range(&resolved)?));
        }
        Ok(ReadTxnResult {
            revision,
            response: TxnResponse {
                succeeded,
                responses,
            },
        })
    }
}
