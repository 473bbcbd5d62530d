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
    let mut hashes = BTreeMap::new();
    let mut compact_revision = 0;
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
        match client.hash(Some(final_revision)).await {
            Ok(hash) => {
                hashes.insert(id, hash.hash);
                compact_revision = compact_revision.max(hash.compact_revision);
            }
            Err(error) => {
                violations.push(store_violation(format!("member {id}: no hash: {error}")))
            }
        }
    }
    let distinct: BTreeSet<u64> = hashes.values().copied().collect();
    if distinct.len() > 1 {
        violations.push(Violation {
            kind: "hash-mismatch",
            detail: format!("hashes at revision {final_revision}: {hashes:?}"),
            operations: Vec::new(),
        });
    }
    let sampled = check_sampled_revisions(members, history, compact_revision, final_revision);
    violations.extend(sampled.await);
    (compact_revision, violations)
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
