//! The replica check: members that applied the same revision hold the same key space (the
//! hash of every key's versions up to it, as etcd's `HashKV`).

use std::collections::{BTreeMap, BTreeSet};

use revkv_node::KvBackend;

use crate::check::Violation;
use crate::cluster::Cluster;

/// Members that applied the same revision must hold the same key space.
pub async fn check(cluster: &Cluster, revision: u64) -> Vec<Violation> {
    let mut hashes = BTreeMap::new();
    for id in cluster.ids() {
        let Some(backend) = cluster.backend(id) else {
            continue;
        };
        match backend.hash(Some(revision)).await {
            Ok((_, hash)) => {
                hashes.insert(id, hash.hash);
            }
            Err(error) => {
                return vec![violation(
                    "hash unreadable",
                    format!("member {id}: {error}"),
                )]
            }
        }
    }
    let distinct: BTreeSet<u64> = hashes.values().copied().collect();
    if distinct.len() > 1 {
        return vec![violation(
            "replicas differ",
            format!("hashes at revision {revision}: {hashes:?}"),
        )];
    }
    Vec::new()
}

fn violation(kind: &'static str, detail: String) -> Violation {
    Violation { kind, detail }
}
