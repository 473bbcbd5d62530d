//! Criterion benchmarks of the storage layer on real redb files, to know what one member can do and
//! where its time goes.
//!
//! Every store and log lives in its own `tempfile::TempDir`; set `REVKV_BENCH_DIR` to put those
//! directories somewhere else (they must be on the disk you mean to measure). The groups:
//!
//! - `mvcc_apply_puts`: `MvccStore::apply_batch` of 1, 64 and 1024 puts of 256-byte values under
//!   distinct, scattered keys, each batch one log entry per put. `periodic_durable_commits` uses
//!   `StoreOptions::default()`: commits are non-durable (`Durability::None`) except one every
//!   `durable_commit_interval` (500 ms), which fsyncs everything since the previous one, so its cost
//!   is spread over the batches in between. `every_commit_durable` sets the interval to zero, so
//!   every batch fsyncs (batch of 64 only). Each case starts from an empty store that grows during
//!   the measurement.
//! - `mvcc_read_100k_keys`: reads on a store holding 100,000 live keys with 256-byte values, each
//!   written twice (200,000 revisions of history): a point read of a random key, a prefix range of
//!   100 keys, the first `limit = 100` page of all 100,000 keys (which, as in etcd, still counts every
//!   key in the range), and a point read and a 100-key prefix range at an old revision (the end of the
//!   first pass, 100,000 revisions ago), which go through the key index and the history table.
//! - `raft_log_durable_append`: `RaftLogStore::append` of 1, 64 and 1024 entries of 300 bytes; every
//!   append is one durable transaction.
//! - `disk_fdatasync`: overwriting one 4 KiB block and calling `File::sync_data`, the raw cost of one
//!   fsync on the same filesystem, to compare durable appends against.

use std::cell::OnceCell;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use revkv_storage::{
    ApplyEntry, ApplyOutcome, EntryPayload, KeyRange, LogId, MvccStore, PutRequest, RaftLogStore,
    RangeRequest, Request, StoreOptions,
};
use tempfile::TempDir;

/// Size of every value written by the MVCC benchmarks.
const VALUE_BYTES: usize = 256;

/// Size of every raft log entry appended by the log benchmarks.
const LOG_ENTRY_BYTES: usize = 300;

/// The read fixture has this many key groups ...
const READ_FIXTURE_GROUPS: u64 = 1_000;

/// ... of this many keys each, so one group's prefix selects exactly this many keys.
const READ_FIXTURE_KEYS_PER_GROUP: u64 = 100;

/// Total live keys in the read fixture.
const READ_FIXTURE_KEY_COUNT: u64 = READ_FIXTURE_GROUPS * READ_FIXTURE_KEYS_PER_GROUP;

/// Puts per `apply_batch` call while filling the read fixture.
const READ_FIXTURE_FILL_BATCH: u64 = 1_000;

/// How many precomputed random read requests the read benchmarks cycle through.
const PRECOMPUTED_RANDOM_READS: u64 = 8_192;

/// Every benchmark's log ids carry this term and leader node.
const BENCH_TERM: u64 = 1;
const BENCH_NODE_ID: u64 = 1;

/// A fresh temporary directory for one benchmark's files, under `REVKV_BENCH_DIR` when it is set.
fn fresh_benchmark_directory(purpose: &str) -> TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix(purpose);
    match std::env::var_os("REVKV_BENCH_DIR") {
        Some(parent) => builder
            .tempdir_in(parent)
            .expect("temporary directory under REVKV_BENCH_DIR"),
        None => builder.tempdir().expect("temporary directory"),
    }
}

/// A bijective 64-bit mix (the splitmix64 finaliser): distinct inputs give distinct, scattered
/// outputs, so it makes distinct keys in random order and cheap pseudo-random choices.
fn scatter(counter: u64) -> u64 {
    let mut mixed = counter.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    mixed ^ (mixed >> 31)
}

/// A `VALUE_BYTES`-long value whose bytes depend on `seed`.
fn value_for_seed(seed: u64) -> Vec<u8> {
    (0..VALUE_BYTES as u64)
        .flat_map(|word| scatter(seed ^ word).to_le_bytes())
        .take(VALUE_BYTES)
        .collect()
}

fn put_entry(log_index: u64, key: Vec<u8>, value: Vec<u8>) -> ApplyEntry {
    ApplyEntry {
        log_id: LogId {
            term: BENCH_TERM,
            node_id: BENCH_NODE_ID,
            index: log_index,
        },
        payload: EntryPayload::Request(Request::Put(PutRequest {
            key,
            value,
            lease: 0,
            prev_kv: false,
        })),
    }
}

/// Panics unless every entry of a batch was applied (a rejected put would make the numbers lie).
fn assert_every_entry_applied(outcomes: &[ApplyOutcome]) {
    for outcome in outcomes {
        if let Err(rejection) = &outcome.result {
            panic!("a benchmark put was rejected: {rejection}");
        }
    }
}

/// Hands out batches of puts at consecutive log indexes, each put under a key never used before.
struct DistinctPutBatches {
    next_log_index: u64,
    next_key_counter: u64,
}

impl DistinctPutBatches {
    fn starting_at_log_index_one() -> Self {
        DistinctPutBatches {
            next_log_index: 1,
            next_key_counter: 0,
        }
    }

    fn next_batch(&mut self, puts_per_batch: u64) -> Vec<ApplyEntry> {
        (0..puts_per_batch)
            .map(|_| {
                let key_counter = self.next_key_counter;
                let log_index = self.next_log_index;
                self.next_key_counter += 1;
                self.next_log_index += 1;
                let key = format!("apply/{:016x}", scatter(key_counter)).into_bytes();
                put_entry(log_index, key, value_for_seed(key_counter))
            })
            .collect()
    }
}

/// Measures one `apply_batch` case on a fresh store opened with `options`.
fn bench_apply_case(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    case_name: &str,
    options: StoreOptions,
    puts_per_batch: u64,
) {
    let directory = fresh_benchmark_directory("revkv-bench-apply-");
    let store = MvccStore::open(directory.path().join("state.redb"), options).expect("open store");
    let mut batches = DistinctPutBatches::starting_at_log_index_one();
    group.throughput(Throughput::Elements(puts_per_batch));
    group.bench_with_input(
        BenchmarkId::new(case_name, puts_per_batch),
        &puts_per_batch,
        |bencher, &puts_per_batch| {
            bencher.iter_batched(
                || batches.next_batch(puts_per_batch),
                |batch| {
                    let outcomes = store.apply_batch(&batch).expect("apply batch");
                    assert_every_entry_applied(&outcomes);
                    black_box(outcomes)
                },
                BatchSize::SmallInput,
            );
        },
    );
}

fn bench_mvcc_apply_puts(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("mvcc_apply_puts");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    for puts_per_batch in [1, 64, 1024] {
        bench_apply_case(
            &mut group,
            "periodic_durable_commits",
            StoreOptions::default(),
            puts_per_batch,
        );
    }
    let every_commit_durable = StoreOptions {
        durable_commit_interval: Duration::ZERO,
        ..StoreOptions::default()
    };
    bench_apply_case(&mut group, "every_commit_durable", every_commit_durable, 64);
    group.finish();
}

fn read_fixture_key(group_number: u64, key_in_group: u64) -> Vec<u8> {
    format!("read/{group_number:04}/{key_in_group:02}").into_bytes()
}

fn read_fixture_group_prefix(group_number: u64) -> Vec<u8> {
    format!("read/{group_number:04}/").into_bytes()
}

/// The store the read benchmarks read from, and the revision that ends its first write pass.
struct ReadFixture {
    _directory: TempDir,
    store: MvccStore,
    revision_after_first_pass: u64,
}

/// Writes every fixture key twice (two passes, each in batches of `READ_FIXTURE_FILL_BATCH` puts),
/// then makes the store durable.
fn build_read_fixture() -> ReadFixture {
    let directory = fresh_benchmark_directory("revkv-bench-read-");
    let store = MvccStore::open(directory.path().join("state.redb"), StoreOptions::default())
        .expect("open store");
    let mut next_log_index = 1;
    let mut revision_after_first_pass = 0;
    for pass in 0..2u64 {
        let mut pending_batch = Vec::with_capacity(READ_FIXTURE_FILL_BATCH as usize);
        for key_number in 0..READ_FIXTURE_KEY_COUNT {
            let key = read_fixture_key(
                key_number / READ_FIXTURE_KEYS_PER_GROUP,
                key_number % READ_FIXTURE_KEYS_PER_GROUP,
            );
            let value = value_for_seed(pass * READ_FIXTURE_KEY_COUNT + key_number);
            pending_batch.push(put_entry(next_log_index, key, value));
            next_log_index += 1;
            if pending_batch.len() as u64 == READ_FIXTURE_FILL_BATCH {
                let outcomes = store.apply_batch(&pending_batch).expect("fill batch");
                assert_every_entry_applied(&outcomes);
                pending_batch.clear();
            }
        }
        assert!(pending_batch.is_empty(), "the fill batch divides the keys");
        if pass == 0 {
            revision_after_first_pass = store.current_revision().expect("revision");
        }
    }
    store.flush().expect("flush the filled store");
    ReadFixture {
        _directory: directory,
        store,
        revision_after_first_pass,
    }
}

/// Checks once, outside any measurement, that every read the benchmarks time answers what its
/// name says.
fn verify_read_fixture(fixture: &ReadFixture) {
    let store = &fixture.store;
    let current = store.current_revision().expect("revision");
    assert_eq!(current, 1 + 2 * READ_FIXTURE_KEY_COUNT);
    assert_eq!(
        fixture.revision_after_first_pass,
        1 + READ_FIXTURE_KEY_COUNT
    );

    let point = store
        .range(&RangeRequest::of(KeyRange::single(read_fixture_key(7, 7))))
        .expect("point read");
    assert_eq!(point.response.kvs.len(), 1);
    assert_eq!(point.response.kvs[0].version, 2);
    assert_eq!(point.response.kvs[0].value.len(), VALUE_BYTES);

    let prefix = store
        .range(&RangeRequest::of(KeyRange::prefix(
            read_fixture_group_prefix(7),
        )))
        .expect("prefix read");
    assert_eq!(
        prefix.response.kvs.len() as u64,
        READ_FIXTURE_KEYS_PER_GROUP
    );
    assert!(!prefix.response.more);

    let first_page = store.range(&first_page_of_every_key()).expect("first page");
    assert_eq!(first_page.response.kvs.len(), 100);
    assert_eq!(first_page.response.count, READ_FIXTURE_KEY_COUNT);
    assert!(first_page.response.more && first_page.response.continue_token.is_some());

    let historical_point = store
        .range(&RangeRequest {
            revision: Some(fixture.revision_after_first_pass),
            ..RangeRequest::of(KeyRange::single(read_fixture_key(7, 7)))
        })
        .expect("historical point read");
    assert_eq!(historical_point.response.kvs.len(), 1);
    assert_eq!(historical_point.response.kvs[0].version, 1);

    let historical_prefix = store
        .range(&RangeRequest {
            revision: Some(fixture.revision_after_first_pass),
            ..RangeRequest::of(KeyRange::prefix(read_fixture_group_prefix(7)))
        })
        .expect("historical prefix read");
    assert_eq!(
        historical_prefix.response.kvs.len() as u64,
        READ_FIXTURE_KEYS_PER_GROUP
    );
    assert!(historical_prefix
        .response
        .kvs
        .iter()
        .all(|kv| kv.version == 1));
}

/// The first `limit = 100` page of every key in the fixture.
fn first_page_of_every_key() -> RangeRequest {
    RangeRequest {
        limit: Some(100),
        ..RangeRequest::of(KeyRange::prefix(b"read/".to_vec()))
    }
}

/// `PRECOMPUTED_RANDOM_READS` requests made by `request_for_random_number`, so that building a
/// request is not part of the measured read.
fn precomputed_random_requests(
    request_for_random_number: impl Fn(u64) -> RangeRequest,
) -> Vec<RangeRequest> {
    (0..PRECOMPUTED_RANDOM_READS)
        .map(|draw| request_for_random_number(scatter(draw ^ 0x5EED)))
        .collect()
}

/// The read fixture with every request the read benchmarks cycle through.
struct ReadBenchmarkInputs {
    fixture: ReadFixture,
    point_reads: Vec<RangeRequest>,
    prefix_reads: Vec<RangeRequest>,
    first_page_reads: Vec<RangeRequest>,
    historical_point_reads: Vec<RangeRequest>,
    historical_prefix_reads: Vec<RangeRequest>,
}

/// The same requests, reading at `revision` instead of the current revision.
fn at_revision(requests: &[RangeRequest], revision: u64) -> Vec<RangeRequest> {
    requests
        .iter()
        .map(|request| RangeRequest {
            revision: Some(revision),
            ..request.clone()
        })
        .collect()
}

fn build_read_benchmark_inputs() -> ReadBenchmarkInputs {
    let fixture = build_read_fixture();
    verify_read_fixture(&fixture);
    let point_reads = precomputed_random_requests(|random| {
        let key_number = random % READ_FIXTURE_KEY_COUNT;
        RangeRequest::of(KeyRange::single(read_fixture_key(
            key_number / READ_FIXTURE_KEYS_PER_GROUP,
            key_number % READ_FIXTURE_KEYS_PER_GROUP,
        )))
    });
    let prefix_reads = precomputed_random_requests(|random| {
        RangeRequest::of(KeyRange::prefix(read_fixture_group_prefix(
            random % READ_FIXTURE_GROUPS,
        )))
    });
    let old_revision = fixture.revision_after_first_pass;
    ReadBenchmarkInputs {
        historical_point_reads: at_revision(&point_reads, old_revision),
        historical_prefix_reads: at_revision(&prefix_reads, old_revision),
        first_page_reads: vec![first_page_of_every_key()],
        point_reads,
        prefix_reads,
        fixture,
    }
}

/// Benchmarks one read, cycling through the requests `requests_of` picks. The fixture is built on
/// first use, outside the measured loop, so a run filtered to other benchmarks never builds it.
fn bench_read_case(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    case_name: &str,
    lazily_built_inputs: &OnceCell<ReadBenchmarkInputs>,
    requests_of: fn(&ReadBenchmarkInputs) -> &[RangeRequest],
) {
    group.bench_function(case_name, |bencher| {
        let inputs = lazily_built_inputs.get_or_init(build_read_benchmark_inputs);
        let store = &inputs.fixture.store;
        let mut requests_in_a_cycle = requests_of(inputs).iter().cycle();
        bencher.iter(|| {
            let request = requests_in_a_cycle.next().expect("a non-empty cycle");
            black_box(store.range(request).expect("read"))
        });
    });
}

fn bench_mvcc_reads(criterion: &mut Criterion) {
    let lazily_built_inputs = OnceCell::new();
    let mut group = criterion.benchmark_group("mvcc_read_100k_keys");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    bench_read_case(
        &mut group,
        "point_read_random_key",
        &lazily_built_inputs,
        |inputs| &inputs.point_reads,
    );
    bench_read_case(
        &mut group,
        "prefix_range_100_keys",
        &lazily_built_inputs,
        |inputs| &inputs.prefix_reads,
    );
    bench_read_case(
        &mut group,
        "first_page_limit_100_of_100k_keys",
        &lazily_built_inputs,
        |inputs| &inputs.first_page_reads,
    );
    bench_read_case(
        &mut group,
        "historical_point_read_100k_revisions_ago",
        &lazily_built_inputs,
        |inputs| &inputs.historical_point_reads,
    );
    bench_read_case(
        &mut group,
        "historical_prefix_range_100_keys_100k_revisions_ago",
        &lazily_built_inputs,
        |inputs| &inputs.historical_prefix_reads,
    );
    group.finish();
}

fn bench_raft_log_durable_append(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("raft_log_durable_append");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    let entry_bytes: Vec<u8> = (0..LOG_ENTRY_BYTES as u64)
        .map(|byte| scatter(byte) as u8)
        .collect();
    for entries_per_append in [1u64, 64, 1024] {
        let directory = fresh_benchmark_directory("revkv-bench-log-");
        let log = RaftLogStore::open(
            directory.path().join("raft-log"),
            revkv_storage::LogOptions::default(),
        )
        .expect("open log");
        let mut next_log_index = 1u64;
        group.throughput(Throughput::Elements(entries_per_append));
        group.bench_with_input(
            BenchmarkId::new("entries_per_append", entries_per_append),
            &entries_per_append,
            |bencher, &entries_per_append| {
                bencher.iter(|| {
                    let first_index = next_log_index;
                    next_log_index += entries_per_append;
                    let indexes = first_index..first_index + entries_per_append;
                    log.append(indexes.map(|index| (index, entry_bytes.as_slice())))
                        .expect("append");
                });
            },
        );
    }
    group.finish();
}

fn bench_disk_fdatasync(criterion: &mut Criterion) {
    const BLOCK_BYTES: usize = 4096;
    let directory = fresh_benchmark_directory("revkv-bench-fsync-");
    let file: File = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(directory.path().join("fdatasync-probe"))
        .expect("open probe file");
    let block = vec![0x5Au8; BLOCK_BYTES];
    // Allocate the block once, so the measured loop overwrites it in place and each fdatasync
    // flushes data only, not a changed file size.
    file.write_all_at(&block, 0).expect("first write");
    file.sync_all().expect("first sync");

    let mut group = criterion.benchmark_group("disk_fdatasync");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(1));
    group.bench_function("overwrite_4k_then_sync_data", |bencher| {
        bencher.iter(|| {
            file.write_all_at(&block, 0).expect("write block");
            file.sync_data().expect("sync_data");
        });
    });
    group.finish();
}

criterion_group!(
    storage_benches,
    bench_disk_fdatasync,
    bench_raft_log_durable_append,
    bench_mvcc_apply_puts,
    bench_mvcc_reads
);
criterion_main!(storage_benches);
