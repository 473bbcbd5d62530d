//! `revkv ctl snapshot save FILE`: a backup of the cluster written atomically and checked.
//!
//! The stream goes into a temporary file in the destination's directory (so the rename cannot
//! cross filesystems), which is fsynced and then read back whole through the snapshot codec
//! (`revkv_storage::inspect_snapshot`: every frame, the count and the checksum). Only a file that
//! passes is renamed over FILE, and the directory is fsynced so the rename survives a crash. A
//! failed or broken stream leaves FILE as it was and removes the temporary file. Progress (bytes
//! and rate) is drawn on stderr when it is a terminal, and nothing is drawn otherwise.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use revkv_client::{Client, ClientError};
use revkv_storage::SnapshotSummary;

use super::commands::print_either;
use crate::cli::OutputFormat;

/// Saves a backup to `path`; prints its revision, key count, size and checksum state.
pub async fn save(client: &Client, format: OutputFormat, path: &Path) -> Result<(), ClientError> {
    let partial = partial_path(path)?;
    let result = save_into(client, &partial, path).await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    let (bytes, summary) = result?;
    let answer = serde_json::json!({
        "path": path,
        "bytes": bytes,
        "revision": summary.current_revision,
        "compact_revision": summary.compact_revision,
        "keys": summary.live_keys,
        "member_id": summary.member_id,
        "cluster_id": summary.cluster_id.map(|id| format!("{id:016x}")),
        "checksum": format!("{:016x}", summary.checksum),
        "checksum_ok": true,
    });
    print_either(format, &answer, || {
        format!(
            "saved revision {} ({} keys, from member {}) to {}: {bytes} bytes, checksum {:016x} verified",
            summary.current_revision,
            summary.live_keys.unwrap_or_default(),
            summary.member_id.map_or("?".to_string(), |id| id.to_string()),
            path.display(),
            summary.checksum,
        )
    });
    Ok(())
}

/// `.NAME.part-PID` beside `path`.
fn partial_path(path: &Path) -> Result<PathBuf, ClientError> {
    let name = path.file_name().ok_or_else(|| ClientError::Invalid {
        message: format!("{}: not a file name", path.display()),
    })?;
    let partial = format!(".{}.part-{}", name.to_string_lossy(), std::process::id());
    Ok(directory_of(path).join(partial))
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Streams into `partial`, syncs it, checks it, and renames it to `path`.
async fn save_into(
    client: &Client,
    partial: &Path,
    path: &Path,
) -> Result<(u64, SnapshotSummary), ClientError> {
    let mut file = tokio::fs::File::create_new(partial)
        .await
        .map_err(local(partial))?;
    let progress = progress_bar();
    let saved = client
        .snapshot_save(&mut progress.wrap_async_write(&mut file))
        .await;
    progress.finish_and_clear();
    let bytes = saved?;
    file.sync_all().await.map_err(local(partial))?;
    drop(file);
    let summary = check(partial, path).await?;
    tokio::fs::rename(partial, path)
        .await
        .map_err(local(path))?;
    let directory = directory_of(path).to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(&directory)?.sync_all())
        .await
        .map_err(|error| transport(format!("syncing the directory: {error}")))?
        .map_err(local(directory_of(path)))?;
    Ok((bytes, summary))
}

/// Reads the saved stream back whole through the codec: frames, order, count and checksum.
async fn check(partial: &Path, path: &Path) -> Result<SnapshotSummary, ClientError> {
    let reading = partial.to_path_buf();
    let checked = tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&reading)?;
        revkv_storage::inspect_snapshot(&mut std::io::BufReader::new(file))
            .map_err(std::io::Error::other)
    })
    .await
    .map_err(|error| transport(format!("checking the backup: {error}")))?;
    checked.map_err(|error| {
        transport(format!(
            "the backup for {} failed its check and was not saved: {error}",
            path.display()
        ))
    })
}

/// A spinner with bytes and rate on a terminal; a hidden bar (nothing drawn) otherwise.
fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let progress = ProgressBar::new_spinner();
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {bytes} received ({binary_bytes_per_sec})")
    {
        progress.set_style(style);
    }
    progress.enable_steady_tick(Duration::from_millis(200));
    progress
}

fn local(path: &Path) -> impl Fn(std::io::Error) -> ClientError + '_ {
    move |error| transport(format!("{}: {error}", path.display()))
}

fn transport(message: String) -> ClientError {
    ClientError::Transport { message }
}
