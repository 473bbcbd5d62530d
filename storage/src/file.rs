//! Opening a revkv redb file: create it when new, and refuse foreign or mismatched files clearly.
//!
//! Every revkv redb file has a `meta` table whose `file_kind` entry names what the file is (today
//! only "state": the raft log moved to segment files, `log_store/`). A new or empty file is initialised with that marker in its first durable commit; an
//! existing file without it, or with another kind, is refused with an error naming the file.

use std::path::Path;

use redb::backends::FileBackend;
use redb::{Database, Durability, ReadableDatabase, TableDefinition, TableHandle};

use crate::codec::{self, FileMarker};
use crate::disk_faults::{DiskFaults, FaultableFile};
use crate::error::{corrupt, db_error, OpenError, StorageFailure};

/// The metadata table every revkv file has: short names to versioned records.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

pub(crate) const FILE_KIND_KEY: &str = "file_kind";

/// Opens (or creates) the file at `path` as a revkv file of `kind`.
///
/// `cache_bytes` sizes redb's page cache. `initialise` runs inside the first write transaction of a
/// new file, to create the tables and initial records the kind needs. Every read, write and fsync
/// of the file passes `faults` (disarmed unless a test arms it).
pub(crate) fn open_revkv_file(
    path: &Path,
    kind: &'static str,
    cache_bytes: usize,
    faults: &DiskFaults,
    initialise: impl FnOnce(&redb::WriteTransaction) -> Result<(), StorageFailure>,
) -> Result<Database, OpenError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(crate::error::io_error(path))?;
    let backend = FileBackend::new(file).map_err(|error| classify_open_error(path, kind, error))?;
    let backend = FaultableFile::new(backend, path, faults.clone());
    // redb's debug builds walk every page while opening and panic on a damaged one (its
    // `mark_allocated_page_for_debug`); release builds do not, and `verify_integrity` below refuses
    // the file. Either way a damaged file must be an error naming it, never a panic.
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Database::builder()
            .set_cache_size(cache_bytes)
            .create_with_backend(backend)
    }))
    .map_err(|_| StorageFailure::Corrupt {
        file: path.to_path_buf(),
        detail: "redb panicked while opening it (a damaged page)".to_string(),
    })?;
    let mut database = opened.map_err(|error| classify_open_error(path, kind, error))?;
    verify_integrity(&mut database, path, kind)?;
    match read_marker(&database, path, kind)? {
        Some(marker) if marker.kind == kind => Ok(database),
        Some(marker) => Err(OpenError::ForeignFile {
            file: path.to_path_buf(),
            expected: kind,
            detail: format!("it is a revkv {} file", marker.kind),
        }),
        None => {
            initialise_new_file(&database, path, kind, initialise)?;
            Ok(database)
        }
    }
}

/// Reads every page of the file and checks its checksum, so a damaged file is refused here, naming
/// the file, rather than found by a read later (where redb may panic on a damaged page). redb's own
/// open only checks a file that was not closed cleanly.
fn verify_integrity(
    database: &mut Database,
    path: &Path,
    kind: &'static str,
) -> Result<(), OpenError> {
    let started = std::time::Instant::now();
    match database.check_integrity() {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            file = %path.display(),
            "the file failed redb's integrity check and redb repaired it to its last intact commit"
        ),
        Err(error) => return Err(classify_open_error(path, kind, error)),
    }
    tracing::debug!(file = %path.display(), elapsed = ?started.elapsed(), "integrity checked");
    Ok(())
}

/// Reads the marker; `None` means the file holds no tables at all (a new file).
fn read_marker(
    database: &Database,
    path: &Path,
    kind: &'static str,
) -> Result<Option<FileMarker>, OpenError> {
    let read = database.begin_read().map_err(db_error(path))?;
    let table_names: Vec<String> = read
        .list_tables()
        .map_err(db_error(path))?
        .map(|handle| handle.name().to_string())
        .collect();
    if table_names.is_empty() {
        return Ok(None);
    }
    let foreign = |detail: String| OpenError::ForeignFile {
        file: path.to_path_buf(),
        expected: kind,
        detail,
    };
    if !table_names.iter().any(|name| name == META.name()) {
        return Err(foreign(format!(
            "it has tables {table_names:?} but no revkv meta table"
        )));
    }
    let meta = read.open_table(META).map_err(|error| match error {
        // Someone else's table called "meta": not one of ours.
        redb::TableError::TableTypeMismatch { .. } => {
            foreign(format!("its meta table is not revkv's: {error}"))
        }
        other => db_error(path)(other).into(),
    })?;
    let marker = meta
        .get(FILE_KIND_KEY)
        .map_err(db_error(path))?
        .ok_or_else(|| foreign("its meta table has no file_kind marker".into()))?;
    let marker = codec::decode(marker.value()).map_err(corrupt(path))?;
    Ok(Some(marker))
}

/// Tells a file that is not a redb database at all (foreign) from one that is damaged (corrupt) and
/// from a failure to open a good file (in use elsewhere, missing directory, disk error).
fn classify_open_error(path: &Path, kind: &'static str, error: redb::DatabaseError) -> OpenError {
    match error {
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::InvalidData =>
        {
            OpenError::ForeignFile {
                file: path.to_path_buf(),
                expected: kind,
                detail: format!("it is not a redb database: {io}"),
            }
        }
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(detail)) => {
            OpenError::Storage(StorageFailure::Corrupt {
                file: path.to_path_buf(),
                detail,
            })
        }
        other => db_error(path)(other).into(),
    }
}

fn initialise_new_file(
    database: &Database,
    path: &Path,
    kind: &'static str,
    initialise: impl FnOnce(&redb::WriteTransaction) -> Result<(), StorageFailure>,
) -> Result<(), StorageFailure> {
    let mut write = database.begin_write().map_err(db_error(path))?;
    write
        .set_durability(Durability::Immediate)
        .map_err(db_error(path))?;
    {
        let mut meta = write.open_table(META).map_err(db_error(path))?;
        let marker = FileMarker { kind: kind.into() };
        let bytes = codec::encode(&marker).map_err(corrupt(path))?;
        meta.insert(FILE_KIND_KEY, bytes.as_slice())
            .map_err(db_error(path))?;
    }
    initialise(&write)?;
    write.commit().map_err(db_error(path))
}
