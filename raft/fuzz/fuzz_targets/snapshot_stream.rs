//! Snapshot streams arrive from the leader over the peer port (and, with issue 14, from backup
//! files), so any bytes may be offered to `MvccStore::import_snapshot`. It must never panic, and
//! an import that fails must change nothing: the store keeps its revision and its hash.
#![no_main]

use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use revkv_fuzz::sample_store;
use revkv_storage::MvccStore;

/// One store for the whole run (opening a redb file per input would be most of the work), kept
/// in a directory that lives as long as the process.
fn store() -> &'static Mutex<MvccStore> {
    static STORE: OnceLock<Mutex<MvccStore>> = OnceLock::new();
    STORE.get_or_init(|| {
        let directory = tempfile::tempdir().expect("a temporary directory").keep();
        Mutex::new(sample_store(&directory.join("state.redb")))
    })
}

fuzz_target!(|input: &[u8]| {
    let store = store().lock().expect("the store");
    let before = (
        store.current_revision().expect("revision"),
        store.hash(None).expect("hash"),
    );
    if store.import_snapshot(&mut &input[..]).is_err() {
        let after = (
            store.current_revision().expect("revision"),
            store.hash(None).expect("hash"),
        );
        assert_eq!(after, before, "a failed snapshot import changed the store");
    }
});
