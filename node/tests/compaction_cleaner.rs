//! The background compaction cleaner on a real store: after a compaction that cleaned nothing
//! inside its apply, the cleaner works through the window in steps until nothing is pending, and
//! stops when told to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use revkv_node::compaction_cleaner::{self, CleanerSettings};
use revkv_storage::{
    ApplyEntry, EntryPayload, LogId, MvccStore, PutRequest, Request, StoreOptions,
};
use tokio::sync::watch;

fn entry(index: u64, request: Request) -> ApplyEntry {
    ApplyEntry {
        log_id: LogId {
            term: 1,
            node_id: 1,
            index,
        },
        payload: EntryPayload::Request(request),
    }
}

#[tokio::test]
async fn the_cleaner_finishes_a_pending_window_in_steps() {
    let directory = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        compaction_inline_entries: 0,
        ..StoreOptions::default()
    };
    let store = Arc::new(MvccStore::open(directory.path().join("state.redb"), options).unwrap());
    let puts: Vec<ApplyEntry> = (1..=2_000u64)
        .map(|index| {
            let put = PutRequest {
                key: format!("k/{}", index % 10).into_bytes(),
                value: index.to_string().into_bytes(),
                lease: 0,
                prev_kv: false,
            };
            entry(index, Request::Put(put))
        })
        .collect();
    store.apply_batch(&puts).unwrap();
    let compact = entry(2_001, Request::Compact { revision: 1_990 });
    store.apply_batch(&[compact]).unwrap();
    let before = store.stats().unwrap().history_entries;
    assert!(store.compaction_pending());

    let (stop, stopped) = watch::channel(false);
    let settings = CleanerSettings {
        batch_entries: 64,
        pause_between_steps: Duration::from_millis(1),
        idle_poll: Duration::from_millis(5),
    };
    compaction_cleaner::spawn(Arc::clone(&store), settings, stopped);
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.compaction_pending() {
        assert!(Instant::now() < deadline, "the cleaner did not finish");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = store.stats().unwrap().history_entries;
    assert!(after < 30, "{before} entries before, {after} after");
    stop.send(true).unwrap();
}
