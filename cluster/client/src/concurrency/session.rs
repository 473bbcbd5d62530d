//! [`Session`]: a lease kept alive by a [`LeaseKeeper`], as etcd's `concurrency.Session`. The
//! recipes ([`Mutex`](super::Mutex), [`Election`](super::Election)) attach their keys to its
//! lease, so a holder that dies (or loses the cluster past the TTL) lets its keys expire.

use crate::error::ClientError;
use crate::lease_keeper::{KeptLease, LeaseKeeper, LeaseLoss, LeaseState};
use crate::Client;

/// etcd's default session TTL, in seconds.
pub const DEFAULT_SESSION_TTL_SECONDS: i64 = 60;

/// A lease and the keeper that renews it. Clones share the lease. Dropping every clone stops the
/// renewals (the lease expires after its TTL); [`Session::close`] revokes it at once, deleting
/// the keys attached to it.
#[derive(Clone)]
pub struct Session {
    keeper: LeaseKeeper,
    lease: KeptLease,
}

impl Session {
    /// Grants a lease of `ttl_seconds` and keeps it alive with a keeper of its own.
    pub async fn new(client: &Client, ttl_seconds: i64) -> Result<Session, ClientError> {
        Session::with_keeper(&LeaseKeeper::start(client), ttl_seconds).await
    }

    /// Grants a lease and keeps it alive with `keeper`, which may keep many sessions' leases
    /// over one stream.
    pub async fn with_keeper(
        keeper: &LeaseKeeper,
        ttl_seconds: i64,
    ) -> Result<Session, ClientError> {
        let lease = keeper.grant(ttl_seconds).await?;
        Ok(Session {
            keeper: keeper.clone(),
            lease,
        })
    }

    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    /// The client the session was made with.
    pub fn client(&self) -> &Client {
        self.keeper.client()
    }

    /// The lease's state now.
    pub fn state(&self) -> LeaseState {
        self.lease.state()
    }

    /// Whether the lease is lost (etcd's `Done()` channel closed).
    pub fn is_done(&self) -> bool {
        self.lease.is_lost()
    }

    /// Waits until the lease is lost, and says why (etcd's `<-Done()`).
    pub async fn done(&self) -> LeaseLoss {
        self.lease.lost().await
    }

    /// Stops renewing and revokes the lease, deleting its keys. A lease already gone is fine.
    pub async fn close(self) -> Result<(), ClientError> {
        let Session { keeper, lease } = self;
        let id = lease.id();
        drop(lease);
        match keeper.client().lease_revoke(id).await {
            Ok(_) | Err(ClientError::NotFound { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Stops renewing without revoking: the lease expires after its TTL (etcd's `Orphan`).
    /// Answers its id.
    pub fn orphan(self) -> i64 {
        self.lease.id()
    }
}
