//! `revkv ctl snapshot save FILE [--format etcd]`: a backup of the cluster written atomically
//! and checked; with `--format etcd`, converted into an etcd snapshot (revkv-etcd-snapshot) and
//! checked again in that form before it replaces FILE.
//!
//! The stream goes into a temporary file in the destination's directory (so the rename cannot
//! cross filesystems), which is fsynced and then read back whole through the snapshot codec
//! (`revkv_storage::inspect_snapshot`: every frame, the count and the checksum). Only a file that
//! passes is renamed over FILE, and the directory is fsynced so the rename survives a crash. A
//! failed or broken stream leaves FILE as it was and removes the temporary file. Progress (bytes
//! and rate) is drawn on stderr when it is a terminal, and nothing is drawn otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use revkv_client::{Client, ClientError};
use revkv_etcd_snapshot::{convert_revkv_backup, EtcdSnapshot};
use revkv_storage::{inspect_foreign, SnapshotSummary};

use super::answers::print_either;
use super::SnapshotFormat;
use crate::cli::OutputFormat;

/// Saves a backup to `path` in `snapshot_format`; prints its revision, key count, size and
/// checksum state.
pub async fn save(
    client: &Client,
    format: OutputFormat,
    path: &Path,
    snapshot_format: SnapshotFormat,
) -> Result<(), ClientError> {
    let partial = partial_path(path, "part")?;
    let etcd_partial = partial_path(path, "etcd-part")?;
    let result = save_into(client, &partial, path).await;
    let result = match (result, snapshot_format) {
        (Ok((_, summary)), SnapshotFormat::Etcd) => {
            let converted = convert_to_etcd(&partial, &etcd_partial, path).await;
            converted.map(|bytes| (bytes, summary))
        }
        (result, _) => result,
    };
    let result = match result {
        Ok(saved) => publish(
            if snapshot_format == SnapshotFormat::Etcd {
                &etcd_partial
            } else {
                &partial
            },
            path,
        )
        .await
        .map(|()| saved),
        Err(error) => Err(error),
    };
    for leftover in [&partial, &etcd_partial] {
        let _ = tokio::fs::remove_file(leftover).await;
    }
    let (bytes, summary) = result?;
    let format_name = match snapshot_format {
        SnapshotFormat::Revkv => "revkv",
        SnapshotFormat::Etcd => "etcd",
    };
    let answer = serde_json::json!({
        "path": path,
        "format": format_name,
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

/// `.NAME.SUFFIX-PID` beside `path`.
fn partial_path(path: &Path, suffix: &str) -> Result<PathBuf, ClientError> {
    let name = path.file_name().ok_or_else(|| ClientError::Invalid {
        message: format!("{}: not a file name", path.display()),
    })?;
    let partial = format!(
        ".{}.{suffix}-{}",
        name.to_string_lossy(),
        std::process::id()
    );
    Ok(directory_of(path).join(partial))
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Streams into `partial`, syncs it and checks it.
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
    Ok((bytes, summary))
}

/// Renames the checked `partial` over `path` and syncs the directory, so the rename survives a
/// crash.
async fn publish(partial: &Path, path: &Path) -> Result<(), ClientError> {
    tokio::fs::rename(partial, path)
        .await
        .map_err(local(path))?;
    let directory = directory_of(path).to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(&directory)?.sync_all())
        .await
        .map_err(|error| transport(format!("syncing the directory: {error}")))?
        .map_err(local(directory_of(path)))
}

/// Writes the checked revkv backup `native` as an etcd snapshot in `etcd` (synced), then reads
/// that back whole (trailer, pages, every record) before it may replace `path`. Answers its size.
async fn convert_to_etcd(native: &Path, etcd: &Path, path: &Path) -> Result<u64, ClientError> {
    let (native, etcd) = (native.to_path_buf(), etcd.to_path_buf());
    let converted = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let mut reader = revkv_storage::open_backup_file(&native).map_err(|e| e.to_string())?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&etcd)
            .map_err(|error| format!("{}: {error}", etcd.display()))?;
        let (_, export) =
            convert_revkv_backup(&mut reader, file).map_err(|error| error.to_string())?;
        let snapshot = EtcdSnapshot::open(&etcd).map_err(|error| error.to_string())?;
        let history = snapshot.history().map_err(|error| error.to_string())?;
        inspect_foreign(history, |emit| snapshot.feed(emit)).map_err(|error| error.to_string())?;
        Ok(export.bytes + revkv_etcd_snapshot::import::TRAILER_BYTES)
    })
    .await
    .map_err(|error| transport(format!("converting the backup: {error}")))?;
    converted.map_err(|error| {
        transport(format!(
            "the backup for {} could not be written in etcd's format: {error}",
            path.display()
        ))
    })
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
    if !crate::cli::draws_progress() {
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
