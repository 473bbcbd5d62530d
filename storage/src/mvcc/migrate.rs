//! Upgrading a state file written in an older table layout to the current one, when it is opened.
//! Each step upgrades one layout to the next in one durable transaction, so a crash between steps
//! leaves a file of the intermediate layout, which the next open upgrades further.
//!
//! Layout 4 (issue 11) keeps the key index in memory, built from `history` at open
//! (`key_index.rs`); the step from layout 3 deletes the `key_index` table.
//!
//! Layout 3 (issue 13) adds the `leases` and `lease_keys` tables; the step from layout 2 creates
//! them empty. Before layout 3 a put's `lease` field was stored unchecked, so such keys keep the
//! field but are attached to no lease (see `leases.rs`).
//!
//! Layout 1 (wave 1) kept three tables: `live` (a second copy of every current value), `history`
//! and a `key_index` of (position, tombstone). Layout 2 drops `live` and widens the key index with
//! each version's metadata. `history` is the same in all layouts, so the upgrade from layout 1
//! drops both tables and recounts the live keys from an index built in memory, in one durable
//! transaction: a crash during the upgrade leaves the layout-1 file as it was, and the next open
//! upgrades it again. (The layout-2 file it leaves has no `key_index` table, which only the step
//! to layout 4 would have deleted.)

use std::path::Path;

use redb::{Database, Durability, TableDefinition};
use serde::Deserialize;

use crate::codec;
use crate::error::{corrupt, db_error, ReadError, StorageFailure};
use crate::file::META;
use crate::mvcc::key_index::{IndexHandle, KeyIndex, SharedKeyIndex};
use crate::mvcc::leases::open_write_lease_tables;
use crate::mvcc::tables::{load_state_record, save_state, StoreState, TableSet, HISTORY};
use crate::types::AppliedState;

/// The meta entry naming the table layout of a state file.
const LAYOUT_KEY: &str = "layout";

/// The layout this build writes and reads.
pub(crate) const CURRENT_LAYOUT: u8 = 4;

/// The layout with `history` and the wide `key_index`, but no lease tables.
const LAYOUT_2: u8 = 2;

/// Layout 2 plus the lease tables; its key index is a table.
const LAYOUT_3: u8 = 3;

/// A key-index value of layouts 2 and 3: (position, tombstone, create revision, version, lease).
type Layout3IndexValue = (u32, bool, u64, u64, i64);

/// The key index of layouts 2 and 3: (key, revision) -> `Layout3IndexValue`. Layout 4 deletes it.
const LAYOUT_3_KEY_INDEX: TableDefinition<(&[u8], u64), Layout3IndexValue> =
    TableDefinition::new("key_index");

/// Layout 1's table of current values, deleted by the upgrade.
const LAYOUT_1_LIVE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("live");

/// Layout 1's key index, which has the same name as layout 2's but narrower values.
const LAYOUT_1_KEY_INDEX: TableDefinition<(&[u8], u64), (u32, bool)> =
    TableDefinition::new("key_index");

/// Layout 1's `StoreState` record, which had no live-key count.
#[derive(Deserialize)]
struct Layout1StoreState {
    current_revision: u64,
    compact_revision: u64,
    applied: AppliedState,
}

/// Writes the current layout's marker into a new file's first transaction.
pub(crate) fn mark_current_layout(
    write: &redb::WriteTransaction,
    file: &Path,
) -> Result<(), StorageFailure> {
    mark_layout(write, file, CURRENT_LAYOUT)
}

fn mark_layout(
    write: &redb::WriteTransaction,
    file: &Path,
    layout: u8,
) -> Result<(), StorageFailure> {
    let mut meta = write.open_table(META).map_err(db_error(file))?;
    let bytes = codec::encode(&layout).map_err(corrupt(file))?;
    meta.insert(LAYOUT_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}

/// Upgrades an opened state file to the current layout if it is older, one layout at a time;
/// refuses a newer one.
pub(crate) fn upgrade_if_needed(database: &Database, file: &Path) -> Result<(), StorageFailure> {
    // Every step raises the layout by one, so this many steps always reach the current layout.
    for _step in 0..CURRENT_LAYOUT {
        match read_layout(database, file)? {
            Some(CURRENT_LAYOUT) => return Ok(()),
            None => upgrade_from_layout_1(database, file)?,
            Some(LAYOUT_2) => upgrade_from_layout_2(database, file)?,
            Some(LAYOUT_3) => upgrade_from_layout_3(database, file)?,
            Some(other) => {
                return Err(StorageFailure::Corrupt {
                    file: file.to_path_buf(),
                    detail: format!(
                        "the state file has table layout {other}; this build reads layouts 1 to \
                         {CURRENT_LAYOUT} (was it written by a newer revkv?)"
                    ),
                })
            }
        }
    }
    match read_layout(database, file)? {
        Some(CURRENT_LAYOUT) => Ok(()),
        other => Err(StorageFailure::Invariant(format!(
            "upgrading the state file ended at layout {other:?}, not {CURRENT_LAYOUT}"
        ))),
    }
}

/// Layout 2 to 3: create the empty lease tables.
fn upgrade_from_layout_2(database: &Database, file: &Path) -> Result<(), StorageFailure> {
    tracing::info!(file = %file.display(), "upgrading the state file from table layout 2 to 3");
    let mut write = database.begin_write().map_err(db_error(file))?;
    write
        .set_durability(Durability::Immediate)
        .map_err(db_error(file))?;
    open_write_lease_tables(&write, file)?;
    mark_layout(&write, file, LAYOUT_3)?;
    write.commit().map_err(db_error(file))
}

/// Layout 3 to 4: delete the `key_index` table (the index is built in memory at every open).
fn upgrade_from_layout_3(database: &Database, file: &Path) -> Result<(), StorageFailure> {
    tracing::info!(file = %file.display(), "upgrading the state file from table layout 3 to 4");
    let mut write = database.begin_write().map_err(db_error(file))?;
    write
        .set_durability(Durability::Immediate)
        .map_err(db_error(file))?;
    write
        .delete_table(LAYOUT_3_KEY_INDEX)
        .map_err(db_error(file))?;
    mark_layout(&write, file, CURRENT_LAYOUT)?;
    write.commit().map_err(db_error(file))
}

/// The layout marker; `None` for a layout-1 file, which had none.
fn read_layout(database: &Database, file: &Path) -> Result<Option<u8>, StorageFailure> {
    use redb::ReadableDatabase;
    let read = database.begin_read().map_err(db_error(file))?;
    let meta = read.open_table(META).map_err(db_error(file))?;
    let layout = meta.get(LAYOUT_KEY).map_err(db_error(file))?;
    layout
        .map(|bytes| codec::decode::<u8>(bytes.value()).map_err(corrupt(file)))
        .transpose()
}

fn upgrade_from_layout_1(database: &Database, file: &Path) -> Result<(), StorageFailure> {
    tracing::info!(file = %file.display(), "upgrading the state file from table layout 1 to 2");
    let mut write = database.begin_write().map_err(db_error(file))?;
    write
        .set_durability(Durability::Immediate)
        .map_err(db_error(file))?;
    write.delete_table(LAYOUT_1_LIVE).map_err(db_error(file))?;
    write
        .delete_table(LAYOUT_1_KEY_INDEX)
        .map_err(db_error(file))?;
    {
        let history = write.open_table(HISTORY).map_err(db_error(file))?;
        let old_state = read_layout_1_state(&write, file)?;
        let index = KeyIndex::build(&history, file, old_state.compact_revision)?;
        let shared = SharedKeyIndex::new(index);
        let tables = TableSet {
            file,
            history,
            index: IndexHandle::writer(&shared),
        };
        let state = StoreState {
            live_keys: tables
                .count_live_keys(old_state.current_revision)
                .map_err(ReadError::into_failure)?,
            current_revision: old_state.current_revision,
            compact_revision: old_state.compact_revision,
            applied: old_state.applied,
        };
        let mut meta = write.open_table(META).map_err(db_error(file))?;
        save_state(&mut meta, file, &state)?;
    }
    mark_layout(&write, file, LAYOUT_2)?;
    write.commit().map_err(db_error(file))
}

fn read_layout_1_state(
    write: &redb::WriteTransaction,
    file: &Path,
) -> Result<Layout1StoreState, StorageFailure> {
    let meta = write.open_table(META).map_err(db_error(file))?;
    load_state_record(&meta, file)
}

#[cfg(test)]
mod tests {
    //! Builds a layout-1 file by hand, table by table, as wave 1 wrote it, and opens it.

    use serde::Serialize;

    use super::*;
    use crate::codec::FileMarker;
    use crate::codec::VersionRecord;
    use crate::file::FILE_KIND_KEY;
    use crate::mvcc::tables::STATE_KEY;
    use crate::mvcc::test_support::apply;
    use crate::mvcc::{MvccStore, StoreOptions};
    use crate::types::{KeyRange, RangeRequest};

    #[derive(Serialize)]
    struct Layout1State {
        current_revision: u64,
        compact_revision: u64,
        applied: AppliedState,
    }

    fn version(key: &str, value: &str, create_revision: u64, version: u64) -> VersionRecord {
        VersionRecord {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            create_revision,
            version,
            lease: 0,
            tombstone: false,
        }
    }

    fn tombstone(key: &str) -> VersionRecord {
        VersionRecord {
            key: key.as_bytes().to_vec(),
            value: Vec::new(),
            create_revision: 0,
            version: 0,
            lease: 0,
            tombstone: true,
        }
    }

    /// Revision 2 puts a=1, 3 puts b=1, 4 puts a=2, 5 deletes b, 6 puts c=1.
    fn write_layout_1_file(path: &Path) {
        let history = [
            (2, version("a", "1", 2, 1)),
            (3, version("b", "1", 3, 1)),
            (4, version("a", "2", 2, 2)),
            (5, tombstone("b")),
            (6, version("c", "1", 6, 1)),
        ];
        let database = Database::create(path).unwrap();
        let write = database.begin_write().unwrap();
        {
            let mut meta = write.open_table(META).unwrap();
            let marker = codec::encode(&FileMarker {
                kind: "state".into(),
            })
            .unwrap();
            meta.insert(FILE_KIND_KEY, marker.as_slice()).unwrap();
            let state = codec::encode(&Layout1State {
                current_revision: 6,
                compact_revision: 0,
                applied: AppliedState::default(),
            })
            .unwrap();
            meta.insert(STATE_KEY, state.as_slice()).unwrap();
            let mut history_table = write.open_table(HISTORY).unwrap();
            let mut index = write.open_table(LAYOUT_1_KEY_INDEX).unwrap();
            for (revision, record) in &history {
                let bytes = codec::encode(record).unwrap();
                history_table
                    .insert((*revision, 0u32), bytes.as_slice())
                    .unwrap();
                index
                    .insert((record.key.as_slice(), *revision), (0u32, record.tombstone))
                    .unwrap();
            }
            let mut live = write.open_table(LAYOUT_1_LIVE).unwrap();
            live.insert(b"a".as_slice(), b"layout-1 live record".as_slice())
                .unwrap();
        }
        write.commit().unwrap();
    }

    fn values_at(store: &MvccStore, revision: Option<u64>) -> Vec<(String, String, u64)> {
        let request = RangeRequest {
            revision,
            ..RangeRequest::of(KeyRange::prefix(Vec::new()))
        };
        let read = store.range(&request).unwrap();
        read.response
            .kvs
            .into_iter()
            .map(|kv| {
                let key = String::from_utf8(kv.key).unwrap();
                (key, String::from_utf8(kv.value).unwrap(), kv.version)
            })
            .collect()
    }

    #[test]
    fn a_layout_1_file_is_upgraded_on_open_and_reads_the_same_at_every_revision() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("state.redb");
        write_layout_1_file(&path);

        let store = MvccStore::open(&path, StoreOptions::default()).unwrap();
        let stats = store.stats().unwrap();
        assert_eq!(stats.current_revision, 6);
        assert_eq!(stats.live_keys, 2, "a and c are live, b was deleted");
        let expect = |rows: &[(&str, &str, u64)]| -> Vec<(String, String, u64)> {
            rows.iter()
                .map(|(k, v, n)| (k.to_string(), v.to_string(), *n))
                .collect()
        };
        assert_eq!(
            values_at(&store, None),
            expect(&[("a", "2", 2), ("c", "1", 1)])
        );
        assert_eq!(
            values_at(&store, Some(3)),
            expect(&[("a", "1", 1), ("b", "1", 1)])
        );
        assert_eq!(values_at(&store, Some(5)), expect(&[("a", "2", 2)]));
        drop(store);

        // The upgrade is durable and happens once: the file now says layout 2 and has no `live`.
        let database = Database::create(&path).unwrap();
        assert_eq!(read_layout(&database, &path).unwrap(), Some(CURRENT_LAYOUT));
        let read = redb::ReadableDatabase::begin_read(&database).unwrap();
        assert!(read.open_table(LAYOUT_1_LIVE).is_err());
        drop(read);
        drop(database);
        let reopened = MvccStore::open(&path, StoreOptions::default()).unwrap();
        assert_eq!(reopened.stats().unwrap().live_keys, 2);
        assert!(
            reopened.leases().unwrap().is_empty(),
            "the upgrade went on to layout 3, which has the lease tables"
        );
    }

    /// Turns a fresh file into a layout-2 file: no lease tables, the marker at 2, and a key "b"
    /// written with lease 7 unchecked at revision 3, as layout 2 allowed.
    fn write_layout_2_file(path: &Path) {
        let store = MvccStore::open(path, StoreOptions::default()).unwrap();
        apply(
            &store,
            1,
            crate::types::Request::Put(crate::types::PutRequest {
                key: b"a".to_vec(),
                value: b"1".to_vec(),
                lease: 0,
                prev_kv: false,
            }),
        );
        drop(store);
        let database = Database::create(path).unwrap();
        let write = database.begin_write().unwrap();
        write.delete_table(crate::mvcc::tables::LEASES).unwrap();
        write.delete_table(crate::mvcc::tables::LEASE_KEYS).unwrap();
        {
            // Layouts 2 and 3 kept the key index as a table, one entry per history entry.
            let mut history = write.open_table(HISTORY).unwrap();
            let mut index = write.open_table(LAYOUT_3_KEY_INDEX).unwrap();
            let a = version("a", "1", 2, 1);
            let b = VersionRecord {
                lease: 7,
                ..version("b", "1", 3, 1)
            };
            for (revision, record) in [(2, &a), (3, &b)] {
                let bytes = codec::encode(record).unwrap();
                history.insert((revision, 0u32), bytes.as_slice()).unwrap();
                let entry = (0u32, false, record.create_revision, 1u64, record.lease);
                index
                    .insert((record.key.as_slice(), revision), entry)
                    .unwrap();
            }
            let mut meta = write.open_table(META).unwrap();
            let mut state = crate::mvcc::tables::load_state(&meta, path).unwrap();
            state.current_revision = 3;
            state.live_keys = 2;
            save_state(&mut meta, path, &state).unwrap();
        }
        mark_layout(&write, path, LAYOUT_2).unwrap();
        write.commit().unwrap();
    }

    #[test]
    fn a_layout_2_file_gets_empty_lease_tables_and_its_unchecked_lease_fields_attach_to_nothing() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("state.redb");
        write_layout_2_file(&path);

        let store = MvccStore::open(&path, StoreOptions::default()).unwrap();
        assert!(store.leases().unwrap().is_empty());
        assert_eq!(values_at(&store, None).len(), 2);
        let b = store
            .range(&RangeRequest::of(KeyRange::single("b")))
            .unwrap();
        assert_eq!(b.response.kvs[0].lease, 7, "the stored field is kept");
        let grant = crate::types::Request::LeaseGrant {
            id: 7,
            ttl_seconds: 10,
        };
        assert!(apply(&store, 2, grant).result.is_ok());
        assert!(store.lease_keys(7).unwrap().is_empty());
        let revoked = apply(&store, 3, crate::types::Request::LeaseRevoke { id: 7 });
        assert_eq!(
            revoked.revision, 3,
            "nothing was attached, so nothing is deleted"
        );
        assert_eq!(values_at(&store, None).len(), 2);
        drop(store);
        let database = Database::create(&path).unwrap();
        assert_eq!(read_layout(&database, &path).unwrap(), Some(CURRENT_LAYOUT));
        let read = redb::ReadableDatabase::begin_read(&database).unwrap();
        assert!(
            read.open_table(LAYOUT_3_KEY_INDEX).is_err(),
            "layout 4 keeps the key index in memory; the table is gone"
        );
    }

    #[test]
    fn a_file_from_a_newer_layout_is_refused_with_a_clear_error() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("state.redb");
        drop(MvccStore::open(&path, StoreOptions::default()).unwrap());
        let database = Database::create(&path).unwrap();
        let write = database.begin_write().unwrap();
        {
            let mut meta = write.open_table(META).unwrap();
            let bytes = codec::encode(&(CURRENT_LAYOUT + 1)).unwrap();
            meta.insert(LAYOUT_KEY, bytes.as_slice()).unwrap();
        }
        write.commit().unwrap();
        drop(database);
        let error = MvccStore::open(&path, StoreOptions::default())
            .err()
            .expect("a newer layout must be refused");
        let newer = format!("layout {}", CURRENT_LAYOUT + 1);
        assert!(
            error.to_string().contains(&newer),
            "unexpected error: {error}"
        );
    }
}
