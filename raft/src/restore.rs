//! Restoring a backup into a new member's data directory (`revkv snapshot restore`), like
//! `etcdutl snapshot restore`: the backup's history and leases become the state file, and the raft
//! state says the member belongs to a new cluster with the given membership. The backup is revkv's
//! own or an etcd snapshot (`restore_source.rs`), with every revision kept either way.
//!
//! How the new cluster starts without a bootstrap: the state file's applied state is the new
//! membership at a synthetic log id (term 0, the smallest member id, index 0: what `initialize`
//! on that member would write), and the raft log is empty with that log id purged. openraft reads
//! the membership from the state machine, sees a log that ends at the applied id, and counts the
//! member as initialised, so `revkv serve` skips its bootstrap; the first leader appends at
//! index one. Every member restored from one file with one `--initial-cluster` gets the same store, log
//! position, membership and cluster id, so they agree from the first election.
//!
//! Nothing is written for a bad backup: the whole file is read and checked before anything is
//! created, the data directory is built beside its destination under a temporary name, and it is
//! renamed into place only once complete and synced (and removed if anything fails).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use revkv_storage::{
    codec, LogOptions, MvccStore, RaftLogStore, RestoreTarget, SnapshotSummary, StoreOptions,
};

use crate::restore_progress::RestoreProgress;
use crate::restore_source::BackupSource;

use crate::types::alias::{LogId, StoredMembership};
use crate::types::{from_storage_log_id, MemberNode};

pub use crate::restore_error::RestoreError;

/// The state file's page cache while a restore writes it, unless told otherwise: with the key
/// index (about 100 bytes a key), what bounds a restore's memory.
pub const DEFAULT_RESTORE_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// What to restore where.
#[derive(Clone, Debug)]
pub struct RestorePlan {
    /// The backup file (`revkv ctl snapshot save`).
    pub backup: PathBuf,
    /// The new member's data directory: absent or empty.
    pub data_dir: PathBuf,
    /// The new member's id.
    pub member_id: u64,
    /// The new cluster's members and their peer URLs (as `revkv serve --initial-cluster`).
    pub members: BTreeMap<u64, MemberNode>,
    /// The state file's page cache while writing (`revkv snapshot restore --cache-bytes`).
    pub cache_bytes: usize,
    /// Where the restore counts how far it is.
    pub progress: Arc<RestoreProgress>,
}

impl RestorePlan {
    /// A plan with the default cache and a progress nobody watches.
    pub fn new(
        backup: PathBuf,
        data_dir: PathBuf,
        member_id: u64,
        members: BTreeMap<u64, MemberNode>,
    ) -> RestorePlan {
        RestorePlan {
            backup,
            data_dir,
            member_id,
            members,
            cache_bytes: DEFAULT_RESTORE_CACHE_BYTES,
            progress: Arc::default(),
        }
    }
}

/// Restores `plan.backup` into `plan.data_dir`; answers what the backup held.
pub fn restore_member(plan: &RestorePlan) -> Result<SnapshotSummary, RestoreError> {
    check_plan(plan)?;
    let source = BackupSource::open(&plan.backup)?;
    let backup = source.inspect(plan.progress.counts())?;
    plan.progress.start_writing();
    let (membership, log_id) = new_membership(&plan.members)?;
    let target = RestoreTarget::new(&backup, membership, log_id);
    let staging = staging_directory(&plan.data_dir)?;
    let built = build_data_dir(&source, &staging, &target, plan).and_then(|summary| {
        std::fs::rename(&staging, &plan.data_dir).map_err(io_error(&plan.data_dir))?;
        sync_directory(parent_of(&plan.data_dir))?;
        Ok(summary)
    });
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    built
}

fn check_plan(plan: &RestorePlan) -> Result<(), RestoreError> {
    if !plan.members.contains_key(&plan.member_id) {
        return Err(RestoreError::Refused(format!(
            "the initial cluster does not include this member ({})",
            plan.member_id
        )));
    }
    match std::fs::read_dir(&plan.data_dir).map(|mut entries| entries.next().is_some()) {
        Ok(true) => Err(RestoreError::Refused(format!(
            "{}: the data directory exists and is not empty; restore only into a new one",
            plan.data_dir.display()
        ))),
        Ok(false) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error(&plan.data_dir)(error)),
    }
}

/// The new cluster's membership as the state machine stores it, at the log id `initialize` on
/// the smallest member would give it.
fn new_membership(
    members: &BTreeMap<u64, MemberNode>,
) -> Result<(Vec<u8>, revkv_storage::LogId), RestoreError> {
    let first = *members
        .keys()
        .next()
        .ok_or_else(|| RestoreError::Refused("the initial cluster is empty".into()))?;
    let log_id = revkv_storage::LogId {
        term: 0,
        node_id: first,
        index: 0,
    };
    let voters: BTreeSet<u64> = members.keys().copied().collect();
    let membership = openraft::Membership::new(vec![voters], members.clone())
        .map_err(|error| RestoreError::Refused(format!("the initial cluster: {error}")))?;
    let raft_log_id: LogId = from_storage_log_id(log_id);
    let stored = StoredMembership::new(Some(raft_log_id), membership);
    let encoded = codec::encode(&stored)
        .map_err(|error| RestoreError::Refused(format!("cannot encode the membership: {error}")))?;
    Ok((encoded, log_id))
}

/// A new directory beside `data_dir` to build the member in.
fn staging_directory(data_dir: &Path) -> Result<PathBuf, RestoreError> {
    let name = data_dir
        .file_name()
        .ok_or_else(|| {
            RestoreError::Refused(format!("{}: not a directory name", data_dir.display()))
        })?
        .to_string_lossy();
    let staging = parent_of(data_dir).join(format!(".{name}.restoring-{}", std::process::id()));
    std::fs::create_dir_all(parent_of(data_dir)).map_err(io_error(parent_of(data_dir)))?;
    std::fs::create_dir(&staging).map_err(io_error(&staging))?;
    Ok(staging)
}

/// Writes the state file and the raft log of the new member into `staging`, durably.
fn build_data_dir(
    source: &BackupSource,
    staging: &Path,
    target: &RestoreTarget,
    plan: &RestorePlan,
) -> Result<SnapshotSummary, RestoreError> {
    let summary = {
        let options = StoreOptions {
            cache_bytes: plan.cache_bytes,
            ..StoreOptions::default()
        };
        let store = MvccStore::open(staging.join("state.redb"), options)?;
        source.import(&store, target, plan.progress.counts())?
    };
    let log = RaftLogStore::open(staging.join("raft-log"), LogOptions::default())?;
    let applied = target
        .applied
        .last_applied
        .ok_or_else(|| RestoreError::Refused("the restore target has no log id".into()))?;
    log.purge_through(applied)?;
    drop(log);
    sync_directory(&staging.join("raft-log"))?;
    sync_directory(staging)?;
    Ok(summary)
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

fn sync_directory(directory: &Path) -> Result<(), RestoreError> {
    File::open(directory)
        .and_then(|handle| handle.sync_all())
        .map_err(io_error(directory))
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> RestoreError + '_ {
    move |source| RestoreError::Io {
        file: path.to_path_buf(),
        source,
    }
}
