//! What happens to leases, told to an observer the embedder supplies (the node feeds its
//! Prometheus counters), so this crate stays free of any metrics library. Each event is reported
//! once in the cluster, by the member that did it: a grant or a client revoke by the member that
//! answers the client, an expiry and a renewal by the leader that made it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Receives lease events. Called on request and expiry tasks: implementations must be cheap.
pub trait LeaseObserver: Send + Sync + 'static {
    /// A grant was applied and its client is being answered with success.
    fn lease_granted(&self);
    /// A client's revoke was applied and its client is being answered with success.
    fn lease_revoked(&self);
    /// This leader's revoke of an expired lease was applied, `lag` after the lease's deadline.
    fn lease_expired(&self, lag: Duration);
    /// This leader renewed a lease (a keep-alive).
    fn lease_kept_alive(&self);
}

/// An optional observer, shared by the member's lease code.
#[derive(Clone, Default)]
pub struct LeaseEvents {
    observer: Option<Arc<dyn LeaseObserver>>,
}

impl LeaseEvents {
    pub fn new(observer: Arc<dyn LeaseObserver>) -> Self {
        LeaseEvents {
            observer: Some(observer),
        }
    }

    pub(crate) fn granted(&self) {
        if let Some(observer) = &self.observer {
            observer.lease_granted();
        }
    }

    pub(crate) fn revoked(&self) {
        if let Some(observer) = &self.observer {
            observer.lease_revoked();
        }
    }

    pub(crate) fn expired(&self, lag: Duration) {
        if let Some(observer) = &self.observer {
            observer.lease_expired(lag);
        }
    }

    pub(crate) fn kept_alive(&self) {
        if let Some(observer) = &self.observer {
            observer.lease_kept_alive();
        }
    }
}

impl fmt::Debug for LeaseEvents {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::timings::write_observed(formatter, self.observer.is_some())
    }
}
