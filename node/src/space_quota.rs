//! The space quota, as etcd's `--quota-backend-bytes`: a member whose state file grows past the
//! quota raises the NOSPACE alarm through raft, and from then on every member refuses writes that
//! would grow the store (`no_space`, 507) until an operator makes room (compact, defragment) and
//! clears the alarm (`DELETE /v1/alarms`). Also the one way a member defragments its state file.
//!
//! Each member checks its own file, as each etcd member checks its own backend, and raises an
//! alarm in its own name; the alarm is replicated, so the refusal is the same on every member.
//! A member whose file is still past the quota when its alarm is cleared raises it again at the
//! next check.

use std::sync::Arc;
use std::time::Duration;

use revkv_storage::{Alarm, AlarmAction, AlarmKind, Defragmented, MvccStore, Request};
use tokio::sync::watch;

use crate::backend::KvBackend;
use crate::error::NodeError;

/// etcd's default quota: 2 GiB.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The quota and how often a member compares its state file with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceQuota {
    pub quota_bytes: u64,
    pub check_interval: Duration,
}

impl Default for SpaceQuota {
    fn default() -> Self {
        SpaceQuota {
            quota_bytes: DEFAULT_QUOTA_BACKEND_BYTES,
            check_interval: Duration::from_secs(1),
        }
    }
}

/// Starts the member's quota check; it ends when `stop` turns true (or its sender is dropped).
pub fn spawn<B: KvBackend>(backend: Arc<B>, quota: SpaceQuota, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut ticks = revkv_raft::clock::interval(quota.check_interval);
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    if let Err(error) = check_once(&*backend, quota).await {
                        tracing::debug!(%error, "space quota check failed; will check again");
                    }
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
            }
        }
    });
}

/// Raises this member's NOSPACE alarm when its state file is past the quota and the alarm is not
/// raised yet. Returns whether it raised one.
pub async fn check_once<B: KvBackend>(backend: &B, quota: SpaceQuota) -> Result<bool, NodeError> {
    let state_file_bytes = backend.status().await?.state_db_bytes;
    if state_file_bytes <= quota.quota_bytes {
        return Ok(false);
    }
    let alarm = Alarm {
        member_id: backend.member_id(),
        kind: AlarmKind::NoSpace,
    };
    if backend.alarms()?.contains(&alarm) {
        return Ok(false);
    }
    tracing::warn!(
        state_file_bytes,
        quota_bytes = quota.quota_bytes,
        "the state file passed the space quota: raising the NOSPACE alarm; writes that grow the \
         store are refused until it is cleared (compact, defragment, then DELETE /v1/alarms)"
    );
    let action = AlarmAction::Activate;
    backend.write(Request::Alarm { action, alarm }).await?;
    Ok(true)
}

/// Defragments a store on the blocking pool. A store kept busy by reads answers `Unavailable`.
pub async fn defragment_store(store: Arc<MvccStore>) -> Result<Defragmented, NodeError> {
    let outcome = revkv_raft::runtime::offload(move || store.defragment())
        .await
        .map_err(|error| NodeError::Internal(error.to_string()))?;
    match outcome {
        Ok(defragmented) => Ok(defragmented),
        Err(revkv_storage::DefragmentError::Busy(reason)) => Err(NodeError::Unavailable {
            reason,
            retry_after: Duration::from_secs(1),
        }),
        Err(other) => Err(other.into()),
    }
}
