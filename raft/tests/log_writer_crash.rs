//! A member's raft log killed with SIGKILL while appends are in flight: every append whose flush
//! callback fired is in the log after a restart, and the log is contiguous.
//!
//! The log storage answers `append` before the entries are durable and fires the flush callback
//! later, from its writer thread. A bug that fired the callback before the entries reached the file
//! (or fired callbacks out of order) would let openraft count an entry toward a quorum that a crash
//! then loses. This test re-executes its own binary as a child that keeps up to 64 appends in flight
//! and reports `FLUSHED <index>` when each callback fires; the parent kills it mid-stream, reopens
//! the log and checks every reported entry. It runs twice: as a leader's log (every append through
//! the writer thread) and as a follower's (appends of another leader's entries written on the
//! calling task when the thread is idle, `LogStorage::with_inline_follower_appends`).
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use revkv_raft::types::alias::{Entry, LeaderId, LogId};
use revkv_raft::{ClientRequest, LogStorage, TypeConfig};
use revkv_storage::{LogOptions, MvccStore, PutRequest, RaftLogStore, Request, StoreOptions};

const CHILD_TEST_NAME: &str = "crash_child_appender";
const CHILD_DATA_DIR_ENV: &str = "REVKV_LOG_WRITER_CRASH_CHILD_DATA_DIR";
/// Set (to anything) when the child's log is a follower's.
const CHILD_AS_FOLLOWER_ENV: &str = "REVKV_LOG_WRITER_CRASH_CHILD_AS_FOLLOWER";
/// The id of the member whose log the follower's runs are, not the entries' leader (member 1).
const FOLLOWER_ID: u64 = 2;
const CHILD_REPORT_MARKER: &str = "REVKV-LOG-WRITER-CHILD";
/// Appends the child keeps in flight (answered by `append`, callback not yet fired).
const IN_FLIGHT: usize = 64;
/// A child that is never killed stops by itself after this many entries.
const CHILD_SAFETY_CAP: u64 = 200_000;
/// The parent kills the child after this many reported flushes.
const KILL_AFTER_FLUSHED: usize = 3_000;

/// The child test's full name as the test binary lists it (`--exact` needs it): its module path
/// below the binary's root, then its own name.
fn child_test_path() -> String {
    match module_path!().split_once("::") {
        Some((_binary, module)) => format!("{module}::{CHILD_TEST_NAME}"),
        None => CHILD_TEST_NAME.to_string(),
    }
}

fn entry(index: u64) -> Entry {
    let request = ClientRequest(Request::Put(PutRequest {
        key: format!("key/{index}").into_bytes(),
        value: index.to_le_bytes().to_vec(),
        lease: 0,
        prev_kv: false,
    }));
    Entry::new_normal(
        LogId::new(
            LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        ),
        request,
    )
}

fn open_storage(data_dir: &Path, as_follower: bool) -> (Arc<RaftLogStore>, LogStorage) {
    let log = Arc::new(
        RaftLogStore::open(data_dir.join("raft-log"), LogOptions::default()).expect("open log"),
    );
    let state = Arc::new(
        MvccStore::open(data_dir.join("state.redb"), StoreOptions::default()).expect("open state"),
    );
    let storage = LogStorage::new(log.clone(), state, Default::default(), Default::default())
        .expect("start the log writer");
    if as_follower {
        return (log, storage.with_inline_follower_appends(FOLLOWER_ID));
    }
    (log, storage)
}

#[test]
fn crash_child_appender() {
    let Some(data_dir) = std::env::var_os(CHILD_DATA_DIR_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let as_follower = std::env::var_os(CHILD_AS_FOLLOWER_ENV).is_some();
    runtime.block_on(append_until_killed(Path::new(&data_dir), as_follower));
    panic!("the child appender was never killed");
}

async fn append_until_killed(data_dir: &Path, as_follower: bool) {
    let (_log, mut storage) = open_storage(data_dir, as_follower);
    println!();
    let (report, mut reports) = tokio::sync::mpsc::unbounded_channel::<u64>();
    // One task prints reports in the order callbacks fire.
    let printer = tokio::spawn(async move {
        while let Some(index) = reports.recv().await {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{CHILD_REPORT_MARKER} FLUSHED {index}").expect("report");
            stdout.flush().expect("report");
        }
    });
    let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    for index in 1..=CHILD_SAFETY_CAP {
        let permit = permits.clone().acquire_owned().await.expect("permit");
        let (flushed, on_flushed) = TypeConfig::oneshot();
        storage
            .append([entry(index)], IOFlushed::<TypeConfig>::signal(flushed))
            .await
            .expect("append is accepted");
        let report = report.clone();
        tokio::spawn(async move {
            on_flushed
                .await
                .expect("the callback fires")
                .expect("the append is durable");
            report.send(index).expect("printer alive");
            drop(permit);
        });
    }
    drop(report);
    printer.await.expect("printer");
}

#[test]
fn every_append_reported_flushed_survives_a_sigkill() {
    kill_mid_stream_then_check(false);
}

#[test]
fn every_follower_append_reported_flushed_survives_a_sigkill() {
    kill_mid_stream_then_check(true);
}

fn kill_mid_stream_then_check(as_follower: bool) {
    let data_dir = tempfile::tempdir().expect("temporary directory");
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(test_binary);
    child
        .args([
            "--exact",
            &child_test_path(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DATA_DIR_ENV, data_dir.path());
    if as_follower {
        child.env(CHILD_AS_FOLLOWER_ENV, "1");
    }
    let mut child = child
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child appender");
    let mut flushed = Vec::new();
    let mut killed = false;
    for line in BufReader::new(child.stdout.take().expect("piped stdout")).lines() {
        let line = line.expect("read the child's stdout");
        let Some(start) = line.find(CHILD_REPORT_MARKER) else {
            continue;
        };
        let report = &line[start + CHILD_REPORT_MARKER.len()..];
        let index: u64 = report
            .trim()
            .strip_prefix("FLUSHED ")
            .and_then(|number| number.parse().ok())
            .unwrap_or_else(|| panic!("malformed report {line:?}"));
        flushed.push(index);
        if !killed && flushed.len() >= KILL_AFTER_FLUSHED {
            child.kill().expect("SIGKILL the child");
            killed = true;
        }
    }
    let status = child.wait().expect("reap the child");
    assert_eq!(
        status.signal(),
        Some(9),
        "the child dies by SIGKILL: {status}"
    );

    // Reports arrive in task order, not callback order; each index is reported once.
    flushed.sort_unstable();
    let reported = flushed.len();
    flushed.dedup();
    assert_eq!(flushed.len(), reported, "a callback fired twice");
    let highest_flushed = *flushed.last().expect("the child reported flushes");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let (log, mut storage) = open_storage(data_dir.path(), as_follower);
        let (last_index, _) = log
            .last_entry()
            .expect("read")
            .expect("the log holds entries");
        assert!(
            last_index >= highest_flushed,
            "entry {highest_flushed} was reported durable but the log ends at {last_index}"
        );
        let entries = storage
            .try_get_log_entries(1..=last_index)
            .await
            .expect("read the log back");
        assert_eq!(
            entries.len() as u64,
            last_index,
            "the log is contiguous from 1"
        );
        for (position, stored) in entries.iter().enumerate() {
            let index = position as u64 + 1;
            assert_eq!(
                stored,
                &entry(index),
                "entry {index} holds what was appended"
            );
        }
        // The log continues where it ends.
        let (flushed, on_flushed) = TypeConfig::oneshot();
        storage
            .append(
                [entry(last_index + 1)],
                IOFlushed::<TypeConfig>::signal(flushed),
            )
            .await
            .expect("append after the restart");
        on_flushed.await.expect("callback").expect("durable");
    });
}
