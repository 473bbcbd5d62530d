//! Does listing scale linearly? Pages through a large range with continue tokens and compares the
//! time with one read of the whole range, on a real redb file.
//!
//! The store holds `REVKV_PAGING_KEYS` keys (default 1,000,000) with 256-byte values, written in key
//! order. Each round times (1) one range read returning every key (the store's `max_range_keys` is
//! raised to allow it) and (2) paging through the same range `REVKV_PAGING_LIMIT` keys at a time
//! (default 1,000), following continue tokens to the end, and checks that both saw every key and the
//! same count. It prints each round and the ratio paging ÷ whole read (target: at most 3), then
//! how long reopening the store takes (the key index is built from the history at open).
//!
//! `cargo bench -p revkv-storage --bench paging` (takes about a minute for a million keys).

use std::time::{Duration, Instant};

use revkv_storage::{
    ApplyEntry, EntryPayload, KeyRange, Limits, LogId, MvccStore, PutRequest, RangeRequest,
    Request, StoreOptions,
};

const ROUNDS: usize = 3;
const FILL_BATCH: u64 = 1_000;

fn environment_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

fn key(number: u64) -> Vec<u8> {
    format!("list/{number:010}").into_bytes()
}

fn fill(store: &MvccStore, key_count: u64) {
    let value = vec![b'v'; 256];
    let mut batch = Vec::with_capacity(FILL_BATCH as usize);
    for number in 0..key_count {
        // One log entry per put; log indexes start at 1.
        let index = number + 1;
        batch.push(ApplyEntry {
            log_id: LogId {
                term: 1,
                node_id: 1,
                index,
            },
            payload: EntryPayload::Request(Request::Put(PutRequest {
                key: key(number),
                value: value.clone(),
                lease: 0,
                prev_kv: false,
            })),
        });
        if batch.len() as u64 == FILL_BATCH || number + 1 == key_count {
            for outcome in store.apply_batch(&batch).expect("fill") {
                outcome.result.expect("every fill put is applied");
            }
            batch.clear();
        }
    }
    store.flush().expect("flush the filled store");
}

fn read_whole(store: &MvccStore, key_count: u64) -> Duration {
    let started = Instant::now();
    let answer = store
        .range(&RangeRequest::of(KeyRange::prefix(b"list/".to_vec())))
        .expect("whole read");
    let elapsed = started.elapsed();
    assert_eq!(answer.response.kvs.len() as u64, key_count);
    assert_eq!(answer.response.count, key_count);
    elapsed
}

fn page_through(store: &MvccStore, key_count: u64, limit: u64) -> Duration {
    let started = Instant::now();
    let mut seen = 0u64;
    let mut token = None;
    loop {
        let request = RangeRequest {
            limit: Some(limit),
            continue_token: token.take(),
            ..RangeRequest::of(KeyRange::prefix(b"list/".to_vec()))
        };
        let answer = store.range(&request).expect("page");
        assert_eq!(
            answer.response.count,
            key_count - seen,
            "each page counts the keys from its start"
        );
        seen += answer.response.kvs.len() as u64;
        match answer.response.continue_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(seen, key_count);
    elapsed
}

fn main() {
    let key_count = environment_number("REVKV_PAGING_KEYS", 1_000_000);
    let limit = environment_number("REVKV_PAGING_LIMIT", 1_000);
    let directory = tempfile::tempdir().expect("temporary directory");
    let options = StoreOptions {
        limits: Limits {
            max_range_keys: key_count,
            ..Limits::default()
        },
        ..StoreOptions::default()
    };
    let store = MvccStore::open(directory.path().join("state.redb"), options).expect("open");
    let fill_started = Instant::now();
    fill(&store, key_count);
    println!(
        "paging: {key_count} keys written in {:.1} s; pages of {limit}",
        fill_started.elapsed().as_secs_f64()
    );
    let mut ratios = Vec::new();
    for round in 1..=ROUNDS {
        let whole = read_whole(&store, key_count);
        let paged = page_through(&store, key_count, limit);
        let ratio = paged.as_secs_f64() / whole.as_secs_f64();
        println!(
            "round {round}: whole range {:.3} s, {} pages {:.3} s, ratio {ratio:.2}",
            whole.as_secs_f64(),
            key_count.div_ceil(limit),
            paged.as_secs_f64()
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "paging: median ratio paged / whole {:.2} (target <= 3)",
        ratios[ROUNDS / 2]
    );
    time_reopen(store, &directory);
}

/// Opening a store builds its key index from the history (layout 4): how long that takes for
/// this store.
fn time_reopen(store: MvccStore, directory: &tempfile::TempDir) {
    drop(store);
    let started = Instant::now();
    let reopened = MvccStore::open(directory.path().join("state.redb"), StoreOptions::default())
        .expect("reopen");
    let (keys, versions) = reopened.key_index_sizes();
    println!(
        "reopen: {:.2} s to open the store and index {keys} keys ({versions} versions)",
        started.elapsed().as_secs_f64()
    );
}
