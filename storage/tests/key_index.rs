//! The in-memory key index (layout 4) against what it must guarantee: a failed write leaves no
//! trace in it, a reopen rebuilds it from the file, and readers racing a writer that puts, deletes
//! and compacts always see one whole revision.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use revkv_storage::{
    DeleteRangeRequest, KeyRange, MvccStore, PutRequest, RangeRequest, ReadError, Request,
    StoreOptions, TxnOp, TxnRequest,
};
use support::{log_entry, put_request, TestStore};

fn all_keys(store: &MvccStore) -> Vec<Vec<u8>> {
    let read = store
        .range(&RangeRequest::of(KeyRange::prefix(Vec::new())))
        .expect("read everything");
    read.response.kvs.into_iter().map(|kv| kv.key).collect()
}

#[test]
fn a_batch_that_would_apply_an_entry_twice_leaves_nothing_in_the_index() {
    let mut test = TestStore::new();
    test.put("kept", "1");
    let index_sizes_before = test.store.key_index_sizes();
    // The second entry repeats a log index, which stops the member before the first one changes
    // anything: nothing of the batch may remain, in the file or in the index. (A batch that fails
    // half way, after changing the index, is `key_index_tests.rs`'s.)
    let batch = [
        log_entry(2, put_request("lost", "1")),
        log_entry(2, put_request("also-lost", "1")),
    ];
    crate::support::assert_apply_stops(&test.store, &batch, "an entry is never applied twice");
    assert_eq!(test.store.key_index_sizes(), index_sizes_before);
    assert_eq!(all_keys(&test.store), vec![b"kept".to_vec()]);
    assert_eq!(test.store.current_revision().unwrap(), 2);

    // Revision 3 is taken by another key, and reads see only it.
    let outcome = test
        .store
        .apply_batch(&[log_entry(2, put_request("next", "1"))]);
    assert_eq!(outcome.unwrap()[0].revision, 3);
    assert_eq!(
        all_keys(&test.store),
        vec![b"kept".to_vec(), b"next".to_vec()]
    );
    assert!(test.get_at("lost", 3).unwrap().is_none());
}

#[test]
fn a_reopened_store_rebuilds_the_index_from_its_history() {
    let mut test = TestStore::new();
    for number in 0..50 {
        test.put(&format!("k{number:02}"), "1");
    }
    test.put("k07", "2");
    test.delete(KeyRange::single("k13"));
    test.apply(Request::Compact { revision: 10 });
    test.store.finish_compaction(1_000).unwrap();
    let before = (
        all_keys(&test.store),
        test.store.key_index_sizes(),
        test.store.hash(None).unwrap(),
        test.store.stats().unwrap().bytes_in_use,
    );
    test.reopen(StoreOptions::default());
    let after = (
        all_keys(&test.store),
        test.store.key_index_sizes(),
        test.store.hash(None).unwrap(),
        test.store.stats().unwrap().bytes_in_use,
    );
    assert_eq!(before, after);
    assert_eq!(after.0.len(), 49, "k13 was deleted");
    assert_eq!(test.get("k07").unwrap().version, 2);
}

#[test]
fn bytes_in_use_follow_the_records_written_and_compacted_away() {
    let mut test = TestStore::new();
    assert_eq!(test.store.stats().unwrap().bytes_in_use, 0);
    let value = "v".repeat(1_000);
    for number in 0..20 {
        test.put(&format!("k{number:02}"), &value);
    }
    let written = test.store.stats().unwrap().bytes_in_use;
    // Each record holds its key and value plus a few bytes of framing and numbers.
    assert!((20 * 1_003..20 * 1_100).contains(&written), "{written}");

    // Overwriting every key doubles the records until a compaction removes the old versions.
    for number in 0..20 {
        test.put(&format!("k{number:02}"), &value);
    }
    let doubled = test.store.stats().unwrap().bytes_in_use;
    assert!(doubled > written * 19 / 10, "{doubled} after {written}");
    let revision = test.store.current_revision().unwrap();
    test.apply(Request::Compact { revision });
    test.store.finish_compaction(1_000).unwrap();
    let compacted = test.store.stats().unwrap();
    assert!(
        compacted.bytes_in_use.abs_diff(written) <= 20 * 2,
        "{compacted:?}"
    );
    assert!(compacted.bytes_in_use < compacted.file_bytes);
}

/// Each revision after the first `KEYS` moves one key of a window of `KEYS` live keys: a txn
/// deletes the oldest and puts the next. Every `COMPACT_EVERY` moves the writer compacts to the
/// revision before the last, so compaction always works right behind the readers.
const KEYS: usize = 20;
const MOVES: usize = 600;
const COMPACT_EVERY: usize = 7;

/// Every this many moves the writer waits until the reader has read again, so the two overlap
/// however the threads are scheduled.
const MOVES_BETWEEN_MEETINGS: usize = 25;

fn key(number: usize) -> Vec<u8> {
    format!("key-{number:06}").into_bytes()
}

fn window_move(oldest: usize) -> Request {
    Request::Txn(TxnRequest {
        compare: Vec::new(),
        success: vec![
            TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange::single(key(oldest)),
                prev_kv: false,
            }),
            TxnOp::Put(PutRequest {
                key: key(oldest + KEYS),
                value: b"v".to_vec(),
                lease: 0,
                prev_kv: false,
            }),
        ],
        failure: Vec::new(),
    })
}

/// What a read at `revision` must see: the window of keys that revision left.
fn window_at(revision: u64) -> Vec<Vec<u8>> {
    // Revision 1 is the empty store, revisions 2..=KEYS+1 put the first KEYS keys, and every
    // later revision moved the window by one.
    let revision = revision as usize;
    if revision <= KEYS + 1 {
        return (0..revision.saturating_sub(1)).map(key).collect();
    }
    let moved = revision - (KEYS + 1);
    (moved..moved + KEYS).map(key).collect()
}

fn keys_of(read: &revkv_storage::ReadResult) -> Vec<Vec<u8>> {
    read.response.kvs.iter().map(|kv| kv.key.clone()).collect()
}

/// Reads the current revision and one two revisions back until `writing` is cleared, checking
/// each against `window_at`; counts the reads of each kind.
fn read_while_writing(store: &MvccStore, writing: &AtomicBool, reads: &AtomicU64) -> u64 {
    let everything = RangeRequest::of(KeyRange::prefix(b"key-".to_vec()));
    let mut past_reads = 0;
    while writing.load(Ordering::Acquire) {
        let current = store
            .range(&everything)
            .expect("a read of the current revision always succeeds");
        assert_eq!(keys_of(&current), window_at(current.revision));
        let past = current.revision.saturating_sub(2).max(2);
        let request = RangeRequest {
            revision: Some(past),
            ..everything.clone()
        };
        match store.range(&request) {
            Ok(read) => {
                assert_eq!(keys_of(&read), window_at(past), "read at revision {past}");
                past_reads += 1;
            }
            Err(ReadError::Compacted { .. }) => {}
            Err(other) => panic!("a read at revision {past} failed: {other}"),
        }
        reads.fetch_add(1, Ordering::AcqRel);
    }
    past_reads
}

/// Waits until the reader has read at least once more than `seen`; false when the reader ended
/// (its failed check is then reported by `join`). Panics at the deadline.
fn wait_for_a_read(reads: &AtomicU64, seen: u64, reader: &JoinHandle<u64>) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = reads.load(Ordering::Acquire);
        if now > seen {
            return Some(now);
        }
        if reader.is_finished() {
            return None;
        }
        assert!(Instant::now() < deadline, "the reader stopped reading");
        std::thread::yield_now();
    }
}

#[test]
fn readers_racing_puts_deletes_and_compactions_see_whole_revisions() {
    let directory = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        compaction_inline_entries: 3,
        ..StoreOptions::default()
    };
    let store = Arc::new(MvccStore::open(directory.path().join("state.redb"), options).unwrap());
    let mut next_index = 0;
    let mut apply = |request: Request| {
        next_index += 1;
        store
            .apply_batch(&[log_entry(next_index, request)])
            .unwrap();
    };
    for number in 0..KEYS {
        apply(put_request(std::str::from_utf8(&key(number)).unwrap(), "v"));
    }
    let writing = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (store, writing, reads) =
            (Arc::clone(&store), Arc::clone(&writing), Arc::clone(&reads));
        std::thread::spawn(move || read_while_writing(&store, &writing, &reads))
    };
    let mut reads_seen = 0;
    for step in 0..MOVES {
        if step % MOVES_BETWEEN_MEETINGS == 0 {
            match wait_for_a_read(&reads, reads_seen, &reader) {
                Some(now) => reads_seen = now,
                None => break,
            }
        }
        apply(window_move(step));
        if step % COMPACT_EVERY == 0 {
            let revision = store.current_revision().unwrap() - 1;
            apply(Request::Compact { revision });
            // The cleaner's turn, as the member's background task would take it.
            store.compact_step(2).unwrap();
        }
    }
    writing.store(false, Ordering::Release);
    let past_reads = reader.join().expect("the reader saw only whole revisions");
    let current = store.current_revision().unwrap();
    assert_eq!(all_keys(&store), window_at(current));
    assert!(reads.load(Ordering::Acquire) >= (MOVES / MOVES_BETWEEN_MEETINGS) as u64);
    eprintln!("past reads that were not compacted: {past_reads}");
}
