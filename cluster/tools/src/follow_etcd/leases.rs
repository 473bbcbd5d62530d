//! etcd's leases mirrored on revkv while the follow runs. A lease etcd grants is granted on revkv
//! with the same id and TTL (before the first put that uses it, and at each check for one no key
//! uses yet). revkv's copy of every lease etcd still has is kept alive, so it never expires on
//! revkv's clock: etcd's expiry or revoke reaches revkv as the delete events of its keys, at
//! etcd's revision. Once etcd no longer has a lease and revkv's copy has no keys left, the copy
//! is revoked (a revoke that deletes nothing makes no revision, on etcd as on revkv).

use std::collections::{BTreeMap, BTreeSet};

use crate::etcd_api::mvccpb::{event::EventType, Event};
use crate::etcd_api::pb::{
    LeaseGrantRequest, LeaseLeasesRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest,
};
use crate::etcd_api::{EtcdClient, LeaseKeepAlive};

use super::FollowError;

/// The most leases mirrored at once; one more stops the follow rather than growing without
/// bound (etcd's own default limit is far above what one follow should meet).
const MAX_MIRRORED_LEASES: usize = 10_000;
/// The TTL given to a lease etcd no longer describes (it ended before it could be asked): its
/// delete events follow, and the next check revokes it.
const FALLBACK_TTL_SECONDS: i64 = 60;

/// The leases revkv holds for etcd, each with an open keep-alive stream.
#[derive(Default)]
pub struct LeaseMirror {
    kept: BTreeMap<i64, LeaseKeepAlive>,
}

impl LeaseMirror {
    /// Grants on revkv every lease a put in `events` uses that revkv does not hold yet.
    pub async fn grant_missing(
        &mut self,
        events: &[Event],
        etcd: &EtcdClient,
        revkv: &EtcdClient,
    ) -> Result<(), FollowError> {
        let used: BTreeSet<i64> = events
            .iter()
            .filter(|event| event.r#type == i32::from(EventType::Put))
            .filter_map(|event| event.kv.as_ref().map(|kv| kv.lease))
            .filter(|lease| *lease != 0)
            .collect();
        for id in used {
            if !self.kept.contains_key(&id) {
                self.mirror(id, etcd, revkv).await?;
            }
        }
        Ok(())
    }

    /// Mirrors every lease etcd has, keeps revkv's copies alive, and revokes the copies of
    /// leases etcd no longer has once their keys are gone.
    pub async fn refresh(
        &mut self,
        etcd: &EtcdClient,
        revkv: &EtcdClient,
    ) -> Result<(), FollowError> {
        let on_etcd = lease_ids(etcd, "listing etcd's leases").await?;
        for id in lease_ids(revkv, "listing revkv's leases").await? {
            if !self.kept.contains_key(&id) {
                self.keep(id, revkv).await?;
            }
        }
        for id in &on_etcd {
            if !self.kept.contains_key(id) {
                self.mirror(*id, etcd, revkv).await?;
            }
        }
        let ids: Vec<i64> = self.kept.keys().copied().collect();
        for id in ids {
            if on_etcd.contains(&id) || self.has_keys(id, revkv).await? {
                self.keep_alive(id).await?;
            } else {
                self.kept.remove(&id);
                revkv
                    .lease()
                    .lease_revoke(LeaseRevokeRequest { id })
                    .await
                    .map_err(FollowError::call("revoking a lease on revkv"))?;
            }
        }
        Ok(())
    }

    /// Grants lease `id` on revkv with etcd's TTL for it, and keeps it.
    async fn mirror(
        &mut self,
        id: i64,
        etcd: &EtcdClient,
        revkv: &EtcdClient,
    ) -> Result<(), FollowError> {
        let described = etcd
            .lease()
            .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: false })
            .await
            .map_err(FollowError::call("reading a lease's TTL from etcd"))?
            .into_inner();
        let ttl = match described.granted_ttl {
            granted if granted > 0 => granted,
            _ => FALLBACK_TTL_SECONDS,
        };
        revkv
            .lease()
            .lease_grant(LeaseGrantRequest { ttl, id })
            .await
            .map_err(FollowError::call("granting a lease on revkv"))?;
        self.keep(id, revkv).await
    }

    async fn keep(&mut self, id: i64, revkv: &EtcdClient) -> Result<(), FollowError> {
        if self.kept.len() >= MAX_MIRRORED_LEASES {
            return Err(FollowError::Refused(format!(
                "more than {MAX_MIRRORED_LEASES} leases to mirror"
            )));
        }
        let stream = LeaseKeepAlive::open(&mut revkv.lease(), id)
            .await
            .map_err(|error| FollowError::Etcd("keeping a lease alive on revkv", error))?;
        self.kept.insert(id, stream);
        Ok(())
    }

    async fn keep_alive(&mut self, id: i64) -> Result<(), FollowError> {
        let Some(stream) = self.kept.get_mut(&id) else {
            return Ok(());
        };
        stream
            .keep_alive()
            .await
            .map_err(|error| FollowError::Etcd("keeping a lease alive on revkv", error))?;
        stream
            .message()
            .await
            .map_err(|error| FollowError::Etcd("keeping a lease alive on revkv", error))?;
        Ok(())
    }

    async fn has_keys(&self, id: i64, revkv: &EtcdClient) -> Result<bool, FollowError> {
        let described = revkv
            .lease()
            .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true })
            .await
            .map_err(FollowError::call("reading a lease on revkv"))?
            .into_inner();
        Ok(described.ttl > 0 && !described.keys.is_empty())
    }
}

async fn lease_ids(client: &EtcdClient, what: &'static str) -> Result<BTreeSet<i64>, FollowError> {
    let leases = client
        .lease()
        .lease_leases(LeaseLeasesRequest {})
        .await
        .map_err(FollowError::call(what))?
        .into_inner();
    Ok(leases.leases.iter().map(|lease| lease.id).collect())
}
