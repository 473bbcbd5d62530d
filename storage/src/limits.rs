//! Explicit, configurable limits on everything a request can make the store do.

use serde::{Deserialize, Serialize};

use crate::error::{Malformed, Rejection};

/// Limits enforced on every request before any byte is written.
///
/// The defaults follow the contract (`docs/API.md`, section 1). Every member of a cluster must
/// run with the same limits, because they decide whether a replicated request is applied or rejected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Longest key, in bytes. Keys must also be at least one byte long.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
    /// Most compares, and most ops in each of `success` and `failure`, in one txn.
    pub max_txn_ops: usize,
    /// Most key-values one range read returns. A range with more answers `more = true` and, at the
    /// top level, a continue token; clients page through the rest.
    pub max_range_keys: u64,
    /// Most leases granted at once; a grant beyond it is rejected. The leader keeps every lease's
    /// deadline in memory, so this also bounds that map.
    pub max_leases: u64,
    /// Longest time-to-live a grant may ask for, in seconds (etcd's `MaxLeaseTTL`).
    pub max_lease_ttl_seconds: i64,
    /// Most keys attached to one lease. A revoke deletes them all in one revision, inside one
    /// transaction, so this bounds the largest revoke.
    pub max_keys_per_lease: u64,
    /// Most keys one delete (a delete range, or all the delete ranges of one txn branch) may
    /// remove. The doomed keys are gathered in memory and deleted in one transaction at one
    /// revision, so this bounds that memory and the length of one apply; a larger delete is
    /// refused whole (`invalid`), and is done in smaller ranges. etcd has no such limit.
    #[serde(default = "default_max_delete_keys")]
    pub max_delete_keys: u64,
    /// Most ops and compares in all the nested txns of one txn together (each level is also
    /// bounded by what `max_txn_ops` leaves it, as in etcd). etcd bounds only each path from the
    /// top, so a tree of small txns could hold many thousands of ops, all applied at one revision.
    #[serde(default = "default_max_nested_txn_ops")]
    pub max_nested_txn_ops: usize,
}

/// The default of `Limits::max_nested_txn_ops`: eight full branches' worth of ops.
fn default_max_nested_txn_ops() -> usize {
    1024
}

/// The default of `Limits::max_delete_keys`: a million keys, about 100 MB of doomed keys in
/// memory at 100-byte keys (more with `prev_kv`), and some seconds of one apply.
fn default_max_delete_keys() -> u64 {
    1_000_000
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 4096,
            max_value_bytes: 1024 * 1024,
            max_txn_ops: 128,
            max_range_keys: 100_000,
            max_leases: 100_000,
            max_lease_ttl_seconds: 9_000_000_000,
            max_keys_per_lease: 10_000,
            max_delete_keys: default_max_delete_keys(),
            max_nested_txn_ops: default_max_nested_txn_ops(),
        }
    }
}

impl Limits {
    /// Rejects an empty key or one longer than the limit.
    pub fn check_key(&self, key: &[u8]) -> Result<(), Rejection> {
        if key.is_empty() {
            return Err(Rejection::Malformed(Malformed::EmptyKey));
        }
        if key.len() > self.max_key_bytes {
            return Err(Rejection::Invalid(format!(
                "key is {} bytes; the limit is {}",
                key.len(),
                self.max_key_bytes
            )));
        }
        Ok(())
    }

    /// Rejects a value longer than the limit.
    pub fn check_value(&self, value: &[u8]) -> Result<(), Rejection> {
        if value.len() > self.max_value_bytes {
            return Err(Rejection::TooLarge(format!(
                "value is {} bytes; the limit is {}",
                value.len(),
                self.max_value_bytes
            )));
        }
        Ok(())
    }

    /// Rejects a lease id that is not positive (0 means "no lease"; etcd's ids are positive).
    pub fn check_lease_id(&self, id: i64) -> Result<(), Rejection> {
        if id <= 0 {
            return Err(Rejection::Invalid(format!(
                "lease id {id} is not valid; lease ids are positive"
            )));
        }
        Ok(())
    }

    /// Rejects a time-to-live below one second or above the limit. (The minimum TTL derived from
    /// the election timeout is applied by the proposer, which knows the timing; this check only
    /// keeps the replicated state sane.)
    pub fn check_lease_ttl(&self, ttl_seconds: i64) -> Result<(), Rejection> {
        if ttl_seconds < 1 || ttl_seconds > self.max_lease_ttl_seconds {
            return Err(Rejection::Invalid(format!(
                "lease TTL {ttl_seconds} s is out of range; it must be between 1 and {} s",
                self.max_lease_ttl_seconds
            )));
        }
        Ok(())
    }
}
