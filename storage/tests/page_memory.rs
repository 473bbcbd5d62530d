//! The vendored redb's patch (storage/vendor/redb/PATCHED.md): a page held in redb's cache costs
//! the allocator the `revkv` binary runs on (jemalloc) about its own size. Upstream redb 4.4 kept
//! each page as one `Arc<[u8]>`, a 4,112-byte allocation for a 4,096-byte page, which jemalloc
//! serves from its 5,120-byte class: a quarter more memory than redb's own count
//! (`CacheStats::used_bytes`, which `revkv_memory_bytes{part="state_cache"}` reports). This is
//! its own test binary because it measures every allocation of the process.

use redb::{Database, ReadableDatabase, TableDefinition};
use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static GLOBAL_ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("pages");

/// Values this large take a leaf page each, so the cache holds about one page per value.
const VALUE_BYTES: usize = 3_000;
const VALUES: u64 = 4_000;

/// The allocator's bytes per byte redb counts in its cache. Upstream's layout measured 1.30 here
/// (21.7 MB allocated for 16.6 MB cached); with each page's bytes in an allocation of their own,
/// 1.05 (17.5 MB for 16.6 MB).
const MOST_ALLOCATED_PER_CACHED_BYTE: f64 = 1.10;

fn allocated_bytes() -> usize {
    epoch::advance().expect("jemalloc's statistics epoch advances");
    stats::allocated::read().expect("jemalloc reports its allocated bytes")
}

#[test]
fn a_cached_page_costs_the_allocator_about_its_own_size() {
    let directory = tempfile::tempdir().expect("a scratch directory");
    let database = Database::builder()
        .set_cache_size(256 << 20)
        .create(directory.path().join("pages.redb"))
        .expect("the database opens");
    let before = allocated_bytes();
    let value = vec![7u8; VALUE_BYTES];
    let write = database.begin_write().expect("a write transaction");
    {
        let mut table = write.open_table(TABLE).expect("the table opens");
        for key in 0..VALUES {
            table
                .insert(key, value.as_slice())
                .expect("the insert succeeds");
        }
    }
    write.commit().expect("the commit succeeds");
    // Read every value, so that every page is in the read cache.
    let read = database.begin_read().expect("a read transaction");
    let table = read.open_table(TABLE).expect("the table opens");
    let mut total = 0usize;
    for key in 0..VALUES {
        total += table
            .get(key)
            .expect("the read succeeds")
            .expect("the key exists")
            .value()
            .len();
    }
    assert_eq!(total, VALUE_BYTES * VALUES as usize);
    drop(table);
    drop(read);
    drop(value);

    let allocated = allocated_bytes() - before;
    let cached = database.cache_stats().used_bytes();
    assert!(
        cached >= VALUE_BYTES * VALUES as usize,
        "redb's cache holds {cached} bytes, less than the values written"
    );
    let per_cached_byte = allocated as f64 / cached as f64;
    eprintln!(
        "{allocated} bytes allocated for {cached} cached bytes: {per_cached_byte:.3} per byte"
    );
    assert!(
        per_cached_byte <= MOST_ALLOCATED_PER_CACHED_BYTE,
        "{allocated} bytes allocated for {cached} cached bytes: {per_cached_byte:.3} per byte"
    );
}
