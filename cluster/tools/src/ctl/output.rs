//! How `revkv ctl` prints: aligned tables and short sentences for people (the default), or the
//! API's answer as JSON for scripts (`-o json`; a watch prints one JSON object per line).

use serde::Serialize;

use revkv_client::{KeyValue, Member, StatusResponse, WatchEvent, WatchUpdate};

/// The widest a value is shown in a table before it is cut (with `…`); `-o json` shows it whole.
pub const WIDEST_TABLE_VALUE: usize = 60;

/// `rows` under `headers`, each column as wide as its widest cell, two spaces apart.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|header| header.chars().count())
        .collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header_cells: Vec<String> = headers.iter().map(|header| header.to_string()).collect();
    std::iter::once(&header_cells)
        .chain(rows)
        .map(|row| aligned_line(row, &widths))
        .collect::<Vec<_>>()
        .join("\n")
}

fn aligned_line(cells: &[String], widths: &[usize]) -> String {
    let padded: Vec<String> = cells
        .iter()
        .zip(widths)
        .map(|(cell, width)| format!("{cell:<width$}"))
        .collect();
    padded.join("  ").trim_end().to_string()
}

/// `value`, cut to [`WIDEST_TABLE_VALUE`] characters with `…`, newlines shown as `\n`.
pub fn shortened(value: &str) -> String {
    let single_line = value.replace('\n', "\\n");
    if single_line.chars().count() <= WIDEST_TABLE_VALUE {
        return single_line;
    }
    let cut: String = single_line.chars().take(WIDEST_TABLE_VALUE - 1).collect();
    format!("{cut}…")
}

/// A pretty JSON document of `answer`.
pub fn json<T: Serialize>(answer: &T) -> String {
    serde_json::to_string_pretty(answer).expect("answers always serialise")
}

/// Key-values as a table: KEY, VALUE, CREATE_REV, MOD_REV, VERSION.
pub fn kv_table(kvs: &[KeyValue]) -> String {
    let rows: Vec<Vec<String>> = kvs
        .iter()
        .map(|kv| {
            vec![
                kv.key.clone(),
                shortened(&kv.value),
                kv.create_revision.to_string(),
                kv.mod_revision.to_string(),
                kv.version.to_string(),
            ]
        })
        .collect();
    table(&["KEY", "VALUE", "CREATE_REV", "MOD_REV", "VERSION"], &rows)
}

/// Members as a table: ID, ROLE, PEER_URL, CLIENT_URL, GRPC_URL.
pub fn member_table(members: &[Member]) -> String {
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|member| {
            let role = match (member.is_learner, member.auto_promote_max_lag) {
                (false, _) => "voter".to_string(),
                (true, None) => "learner".to_string(),
                (true, Some(bound)) => format!("learner (auto-promote within {bound})"),
            };
            vec![
                member.id.to_string(),
                role,
                or_dash(&member.peer_url),
                or_dash(&member.client_url),
                or_dash(member.grpc_url.as_deref().unwrap_or_default()),
            ]
        })
        .collect();
    table(&["ID", "ROLE", "PEER_URL", "CLIENT_URL", "GRPC_URL"], &rows)
}

/// `text`, or `-` when it is empty (a member that has not published its URL yet).
fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_string()
    } else {
        text.to_string()
    }
}

/// One row per endpoint of `revkv ctl status`.
pub fn status_row(endpoint: &str, status: &StatusResponse) -> Vec<String> {
    vec![
        endpoint.to_string(),
        status.member_id.to_string(),
        status.role.clone(),
        status
            .leader_id
            .map_or_else(|| "-".to_string(), |id| id.to_string()),
        status.raft_term.to_string(),
        status.revision.to_string(),
        status.compact_revision.to_string(),
        status.applied_index.to_string(),
        (status.state_db_bytes + status.log_db_bytes).to_string(),
    ]
}

/// The headers matching [`status_row`].
pub const STATUS_HEADERS: [&str; 9] = [
    "ENDPOINT", "ID", "ROLE", "LEADER", "TERM", "REVISION", "COMPACT", "APPLIED", "DB_BYTES",
];

/// A watch update as lines: `PUT key value (revision R)`, `DELETE key (revision R)`, `BOOKMARK R`.
pub fn watch_update_lines(update: &WatchUpdate) -> String {
    match update {
        WatchUpdate::Events { revision, events } => events
            .iter()
            .map(|event| watch_event_line(event, *revision))
            .collect::<Vec<_>>()
            .join("\n"),
        WatchUpdate::Bookmark { revision } => format!("BOOKMARK {revision}"),
    }
}

fn watch_event_line(event: &WatchEvent, revision: u64) -> String {
    match event.kind {
        revkv_client::EventKind::Put => format!(
            "PUT {} {} (revision {revision})",
            event.kv.key,
            shortened(&event.kv.value)
        ),
        revkv_client::EventKind::Delete => {
            format!("DELETE {} (revision {revision})", event.kv.key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["longer".to_string(), "22".to_string()],
        ];
        assert_eq!(
            table(&["KEY", "N"], &rows),
            "KEY     N\na       1\nlonger  22"
        );
    }

    #[test]
    fn long_values_are_cut_and_newlines_shown() {
        assert_eq!(shortened("a\nb"), "a\\nb");
        let long = "x".repeat(100);
        let cut = shortened(&long);
        assert_eq!(cut.chars().count(), WIDEST_TABLE_VALUE);
        assert!(cut.ends_with('…'));
    }
}
