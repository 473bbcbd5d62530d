//! The `revkv` binary runs on jemalloc with the settings `src/allocator.rs` compiles in. jemalloc
//! takes them from a symbol whose name depends on how the crate builds it; a wrong name is
//! ignored silently and leaves jemalloc's defaults (ten seconds before freed memory goes back to
//! the kernel). The binary is asked to print jemalloc's statistics at exit, which list the options
//! in force: that only works when jemalloc is the allocator at all, and shows whether our settings
//! were read.

use std::process::Command;

const REVKV_BINARY: &str = env!("CARGO_BIN_EXE_revkv");

/// Runs `revkv --version` with jemalloc's exit statistics turned on and returns what it printed on
/// standard error. `extra_settings` is appended to the environment's configuration string.
fn options_in_force(extra_settings: &str) -> String {
    let output = Command::new(REVKV_BINARY)
        .arg("--version")
        .env(
            "_RJEM_MALLOC_CONF",
            format!("stats_print:true{extra_settings}"),
        )
        .output()
        .expect("run revkv --version");
    assert!(
        output.status.success(),
        "revkv --version failed: {output:?}"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Fails unless jemalloc's statistics list `option` (e.g. `opt.dirty_decay_ms: 1000 `) as in force.
fn assert_in_force(statistics: &str, option: &str) {
    assert!(
        statistics.contains(option),
        "`{option}` is not in force; jemalloc's statistics:\n{statistics}"
    );
}

#[test]
fn the_binary_runs_on_jemalloc_with_the_compiled_in_settings() {
    let statistics = options_in_force("");
    assert_in_force(&statistics, "opt.background_thread: true");
    assert_in_force(&statistics, "opt.dirty_decay_ms: 1000 ");
    assert_in_force(&statistics, "opt.muzzy_decay_ms: 0 ");
}

#[test]
fn the_environment_overrides_the_compiled_in_settings() {
    // What the README promises an operator: `_RJEM_MALLOC_CONF` wins over the compiled-in string.
    let statistics = options_in_force(",dirty_decay_ms:5000");
    assert_in_force(&statistics, "opt.dirty_decay_ms: 5000 ");
}
