//! `revkv ctl conflicts top`: the hottest conflicting keys of the whole cluster. Each member
//! counts the conflicts it answered, so the command asks every endpoint (`GET /v1/conflicts`) and
//! adds up each key's counts; a member that does not answer is reported and the others still
//! count (exit status 1 then).

use std::collections::BTreeMap;

use revkv_client::{Client, ClientError, HotKey};

use super::answers::{ask_each_endpoint, print_either};
use super::output::table;
use crate::cli::OutputFormat;

pub async fn conflicts_top(
    client: &Client,
    format: OutputFormat,
    top: u64,
) -> Result<(), ClientError> {
    let asked =
        ask_each_endpoint(client, |member| async move { member.hot_keys(top).await }).await?;
    let window_seconds = asked
        .answers
        .iter()
        .map(|(_, answer)| answer.window_seconds)
        .max()
        .unwrap_or(0);
    let keys = asked.answers.iter().map(|(_, answer)| answer.keys.clone());
    let merged = merge_members(keys.collect(), top);
    let printed = serde_json::json!({ "window_seconds": window_seconds, "keys": merged });
    print_either(format, &printed, || {
        let rows: Vec<Vec<String>> = merged
            .iter()
            .map(|hot| {
                vec![
                    hot.key.clone(),
                    hot.conflicts.to_string(),
                    hot.retries.to_string(),
                    hot.last_revision.to_string(),
                ]
            })
            .collect();
        format!(
            "hottest keys over the last {window_seconds}s, all members\n{}",
            table(&["KEY", "CONFLICTS", "RETRIES", "LAST_REVISION"], &rows)
        )
    });
    asked.outcome()
}

/// Every member's keys added up (counts summed, the latest revision kept), hottest first, at most
/// `top`.
pub fn merge_members(answers: Vec<Vec<HotKey>>, top: u64) -> Vec<HotKey> {
    let mut by_key: BTreeMap<String, HotKey> = BTreeMap::new();
    for hot in answers.into_iter().flatten() {
        let total = by_key.entry(hot.key.clone()).or_insert(HotKey {
            key: hot.key.clone(),
            conflicts: 0,
            retries: 0,
            last_revision: 0,
        });
        total.conflicts += hot.conflicts;
        total.retries += hot.retries;
        total.last_revision = total.last_revision.max(hot.last_revision);
    }
    let mut merged: Vec<HotKey> = by_key.into_values().collect();
    merged.sort_by_key(|hot| std::cmp::Reverse(hot.conflicts + hot.retries));
    merged.truncate(usize::try_from(top).unwrap_or(usize::MAX));
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hot(key: &str, conflicts: u64, retries: u64, last_revision: u64) -> HotKey {
        HotKey {
            key: key.into(),
            conflicts,
            retries,
            last_revision,
        }
    }

    #[test]
    fn members_counts_add_up_and_the_hottest_come_first() {
        let merged = merge_members(
            vec![
                vec![hot("a", 5, 0, 10), hot("b", 4, 0, 11)],
                vec![hot("b", 3, 1, 20), hot("c", 1, 0, 5)],
            ],
            2,
        );
        assert_eq!(merged, vec![hot("b", 7, 1, 20), hot("a", 5, 0, 10)]);
    }
}
