//! The process's memory allocator: jemalloc instead of glibc's malloc, for every subcommand,
//! and its totals in the member's metrics (`revkv_allocator_bytes`).
//!
//! Why: at 64 clients about a fifth of a member's CPU went to glibc's malloc and free, partly in
//! its arena lock, and its `malloc_consolidate` grew in the phases where a sustained write run
//! slowed by a quarter. In a 60 s sustained run of 64 clients, jemalloc wrote 21,800 instead of
//! 16,700 keys a second, with 62 instead of 82 µs of CPU per replicated write and the same RSS per
//! key written (docs/BENCHMARKS.md, "Link-time optimisation and jemalloc"). The library crates
//! leave the choice to the program that embeds them; only this binary sets it.
//!
//! The settings below return freed memory to the kernel within about a second (a background
//! thread does it, so no request pays for it), instead of jemalloc's default of ten seconds, so a
//! member's RSS follows its live data. `_RJEM_MALLOC_CONF` in the environment overrides them
//! (jemalloc's own syntax, e.g. `dirty_decay_ms:10000`).

#[global_allocator]
static GLOBAL_ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc reads its configuration from this symbol at its first allocation. tikv-jemallocator
/// builds jemalloc with the `_rjem_` prefix, hence the name; the test
/// `node/bin/tests/allocator.rs` fails if the symbol is not picked up.
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// Makes every scrape of `metrics` read jemalloc's totals into `revkv_allocator_bytes` first.
/// jemalloc caches its statistics until its epoch is advanced, so each scrape advances it.
pub fn report_to(metrics: &revkv_metrics::Metrics) -> Result<(), String> {
    let memory = metrics.memory.clone();
    metrics
        .add_before_scrape(move || match read_totals() {
            Ok(totals) => memory.observe_allocator(&totals),
            Err(error) => tracing::warn!(%error, "could not read jemalloc's statistics"),
        })
        .map_err(|error| format!("cannot report the allocator's statistics: {error}"))
}

/// jemalloc's totals now.
fn read_totals() -> Result<revkv_metrics::AllocatorObservation, tikv_jemalloc_ctl::Error> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance()?;
    Ok(revkv_metrics::AllocatorObservation {
        allocated: stats::allocated::read()? as u64,
        active: stats::active::read()? as u64,
        resident: stats::resident::read()? as u64,
        retained: stats::retained::read()? as u64,
    })
}
