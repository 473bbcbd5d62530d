//! The `revkv` binary runs on jemalloc with the settings `src/allocator.rs` compiles in. jemalloc
//! takes them from a symbol whose name depends on how the crate builds it; a wrong name is
//! ignored silently and leaves jemalloc's defaults (ten seconds before freed memory goes back to
//! the kernel). The binary is asked to print jemalloc's statistics at exit, which list the options
//! in force: that only works when jemalloc is the allocator at all, and shows whether our settings
//! were read.
//!
//! A member's memory metrics are checked against the process itself: the allocator's resident
//! bytes lie within the process's RSS, the key index grows with the keys written, and the page
//! cache stays within its limit.

use crate::process_cluster;

use std::process::Command;

use process_cluster::{cluster_options, ProcessCluster};

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

/// The value of one sample (`name{labels}` exactly as exposed) in a metrics text.
fn sample(text: &str, series: &str) -> u64 {
    let line = text
        .lines()
        .find(|line| line.split(' ').next() == Some(series))
        .unwrap_or_else(|| panic!("{series} missing from:\n{text}"));
    line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
}

/// The process's resident set, from /proc, in bytes.
fn resident_bytes(process_id: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{process_id}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test]
async fn the_memory_metrics_follow_the_process_and_the_keys_written() {
    let cluster = ProcessCluster::start(
        1,
        cluster_options().with_flags(&["--state-cache-bytes", "1048576"]),
    )
    .await;
    let client = cluster.client(1);
    client.put_ok("warm-up", "x").await;
    let before = client.metrics_text().await;
    let value = "v".repeat(200);
    for number in 0..2000 {
        client
            .put_ok(&format!("memory/key-{number:05}"), &value)
            .await;
    }
    let after = client.metrics_text().await;
    let rss = resident_bytes(cluster.member(1).process_id().unwrap());

    let index_before = sample(&before, "revkv_memory_bytes{part=\"key_index\"}");
    let index_after = sample(&after, "revkv_memory_bytes{part=\"key_index\"}");
    assert!(
        index_after >= index_before + 2000 * "memory/key-00000".len() as u64,
        "2000 new keys must add at least their own bytes: {index_before} -> {index_after}"
    );
    let cache = sample(&after, "revkv_memory_bytes{part=\"state_cache\"}");
    let cache_limit = sample(&after, "revkv_memory_limit_bytes{part=\"state_cache\"}");
    assert_eq!(cache_limit, 1048576, "the limit is the flag's");
    assert!(
        cache > 0 && cache <= cache_limit,
        "cache {cache} of {cache_limit}"
    );
    assert!(sample(&after, "revkv_memory_limit_bytes{part=\"raft_log_tail\"}") > 0);

    let allocated = sample(&after, "revkv_allocator_bytes{stat=\"allocated\"}");
    let resident = sample(&after, "revkv_allocator_bytes{stat=\"resident\"}");
    assert!(
        allocated > index_after,
        "the index is allocated: {allocated} <= {index_after}"
    );
    assert!(
        resident >= allocated,
        "resident {resident} < allocated {allocated}"
    );
    assert!(
        resident <= rss,
        "jemalloc's resident {resident} is part of the RSS {rss}"
    );
}
