//! The shape of a txn with nested txns, shared by the write path (`apply.rs`) and the read path
//! (`read_txn.rs`): which branch each txn of the tree takes, the ops that will run, and running
//! them in order; and how one compare, of a key or of a range, is evaluated.
//!
//! etcd decides every branch of the tree before any op runs (`compareToPath`): each compare, at
//! every level, reads the state before the outermost txn, and the decisions are listed in
//! pre-order (a txn, then the txns nested in its chosen branch, in order). The ops then run in
//! the same pre-order (`executeTxn`), so a nested txn's ops run where it stands in its parent's
//! branch. Both walks here visit the tree in that one order, so a decision always meets its txn.

use crate::error::ReadError;
use crate::mvcc::tables::{HistoryTable, TableSet};
use crate::types::{
    Compare, CompareOp, CompareTarget, KeyValue, RangeEnd, TxnOp, TxnOpResponse, TxnRequest,
    TxnResponse,
};

/// Which branch every txn of a tree takes, in pre-order: `true` where the compares held.
pub(crate) struct TakenPath {
    succeeded: Vec<bool>,
}

impl TakenPath {
    /// Decides every branch of `txn` with `compares_hold`, which must read the state before the
    /// txn (nothing of the txn is written while the path is decided).
    pub fn decide<E>(
        txn: &TxnRequest,
        compares_hold: &mut impl FnMut(&[Compare]) -> Result<bool, E>,
    ) -> Result<TakenPath, E> {
        let mut path = TakenPath {
            succeeded: Vec::new(),
        };
        path.decide_level(txn, compares_hold)?;
        Ok(path)
    }

    fn decide_level<E>(
        &mut self,
        txn: &TxnRequest,
        compares_hold: &mut impl FnMut(&[Compare]) -> Result<bool, E>,
    ) -> Result<(), E> {
        let succeeded = compares_hold(&txn.compare)?;
        self.succeeded.push(succeeded);
        for op in txn.branch(succeeded) {
            if let TxnOp::Txn(nested) = op {
                self.decide_level(nested, compares_hold)?;
            }
        }
        Ok(())
    }

    /// Every op that will run, nested txns flattened away, in the order they will run.
    pub fn ops_to_run<'t>(&self, txn: &'t TxnRequest) -> Vec<&'t TxnOp> {
        let mut decisions = self.succeeded.iter().copied();
        let mut ops = Vec::new();
        collect_ops(txn, &mut decisions, &mut ops);
        assert!(decisions.next().is_none(), "a decision for no txn");
        ops
    }

    /// Runs the ops of the chosen branches in order with `run` (never called with a nested txn),
    /// and answers in the tree's shape: a nested txn's answer where it stands in its branch.
    pub fn run<E>(
        &self,
        txn: &TxnRequest,
        run: &mut impl FnMut(&TxnOp) -> Result<TxnOpResponse, E>,
    ) -> Result<TxnResponse, E> {
        let mut decisions = self.succeeded.iter().copied();
        let response = run_level(txn, &mut decisions, run)?;
        assert!(decisions.next().is_none(), "a decision for no txn");
        Ok(response)
    }
}

fn collect_ops<'t>(
    txn: &'t TxnRequest,
    decisions: &mut impl Iterator<Item = bool>,
    ops: &mut Vec<&'t TxnOp>,
) {
    let succeeded = decisions.next().expect("a decision for every txn taken");
    for op in txn.branch(succeeded) {
        match op {
            TxnOp::Txn(nested) => collect_ops(nested, decisions, ops),
            op => ops.push(op),
        }
    }
}

fn run_level<E>(
    txn: &TxnRequest,
    decisions: &mut impl Iterator<Item = bool>,
    run: &mut impl FnMut(&TxnOp) -> Result<TxnOpResponse, E>,
) -> Result<TxnResponse, E> {
    let succeeded = decisions.next().expect("a decision for every txn taken");
    let branch = txn.branch(succeeded);
    let mut responses = Vec::with_capacity(branch.len());
    for op in branch {
        responses.push(match op {
            TxnOp::Txn(nested) => TxnOpResponse::Txn(run_level(nested, decisions, run)?),
            op => run(op)?,
        });
    }
    Ok(TxnResponse {
        succeeded,
        responses,
    })
}

impl<H: HistoryTable> TableSet<'_, H> {
    /// Whether every compare holds of the state at `revision`.
    pub fn compares_hold_at(&self, compares: &[Compare], revision: u64) -> Result<bool, ReadError> {
        for compare in compares {
            if !self.compare_holds_at(compare, revision)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether `compare` holds of the state at `revision`: of its key, or of every key live in its
    /// range; a range with no live key compares as a missing key (etcd's `applyCompare`). A range
    /// is walked key by key and stops at the first that fails, so it holds no more than one
    /// key-value at a time.
    fn compare_holds_at(&self, compare: &Compare, revision: u64) -> Result<bool, ReadError> {
        let with_value = matches!(compare.target, CompareTarget::Value(_));
        if compare.range_end == RangeEnd::Single {
            let current = self.kv_at(&compare.key, revision, with_value)?;
            return Ok(compare_holds(current.as_ref(), compare));
        }
        let end = compare.keys().exclusive_end();
        let mut any_live = false;
        let mut every_one_holds = true;
        self.visit_live_at(&compare.key, end.as_deref(), revision, &mut |key, entry| {
            any_live = true;
            let kv = self.kv_for_entry(key, &entry, with_value)?;
            every_one_holds = compare_holds(Some(&kv), compare);
            Ok(every_one_holds)
        })?;
        Ok(match any_live {
            true => every_one_holds,
            false => compare_holds(None, compare),
        })
    }
}

/// Evaluates one compare as etcd does: a missing key has version, revisions and lease 0, and any
/// value compare on a missing key fails.
fn compare_holds(current: Option<&KeyValue>, compare: &Compare) -> bool {
    use std::cmp::Ordering;
    let ordering = match (&compare.target, current) {
        (CompareTarget::Value(_), None) => return false,
        (CompareTarget::Value(expected), Some(kv)) => kv.value.as_slice().cmp(expected.as_slice()),
        (CompareTarget::Version(expected), kv) => kv.map_or(0, |kv| kv.version).cmp(expected),
        (CompareTarget::CreateRevision(expected), kv) => {
            kv.map_or(0, |kv| kv.create_revision).cmp(expected)
        }
        (CompareTarget::ModRevision(expected), kv) => {
            kv.map_or(0, |kv| kv.mod_revision).cmp(expected)
        }
        (CompareTarget::Lease(expected), kv) => kv.map_or(0, |kv| kv.lease).cmp(expected),
    };
    match compare.op {
        CompareOp::Equal => ordering == Ordering::Equal,
        CompareOp::NotEqual => ordering != Ordering::Equal,
        CompareOp::Less => ordering == Ordering::Less,
        CompareOp::Greater => ordering == Ordering::Greater,
    }
}
