//! Lease metrics (issue 13): the leases granted now, grants, client revokes, expiries and
//! keep-alives, and how late an expiry is applied after the lease's deadline.
//!
//! Each event is counted once in the cluster, on the member that did it, so a sum over members is
//! the cluster's total: grants and client revokes on the member that answered the client, expiries
//! and keep-alives on the leader that made them. `revkv_leases_active` is a gauge of this member's
//! own store (every member holds every lease), read just before a scrape.

use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge, Registry};

use crate::raft::saturating_i64;
use crate::registration::{counter, gauge, histogram};

/// The lease metrics of one member.
#[derive(Clone, Debug)]
pub struct LeaseMetrics {
    active: IntGauge,
    granted_total: IntCounter,
    revoked_total: IntCounter,
    expired_total: IntCounter,
    keepalives_total: IntCounter,
    expiry_lag_seconds: Histogram,
}

/// Buckets for the expiry lag, from 10 ms doubling to about 82 s: a healthy leader lands within
/// one expiry check and a raft round (the low buckets), a leader change or an overloaded leader
/// in the high ones.
fn expiry_lag_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.01, 2.0, 14).expect("constant bucket layout is valid")
}

impl LeaseMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(LeaseMetrics {
            active: gauge(
                registry,
                "revkv_leases_active",
                "Leases granted now in this member's store.",
            )?,
            granted_total: counter(
                registry,
                "revkv_lease_granted_total",
                "Lease grants this member answered a client with success.",
            )?,
            revoked_total: counter(
                registry,
                "revkv_lease_revoked_total",
                "Client revokes of a lease this member answered with success (expiries are not \
                 counted here).",
            )?,
            expired_total: counter(
                registry,
                "revkv_lease_expired_total",
                "Leases this member, as leader, revoked because their deadline passed (the \
                 revoke proposed and applied).",
            )?,
            keepalives_total: counter(
                registry,
                "revkv_lease_keepalives_total",
                "Lease renewals this member, as leader, made (each keep-alive renewed here, \
                 whichever member the client called).",
            )?,
            expiry_lag_seconds: histogram(
                registry,
                "revkv_lease_expiry_lag_seconds",
                "Time from a lease's deadline on the leader until the leader applied its expiry \
                 revoke.",
                expiry_lag_buckets(),
            )?,
        })
    }

    /// Sets the number of leases granted now.
    pub fn observe_active(&self, leases: u64) {
        self.active.set(saturating_i64(leases));
    }

    /// Counts a grant answered with success.
    pub fn record_granted(&self) {
        self.granted_total.inc();
    }

    /// Counts a client revoke answered with success.
    pub fn record_revoked(&self) {
        self.revoked_total.inc();
    }

    /// Counts an expiry applied `lag` after the lease's deadline.
    pub fn record_expired(&self, lag: Duration) {
        self.expired_total.inc();
        self.expiry_lag_seconds.observe(lag.as_secs_f64());
    }

    /// Counts one renewal.
    pub fn record_keepalive(&self) {
        self.keepalives_total.inc();
    }
}
