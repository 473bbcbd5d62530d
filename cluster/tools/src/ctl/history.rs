//! `revkv ctl history KEY`: every version of one key, oldest first, as a table (REVISION, TYPE,
//! VERSION, VALUE); with `--diff` the VALUE column becomes the JSON difference from the previous
//! version (RFC 6902 operations such as `replace /spec/replicas 3`), for the question "who
//! changed replicas, and when?". Pages are followed up to `--max-versions`.

use serde::Serialize;
use serde_json::Value;

use super::answers::print_either;
use super::output::{shortened, table};
use crate::cli::OutputFormat;
use revkv_client::{Client, ClientError, HistoryVersion};

/// Versions asked for per page.
const HISTORY_PAGE: u64 = 500;

/// A version as printed with `-o json`: the API's version, plus its changes with `--diff`.
#[derive(Serialize)]
struct PrintedVersion<'a> {
    #[serde(flatten)]
    version: &'a HistoryVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<Vec<String>>,
}

pub async fn history(
    client: &Client,
    format: OutputFormat,
    key: &str,
    from_revision: Option<u64>,
    max_versions: u64,
    diff: bool,
) -> Result<(), ClientError> {
    let versions = read_versions(client, key, from_revision, max_versions).await?;
    let changes: Vec<Option<Vec<String>>> = (0..versions.len())
        .map(|index| {
            diff.then(|| {
                let previous = index.checked_sub(1).map(|before| &versions[before]);
                changes_between(previous, &versions[index])
            })
        })
        .collect();
    let printed: Vec<PrintedVersion> = versions
        .iter()
        .zip(changes)
        .map(|(version, changes)| PrintedVersion { version, changes })
        .collect();
    print_either(format, &printed, || history_table(&printed, diff));
    Ok(())
}

pub async fn read_versions(
    client: &Client,
    key: &str,
    from_revision: Option<u64>,
    max_versions: u64,
) -> Result<Vec<HistoryVersion>, ClientError> {
    let mut versions = Vec::new();
    let page_size = Some(HISTORY_PAGE.min(max_versions.max(1)));
    let mut page = client.history(key, from_revision, page_size).await?;
    loop {
        versions.extend(page.versions);
        let next = match (&page.continue_token, page.more) {
            (Some(token), true) if (versions.len() as u64) < max_versions => token.clone(),
            _ => break,
        };
        page = client.history_after(key, &next, page_size).await?;
    }
    versions.truncate(usize::try_from(max_versions).unwrap_or(usize::MAX));
    Ok(versions)
}

fn history_table(printed: &[PrintedVersion], diff: bool) -> String {
    let rows: Vec<Vec<String>> = printed
        .iter()
        .map(|printed| {
            let kv = &printed.version.kv;
            let last = match &printed.changes {
                Some(changes) => changes.join("; "),
                None => kv.value.clone(),
            };
            vec![
                kv.mod_revision.to_string(),
                printed.version.kind.clone(),
                kv.version.to_string(),
                shortened(&last),
            ]
        })
        .collect();
    let last_header = if diff { "CHANGES" } else { "VALUE" };
    table(&["REVISION", "TYPE", "VERSION", last_header], &rows)
}

/// The changes from `previous` (none: the key did not exist) to `version`, one line each: RFC 6902
/// operations between JSON values, or whole-value lines where a side is not JSON or is deleted.
pub fn changes_between(previous: Option<&HistoryVersion>, version: &HistoryVersion) -> Vec<String> {
    let before = previous.filter(|previous| !previous.is_delete());
    if version.is_delete() {
        return vec!["deleted".into()];
    }
    let Some(before) = before else {
        return vec![format!("created {}", version.kv.value)];
    };
    let parsed = (
        serde_json::from_str::<Value>(&before.kv.value),
        serde_json::from_str::<Value>(&version.kv.value),
    );
    let (Ok(old), Ok(new)) = parsed else {
        return vec![format!("value {} -> {}", before.kv.value, version.kv.value)];
    };
    let patch = json_patch::diff(&old, &new);
    let lines: Vec<String> = patch.0.iter().map(operation_line).collect();
    if lines.is_empty() {
        vec!["unchanged".into()]
    } else {
        lines
    }
}

/// `replace /spec/replicas 3`, `add /labels/x "y"`, `remove /old`.
fn operation_line(operation: &json_patch::PatchOperation) -> String {
    let json = serde_json::to_value(operation).unwrap_or(Value::Null);
    let op = json["op"].as_str().unwrap_or("?");
    let path = json["path"].as_str().unwrap_or("");
    match json.get("value") {
        Some(value) => format!("{op} {path} {value}"),
        None => format!("{op} {path}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use revkv_client::KeyValue;

    fn version(kind: &str, value: &str, revision: u64) -> HistoryVersion {
        HistoryVersion {
            kind: kind.into(),
            kv: KeyValue {
                key: "k".into(),
                value: value.into(),
                create_revision: 1,
                mod_revision: revision,
                version: 1,
                lease: 0,
            },
        }
    }

    #[test]
    fn json_versions_show_field_operations_and_others_whole_values() {
        let first = version("PUT", r#"{"spec":{"replicas":1},"old":true}"#, 2);
        let second = version("PUT", r#"{"spec":{"replicas":3},"new":"x"}"#, 3);
        let mut lines = changes_between(Some(&first), &second);
        lines.sort();
        assert_eq!(
            lines,
            vec!["add /new \"x\"", "remove /old", "replace /spec/replicas 3"]
        );
        assert_eq!(
            changes_between(None, &first)[0],
            format!("created {}", first.kv.value)
        );
        let deleted = version("DELETE", "", 4);
        assert_eq!(changes_between(Some(&second), &deleted), vec!["deleted"]);
        let text = version("PUT", "plain", 5);
        assert_eq!(
            changes_between(Some(&deleted), &text),
            vec!["created plain"]
        );
        let more_text = version("PUT", "other", 6);
        assert_eq!(
            changes_between(Some(&text), &more_text),
            vec!["value plain -> other"]
        );
    }
}
