//! `revkv snapshot status FILE` and `revkv snapshot restore FILE ...`: the offline side of backups
//! (`revkv ctl snapshot save` takes them from a running cluster), like `etcdutl snapshot`.
//!
//! `status` reads the whole file through the snapshot codec (every frame, the count and the
//! checksum) and prints what the header says; an etcd snapshot or db file is read whole through
//! the same checks (`revkv_raft::inspect_backup`). `restore` makes a new cluster's member from the file
//! (`revkv_raft::restore`): run it once per member with the same file and `--initial-cluster`, then
//! start each member with `revkv serve` on its data directory with the same `--id` and peer URL.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use indicatif::{HumanBytes, ProgressBar};
use revkv_raft::{
    inspect_backup, restore_member, BackupFormat, RestorePhase, RestorePlan, RestoreProgress,
};
use revkv_storage::SnapshotSummary;
use serde_json::json;

use crate::serve_config::parse_member_list;

/// `revkv snapshot ...`.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(Subcommand, Debug)]
enum SnapshotCommand {
    /// Check a backup file whole (revkv's frames, count and checksum, or an etcd snapshot's
    /// SHA-256, pages and records) and print its revision, keys and size.
    Status {
        file: PathBuf,
        /// `table` or `json` (as `etcdutl snapshot status -w json`).
        #[arg(short = 'w', long = "write-out", visible_short_alias = 'o', visible_alias = "output", value_enum, default_value_t = WriteOut::Table)]
        write_out: WriteOut,
    },
    /// Create a new cluster's member from a backup file (revkv's, or an etcd 3.4 or 3.5 snapshot
    /// or member db): its history is kept (the new cluster starts at the backup's revision,
    /// every key with its create and mod revision and version) under a new cluster id and the
    /// given membership.
    Restore {
        file: PathBuf,
        /// The new member's data directory; it must not exist or be empty.
        #[arg(long)]
        data_dir: PathBuf,
        /// The new member's id (as `revkv serve --id`).
        #[arg(long)]
        id: u64,
        /// Every member of the new cluster: `1=http://host:7101,2=...` (as `revkv serve
        /// --initial-cluster`; give every restored member the same list).
        #[arg(long)]
        initial_cluster: String,
        /// The state file's page cache while writing, in bytes (default 64 MiB). With the key
        /// index (about 100 bytes a key) it bounds the restore's memory; more makes a large
        /// restore faster.
        #[arg(long, default_value_t = revkv_raft::DEFAULT_RESTORE_CACHE_BYTES as u64, value_parser = clap::value_parser!(u64).range(MIN_CACHE_BYTES..=MAX_CACHE_BYTES))]
        cache_bytes: u64,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WriteOut {
    Table,
    Json,
}

/// Runs `revkv snapshot ...`; errors go to stderr with the file they concern.
pub fn run(args: SnapshotArgs) -> ExitCode {
    let result = match args.command {
        SnapshotCommand::Status { file, write_out } => status(&file, write_out),
        SnapshotCommand::Restore {
            file,
            data_dir,
            id,
            initial_cluster,
            cache_bytes,
        } => restore(file, data_dir, id, &initial_cluster, cache_bytes),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("revkv snapshot: {message}");
            ExitCode::FAILURE
        }
    }
}

fn status(file: &std::path::Path, write_out: WriteOut) -> Result<(), String> {
    let named = |error: &dyn std::fmt::Display| format!("{}: {error}", file.display());
    let size = std::fs::metadata(file).map_err(|e| named(&e))?.len();
    let (format, summary) =
        inspect_backup(file).map_err(|error| format!("checksum state: bad ({error})"))?;
    match write_out {
        WriteOut::Json => println!("{}", status_json(format, &summary, size)),
        WriteOut::Table => print!("{}", status_table(format, &summary, size)),
    }
    Ok(())
}

fn status_json(format: BackupFormat, summary: &SnapshotSummary, size: u64) -> serde_json::Value {
    json!({
        "format": format.name(),
        "revision": summary.current_revision,
        "compact_revision": summary.compact_revision,
        "keys": summary.live_keys,
        "records": summary.records,
        "size": size,
        "member_id": summary.member_id,
        "cluster_id": summary.cluster_id.map(|id| format!("{id:016x}")),
        "stream_version": summary.stream_version,
        "checksum": format!("{:016x}", summary.checksum),
        "checksum_ok": true,
    })
}

fn status_table(format: BackupFormat, summary: &SnapshotSummary, size: u64) -> String {
    let unknown = || "unknown".to_string();
    let rows = [
        ("format", format.name().to_string()),
        ("revision", summary.current_revision.to_string()),
        ("compact revision", summary.compact_revision.to_string()),
        (
            "keys",
            summary
                .live_keys
                .map_or_else(unknown, |keys| keys.to_string()),
        ),
        ("records", summary.records.to_string()),
        ("size", format!("{size} bytes")),
        (
            "member",
            summary.member_id.map_or_else(unknown, |id| id.to_string()),
        ),
        (
            "cluster id",
            summary
                .cluster_id
                .map_or_else(unknown, |id| format!("{id:016x}")),
        ),
        ("stream version", summary.stream_version.to_string()),
        ("checksum", format!("{:016x} (ok)", summary.checksum)),
    ];
    rows.iter()
        .map(|(name, value)| format!("{name:<17}{value}\n"))
        .collect()
}

fn restore(
    file: PathBuf,
    data_dir: PathBuf,
    id: u64,
    initial_cluster: &str,
    cache_bytes: u64,
) -> Result<(), String> {
    let members = parse_member_list(initial_cluster)
        .map_err(|error| format!("--initial-cluster: {error}"))?;
    let mut plan = RestorePlan::new(file, data_dir, id, members);
    plan.cache_bytes = usize::try_from(cache_bytes).map_err(|error| error.to_string())?;
    let summary = with_progress_display(&plan.progress, || restore_member(&plan))
        .map_err(|error| error.to_string())?;
    println!(
        "restored revision {} ({} keys, compacted at {}) from {} into {} as member {id}",
        summary.current_revision,
        summary.live_keys.unwrap_or_default(),
        summary.compact_revision,
        plan.backup.display(),
        plan.data_dir.display(),
    );
    Ok(())
}

/// The smallest and largest `--cache-bytes`.
const MIN_CACHE_BYTES: u64 = 1024 * 1024;
const MAX_CACHE_BYTES: u64 = 64 * 1024 * 1024 * 1024;
/// How often the progress line is redrawn.
const PROGRESS_REDRAW: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs `work` while a thread draws `progress` on stderr, when stderr is a terminal that can redraw a line: records
/// and bytes checked, then written out of the checked totals.
fn with_progress_display<T>(progress: &RestoreProgress, work: impl FnOnce() -> T) -> T {
    if !revkv_tools::cli::draws_progress() {
        return work();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let bar = ProgressBar::new_spinner();
    std::thread::scope(|scope| {
        let drawer = scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                bar.set_message(progress_line(progress));
                bar.tick();
                std::thread::park_timeout(PROGRESS_REDRAW);
            }
            bar.finish_and_clear();
        });
        let outcome = work();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        drawer.thread().unpark();
        outcome
    })
}

fn progress_line(progress: &RestoreProgress) -> String {
    let (records, bytes) = (progress.records(), progress.bytes());
    match progress.phase() {
        RestorePhase::Checking => format!(
            "checking: {records} records, {} of keys and values",
            HumanBytes(bytes)
        ),
        RestorePhase::Writing => {
            let (total_records, total_bytes) = progress.checked_totals();
            format!(
                "writing: {records} of {total_records} records, {} of {}",
                HumanBytes(bytes),
                HumanBytes(total_bytes)
            )
        }
    }
}
