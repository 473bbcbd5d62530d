//! Measures how long the apply of one compaction holds the store's single writer, cleaning its
//! whole window inside the apply (as before issue 14's steps) against cleaning at most the
//! default batch and leaving the rest to steps, and how long the steps take in all.
//!
//! `cargo run --release -p revkv-storage --example compaction_stall -- KEYS VERSIONS_PER_KEY`
//! (default 50,000 keys × 10 versions = 500,000 history entries). Not a test: it prints numbers
//! for docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use revkv_storage::{
    ApplyEntry, EntryPayload, LogId, MvccStore, PutRequest, Request, StoreOptions,
    DEFAULT_COMPACTION_INLINE_ENTRIES,
};

/// Entries applied per batch while filling the store (the member's apply batches are this order).
const FILL_BATCH: usize = 1_000;

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

/// A store of `keys` keys written `versions` times each, with 100-byte values; answers it and
/// the next log index.
fn filled_store(
    directory: &std::path::Path,
    options: StoreOptions,
    keys: u64,
    versions: u64,
) -> (MvccStore, u64) {
    let store = MvccStore::open(directory.join("state.redb"), options).expect("open");
    let mut index = 1;
    let mut batch = Vec::with_capacity(FILL_BATCH);
    for version in 0..versions {
        for key in 0..keys {
            let put = PutRequest {
                key: format!("key/{key:08}").into_bytes(),
                value: vec![b'a' + (version % 26) as u8; 100],
                lease: 0,
                prev_kv: false,
            };
            batch.push(entry(index, Request::Put(put)));
            index += 1;
            if batch.len() == FILL_BATCH {
                store.apply_batch(&batch).expect("apply");
                batch.clear();
            }
        }
    }
    store.apply_batch(&batch).expect("apply");
    (store, index)
}

fn measure(label: &str, inline_entries: usize, keys: u64, versions: u64) {
    let directory = tempfile::tempdir().expect("temporary directory");
    let options = StoreOptions {
        compaction_inline_entries: inline_entries,
        ..StoreOptions::default()
    };
    let (store, index) = filled_store(directory.path(), options, keys, versions);
    let revision = store.current_revision().expect("revision");
    let started = Instant::now();
    store
        .apply_batch(&[entry(
            index,
            Request::Compact {
                revision: revision - 1,
            },
        )])
        .expect("compact");
    let apply = started.elapsed();
    let started = Instant::now();
    let mut steps = 0u64;
    let mut longest_step = Duration::ZERO;
    loop {
        let step_started = Instant::now();
        let more = store
            .compact_step(DEFAULT_COMPACTION_INLINE_ENTRIES)
            .expect("step");
        longest_step = longest_step.max(step_started.elapsed());
        steps += 1;
        if !more {
            break;
        }
    }
    println!(
        "{label}: compaction apply {:.1} ms; then {steps} steps in {:.1} ms (longest {:.2} ms)",
        apply.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64() * 1e3,
        longest_step.as_secs_f64() * 1e3
    );
}

fn main() {
    let mut arguments = std::env::args().skip(1).map(|text| text.parse::<u64>());
    let keys = arguments.next().and_then(Result::ok).unwrap_or(50_000);
    let versions = arguments.next().and_then(Result::ok).unwrap_or(10);
    println!(
        "{keys} keys x {versions} versions = {} history entries",
        keys * versions
    );
    measure("whole window inline", usize::MAX, keys, versions);
    measure(
        "bounded inline (default)",
        DEFAULT_COMPACTION_INLINE_ENTRIES,
        keys,
        versions,
    );
}
