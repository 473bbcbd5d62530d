//! The process's memory allocator: jemalloc instead of glibc's malloc, for every subcommand.
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
