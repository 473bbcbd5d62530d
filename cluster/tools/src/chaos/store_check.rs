//! The healed cluster's store against the history the checkers built: every member's keys at the
//! final revision, equal `/v1/hash` on every member, and historical range reads at revisions spread
//! over what compaction kept. This is what ties the recording watch to the store itself.

use std::collections::{BTreeMap, BTreeSet};

use super::check::states::History;
use super::check::Violation;
use super::history::Kv;
use super::members::Members;
use super::workload::KEY_PREFIX;
use revkv_client::{Client, Consistency, RangeRequest, ReadOptions};

/// How many historical revisions the check reads back from the store.
const SAMPLED_REVISIONS: u64 = 25;

/// Checks the store at the end of a run; returns the compact revision too.
pub async fn check_store(
    members: &Members,
    history: &History,
    final_revision: u64,
) -> (u64, Vec<Violation>) {
    let mut violations = Vec::new();
    let mut clients = BTreeMap::new();
    for (id, url) in members.client_urls() {
        let Ok(client) = Client::new([url]) else {
            continue;
        };
        let at_final = ReadOptions {
            consistency: Consistency::Serializable,
            min_revision: Some(final_revision),
            revision: Some(final_revision),
        };
        if let Err(error) = compare_range(&client, at_final, history, final_revision).await {
            violations.push(store_violation(format!("member {id}: {error}")));
        }
        clients.insert(id, client);
    }
    let compact_revision = compare_hashes(&clients, final_revision, &mut violations).await;
    let sampled = check_sampled_revisions(members, history, compact_revision, final_revision);
    violations.extend(sampled.await);
    (compact_revision, violations)
}

/// How many times the hashes are taken again while the members' applied log indexes differ or
/// move, and the pause between tries.
const HASH_ATTEMPTS: u32 = 20;
const HASH_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// Every member's hash at `final_revision`, compared once all of them had applied the same log
/// index before and after hashing. The hash covers the leases as applied, and a lease grant, or
/// the revoke of a lease without keys, takes no revision: members at one revision that have not
/// applied the same log may differ there without being out of step (a chaos run compared them
/// mid-way and reported a false mismatch). After `HASH_ATTEMPTS` the last hashes are compared
/// anyway. Returns the highest compact revision reported.
async fn compare_hashes(
    clients: &BTreeMap<u64, Client>,
    final_revision: u64,
    violations: &mut Vec<Violation>,
) -> u64 {
    let mut hashes = BTreeMap::new();
    let mut failures = Vec::new();
    let mut compact_revision = 0;
    for _ in 0..HASH_ATTEMPTS {
        let applied_before = applied_indexes(clients).await;
        hashes.clear();
        failures.clear();
        for (id, client) in clients {
            match client.hash(Some(final_revision)).await {
                Ok(hash) => {
                    hashes.insert(*id, hash.hash);
                    compact_revision = compact_revision.max(hash.compact_revision);
                }
                Err(error) => failures.push(format!("member {id}: no hash: {error}")),
            }
        }
        let applied_after = applied_indexes(clients).await;
        let settled = applied_before == applied_after
            && applied_after.len() == clients.len()
            && applied_after.values().collect::<BTreeSet<_>>().len() == 1;
        if settled {
            break;
        }
        tokio::time::sleep(HASH_RETRY_PAUSE).await;
    }
    violations.extend(failures.into_iter().map(store_violation));
    let distinct: BTreeSet<u64> = hashes.values().copied().collect();
    if distinct.len() > 1 {
        violations.push(Violation {
            kind: "hash-mismatch",
            detail: format!("hashes at revision {final_revision}: {hashes:?}"),
            operations: Vec::new(),
        });
    }
    compact_revision
}

/// Each member's applied log index, for the members that answered.
async fn applied_indexes(clients: &BTreeMap<u64, Client>) -> BTreeMap<u64, u64> {
    let mut applied = BTreeMap::new();
    for (id, client) in clients {
        if let Ok(status) = client.status().await {
            applied.insert(*id, status.applied_index);
        }
    }
    applied
}

/// Historical range reads at revisions spread over the retained history equal the history.
async fn check_sampled_revisions(
    members: &Members,
    history: &History,
    compact_revision: u64,
    final_revision: u64,
) -> Vec<Violation> {
    let Ok(client) = Client::new(members.client_urls().into_values()) else {
        return vec![store_violation("no client for the members".into())];
    };
    // The compact revision itself may be gone from every member's history: read above it.
    let lowest = (compact_revision + 1).max(history.first());
    let span = final_revision.saturating_sub(lowest);
    let mut violations = Vec::new();
    for step in 0..=SAMPLED_REVISIONS.min(span) {
        let revision = lowest + span * step / SAMPLED_REVISIONS.max(1);
        let read = ReadOptions {
            revision: Some(revision),
            ..ReadOptions::default()
        };
        if let Err(error) = compare_range(&client, read, history, revision).await {
            violations.push(store_violation(error));
        }
    }
    violations
}

/// Reads every workload key with `read` and compares it with the history at `revision`.
async fn compare_range(
    client: &Client,
    read: ReadOptions,
    history: &History,
    revision: u64,
) -> Result<(), String> {
    let request = RangeRequest::prefix(KEY_PREFIX).read_options(read);
    let range = client
        .range(&request)
        .await
        .map_err(|error| format!("no read at revision {revision}: {error}"))?;
    let found: Vec<(String, Kv)> = range
        .kvs
        .iter()
        .map(|kv| {
            let value = Kv {
                value: kv.value.clone(),
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
                version: kv.version,
            };
            (kv.key.clone(), value)
        })
        .collect();
    if found != history.range_at(KEY_PREFIX, revision) {
        return Err(format!(
            "the store at revision {revision} differs from the history: {found:?}"
        ));
    }
    Ok(())
}

fn store_violation(detail: String) -> Violation {
    Violation {
        kind: "store",
        detail,
        operations: Vec::new(),
    }
}
