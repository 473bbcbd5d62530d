//! The end of a run: after the workload and the heal, wait for the leases nobody keeps alive to
//! expire, then bring the cluster to rest on one final revision that every member has applied.

use std::collections::BTreeMap;
use std::time::Duration;

use revkv_node::KvBackend;

use crate::cluster::Cluster;
use crate::trace::Trace;

/// How long, in simulated time, the healed cluster may take to agree on one revision.
const CONVERGENCE_DEADLINE: Duration = Duration::from_secs(120);

/// How long, in simulated time, the leases left at the end of the workload may take to expire:
/// the longest TTL several times over, for the elections the heal may start.
const LEASE_END_DEADLINE: Duration = Duration::from_secs(60);

/// Waits until no lease is left: the lease clients' last leases, and any a grant that timed out
/// made, expire by themselves once nobody keeps them alive. A lease that outlives the deadline
/// is a lease that never expires. Waiting also keeps expiries out of the settled revision.
pub async fn wait_for_leases_to_end(cluster: &Cluster) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + LEASE_END_DEADLINE;
    let mut left = String::from("no answer");
    while tokio::time::Instant::now() < deadline {
        let first = cluster.ids().first().copied();
        let backend = first.and_then(|id| Some((id, cluster.backend(id)?)));
        if let Some((id, backend)) = backend {
            match cluster.on_member(id, backend.lease_ids()).await {
                Ok((_, ids)) if ids.is_empty() => return Ok(()),
                Ok((_, ids)) => left = format!("leases {ids:?}"),
                Err(error) => left = error.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("after {LEASE_END_DEADLINE:?}: {left}"))
}

/// The key of the write that ends a run, outside the workload's prefix.
const BARRIER_KEY: &str = "barrier";

/// Brings the healed cluster to rest and answers its final revision. A leader may still hold
/// entries of requests whose clients gave up; they commit (or are overwritten) once it hears
/// from the others, at some moment after the heal. So one more write goes through the leader
/// after the members first agree: once it commits, every entry before it in the leader's log
/// has too, and the revision every member then agrees on is final.
pub async fn settle(cluster: &Cluster, trace: &Trace) -> Result<u64, String> {
    converge(cluster, 0).await?;
    let deadline = tokio::time::Instant::now() + CONVERGENCE_DEADLINE;
    let barrier = loop {
        let first = cluster.ids().first().copied();
        let backend = first.and_then(|id| Some((id, cluster.backend(id)?)));
        let written = match backend {
            Some((id, backend)) => cluster
                .on_member(id, backend.put(BARRIER_KEY, ""))
                .await
                .map_err(|error| error.to_string()),
            None => Err("member 1 is not running".to_owned()),
        };
        match written {
            Ok(written) => break written.header.revision,
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("the barrier write failed: {error}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    trace.record(None, None, format!("barrier written at revision {barrier}"));
    converge(cluster, barrier).await
}

/// Waits until every member has a leader and all have applied the same revision, at least
/// `at_least`; answers it.
async fn converge(cluster: &Cluster, at_least: u64) -> Result<u64, String> {
    let deadline = tokio::time::Instant::now() + CONVERGENCE_DEADLINE;
    let mut last = BTreeMap::new();
    while tokio::time::Instant::now() < deadline {
        last.clear();
        for id in cluster.ids() {
            let Some(backend) = cluster.backend(id) else {
                continue;
            };
            if let Ok(status) = cluster.on_member(id, backend.status()).await {
                last.insert(
                    id,
                    (status.leader_id, status.revision, status.applied_index),
                );
            }
        }
        let revisions: Vec<_> = last
            .values()
            .map(|(_, revision, applied)| (*revision, *applied))
            .collect();
        let all_led = last.values().all(|(leader, _, _)| leader.is_some());
        let agreed = revisions.windows(2).all(|pair| pair[0] == pair[1]);
        let everyone = last.len() == cluster.ids().len();
        if everyone && all_led && agreed && revisions[0].0 >= at_least {
            return Ok(revisions[0].0);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "members' (leader, revision, applied index) after {CONVERGENCE_DEADLINE:?}: {last:?}"
    ))
}
