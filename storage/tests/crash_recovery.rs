//! Recovery from real crashes of a writer that appends to the raft log and applies to the MVCC
//! store, the way a member does.
//!
//! A clean drop of a redb database makes its pending non-durable commits durable, which would hide
//! exactly the bugs these tests look for. So each test re-executes this test binary as a child
//! process that runs only [`crash_child_writer`] (told what to do through environment variables).
//! The child appends each entry durably, reports `LOGGED <index>` on stdout, applies the entry,
//! flushes the store every few entries and reports `FLUSHED <index>`, and then dies without running
//! a destructor: it calls `std::process::abort()` itself, or the parent kills it with SIGKILL while
//! it is still writing. The parent reopens both files and checks what a restarted member relies on:
//! every reported entry is in the log, the store is at or after its last flush and not past the
//! log, replaying the rest of the log reproduces the state of a store that applied the whole log
//! in one go, and no entry can be applied twice.
//!
//! Unix only: the checks read the signal that ended the child.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use revkv_storage::{
    codec, ApplyEntry, ApplyOutcome, Compare, CompareOp, CompareTarget, DeleteRangeRequest,
    EntryPayload, KeyRange, LogId, MvccStore, PutRequest, RaftLogStore, RangeRequest, Request,
    Response, StoreOptions, TxnOp, TxnRequest,
};

/// The test that acts as the crashing writer when [`CHILD_DATA_DIR_ENV`] is set.
const CHILD_TEST_NAME: &str = "crash_child_writer";
const CHILD_DATA_DIR_ENV: &str = "REVKV_CRASH_TEST_CHILD_DATA_DIR";
const CHILD_DURABLE_COMMIT_INTERVAL_MILLIS_ENV: &str =
    "REVKV_CRASH_TEST_CHILD_DURABLE_COMMIT_INTERVAL_MILLIS";
const CHILD_FLUSH_EVERY_ENV: &str = "REVKV_CRASH_TEST_CHILD_FLUSH_EVERY";
/// When absent, the child writes until it is killed.
const CHILD_ABORT_AFTER_ENV: &str = "REVKV_CRASH_TEST_CHILD_ABORT_AFTER";
/// Prefixes every line the child reports, so libtest's own output is never mistaken for one.
const CHILD_REPORT_MARKER: &str = "REVKV-CRASH-CHILD";
/// A child that is never killed (its parent failed) stops by itself after this many entries.
const CHILD_SAFETY_CAP_ENTRIES: u64 = 20_000;

/// The child test's full name as the test binary lists it (`--exact` needs it): its module path
/// below the binary's root, then its own name.
fn child_test_path() -> String {
    match module_path!().split_once("::") {
        Some((_binary, module)) => format!("{module}::{CHILD_TEST_NAME}"),
        None => CHILD_TEST_NAME.to_string(),
    }
}

const LOG_FILE_NAME: &str = "raft-log";
const STATE_FILE_NAME: &str = "state.redb";
const TEST_CACHE_BYTES: usize = 8 * 1024 * 1024;

/// Long enough that only explicit flushes are durable during a test.
const ONLY_EXPLICIT_FLUSHES_ARE_DURABLE: Duration = Duration::from_secs(3600);

/// The generated workload: keys `key/00` to `key/10`, and one compaction.
const KEY_SPACE: u64 = 11;
const COMPACTION_INDEX: u64 = 30;
const COMPACTION_REVISION: u64 = 15;

const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;

fn log_id_for_index(index: u64) -> LogId {
    LogId {
        term: 1,
        node_id: 1,
        index,
    }
}

fn key_for(number: u64) -> Vec<u8> {
    format!("key/{:02}", number % KEY_SPACE).into_bytes()
}

fn put_for(key: Vec<u8>, index: u64) -> PutRequest {
    PutRequest {
        key,
        value: format!("value written by entry {index}").into_bytes(),
        lease: (index % 3) as i64,
        prev_kv: index.is_multiple_of(2),
    }
}

/// The entries that grant leases 1 and 2 (puts name lease `index % 3`), revoke lease 1 (deleting
/// its keys) and grant it again.
const LEASE_1_GRANT_INDEXES: [u64; 2] = [1, 45];
const LEASE_2_GRANT_INDEX: u64 = 2;
const LEASE_1_REVOKE_INDEX: u64 = 43;

/// The request of log entry `index`: mostly puts, with single and prefix deletes, txns that take
/// either branch, one compaction, and lease grants and a revoke. Deterministic, so the parent can
/// rebuild the whole log.
fn request_for_index(index: u64) -> Request {
    if index == COMPACTION_INDEX {
        return Request::Compact {
            revision: COMPACTION_REVISION,
        };
    }
    let grant = |id| Request::LeaseGrant {
        id,
        ttl_seconds: 60,
    };
    if LEASE_1_GRANT_INDEXES.contains(&index) {
        return grant(1);
    }
    if index == LEASE_2_GRANT_INDEX {
        return grant(2);
    }
    if index == LEASE_1_REVOKE_INDEX {
        return Request::LeaseRevoke { id: 1 };
    }
    match index % 9 {
        4 => Request::DeleteRange(DeleteRangeRequest {
            range: KeyRange::single(key_for(index * 5)),
            prev_kv: true,
        }),
        8 => Request::DeleteRange(DeleteRangeRequest {
            range: KeyRange::prefix(format!("key/{}", index % 2)),
            prev_kv: index.is_multiple_of(4),
        }),
        2 | 6 => Request::Txn(TxnRequest {
            compare: vec![Compare {
                key: key_for(index),
                range_end: revkv_storage::RangeEnd::Single,
                target: CompareTarget::Version(1),
                op: CompareOp::Greater,
            }],
            success: vec![
                TxnOp::Put(put_for(key_for(index), index)),
                TxnOp::DeleteRange(DeleteRangeRequest {
                    range: KeyRange::single(key_for(index + 1)),
                    prev_kv: true,
                }),
            ],
            failure: vec![
                TxnOp::Put(put_for(key_for(index + 2), index)),
                TxnOp::Get(RangeRequest::of(KeyRange::prefix("key/"))),
            ],
        }),
        _ => Request::Put(put_for(key_for(index * 7), index)),
    }
}

fn apply_entry_for(index: u64, request: Request) -> ApplyEntry {
    ApplyEntry {
        log_id: log_id_for_index(index),
        payload: EntryPayload::Request(request),
    }
}

fn store_options(durable_commit_interval: Duration) -> StoreOptions {
    StoreOptions {
        durable_commit_interval,
        cache_bytes: TEST_CACHE_BYTES,
        ..StoreOptions::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The child: the crashing writer.
// ---------------------------------------------------------------------------------------------

/// What the parent asks the child to do.
struct ChildPlan {
    durable_commit_interval: Duration,
    flush_every: u64,
    abort_after: Option<u64>,
}

impl ChildPlan {
    fn from_env() -> Self {
        let number = |name: &str| -> Option<u64> {
            std::env::var(name)
                .ok()
                .map(|text| text.parse().expect("the parent passes numbers"))
        };
        ChildPlan {
            durable_commit_interval: Duration::from_millis(
                number(CHILD_DURABLE_COMMIT_INTERVAL_MILLIS_ENV).expect("interval is set"),
            ),
            flush_every: number(CHILD_FLUSH_EVERY_ENV).expect("flush period is set"),
            abort_after: number(CHILD_ABORT_AFTER_ENV),
        }
    }
}

/// The crashing writer. A no-op in an ordinary test run; the crash tests run it in a child process.
#[test]
fn crash_child_writer() {
    let Some(data_dir) = std::env::var_os(CHILD_DATA_DIR_ENV) else {
        return;
    };
    write_until_the_crash(Path::new(&data_dir), &ChildPlan::from_env());
}

fn write_until_the_crash(data_dir: &Path, plan: &ChildPlan) -> ! {
    let log = RaftLogStore::open(
        data_dir.join(LOG_FILE_NAME),
        revkv_storage::LogOptions::default(),
    )
    .expect("child opens the log");
    let store = MvccStore::open(
        data_dir.join(STATE_FILE_NAME),
        store_options(plan.durable_commit_interval),
    )
    .expect("child opens the store");
    let mut stdout = std::io::stdout().lock();
    // End libtest's unterminated "test crash_child_writer ... " line.
    writeln!(stdout).expect("report to the parent");
    for index in 1..=CHILD_SAFETY_CAP_ENTRIES {
        let request = request_for_index(index);
        let entry_bytes = codec::encode(&request).expect("encode the request");
        log.append([(index, entry_bytes.as_slice())])
            .expect("child appends durably");
        // Saved without an fsync, as a member does; it must never run ahead of the log.
        log.save_committed(Some(log_id_for_index(index)))
            .expect("child saves the committed id");
        writeln!(stdout, "{CHILD_REPORT_MARKER} LOGGED {index}").expect("report to the parent");
        stdout.flush().expect("report to the parent");

        store
            .apply_batch(&[apply_entry_for(index, request)])
            .expect("child applies the entry");
        if index.is_multiple_of(plan.flush_every) {
            store.flush().expect("child flushes the store");
            writeln!(stdout, "{CHILD_REPORT_MARKER} FLUSHED {index}")
                .expect("report to the parent");
            stdout.flush().expect("report to the parent");
        }
        if plan.abort_after == Some(index) {
            std::process::abort();
        }
    }
    std::process::abort()
}

// ---------------------------------------------------------------------------------------------
// The parent: run a child until it crashes, then recover.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum ChildEnding {
    /// The child calls `std::process::abort()` right after handling this index.
    AbortsItselfAfter(u64),
    /// The parent sends SIGKILL once it has read this many `LOGGED` lines.
    KilledAfterLoggedLines(usize),
}

#[derive(Clone, Copy, Debug)]
struct CrashScenario {
    durable_commit_interval: Duration,
    flush_every: u64,
    ending: ChildEnding,
}

/// What the child reported before it died, and the files it left.
struct CrashedChild {
    data_dir: tempfile::TempDir,
    logged_indexes: Vec<u64>,
    last_flushed_index: Option<u64>,
}

/// What the recovery found, for the scenario-specific checks.
#[derive(Debug)]
struct Recovery {
    /// The store's applied index on reopen (0 when nothing was applied durably).
    applied_index_after_crash: u64,
    last_log_index: u64,
}

fn run_child_until_it_crashes(scenario: CrashScenario) -> CrashedChild {
    let data_dir = tempfile::tempdir().expect("temporary directory");
    let test_binary = std::env::current_exe().expect("the test binary's path");
    // `ulimit -c 0`: an aborting child must not leave a core dump behind.
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg("ulimit -c 0; exec \"$0\" \"$@\"")
        .arg(&test_binary)
        .args([
            "--exact",
            &child_test_path(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DATA_DIR_ENV, data_dir.path())
        .env(
            CHILD_DURABLE_COMMIT_INTERVAL_MILLIS_ENV,
            scenario.durable_commit_interval.as_millis().to_string(),
        )
        .env(CHILD_FLUSH_EVERY_ENV, scenario.flush_every.to_string())
        .env_remove(CHILD_ABORT_AFTER_ENV)
        .current_dir(data_dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let ChildEnding::AbortsItselfAfter(index) = scenario.ending {
        command.env(CHILD_ABORT_AFTER_ENV, index.to_string());
    }
    let mut child = command.spawn().expect("spawn the child writer");

    let mut child_stderr = child.stderr.take().expect("piped stderr");
    let stderr_collector = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = child_stderr.read_to_string(&mut text);
        text
    });

    let mut stdout_lines = Vec::new();
    let mut logged_indexes = Vec::new();
    let mut last_flushed_index = None;
    let mut killed = false;
    // Reads until the child's stdout closes, which it does when the child dies.
    for line in BufReader::new(child.stdout.take().expect("piped stdout")).lines() {
        let line = line.expect("read the child's stdout");
        if let Some(report) = line
            .find(CHILD_REPORT_MARKER)
            .map(|start| &line[start + CHILD_REPORT_MARKER.len()..])
        {
            let mut words = report.split_whitespace();
            let (Some(what), Some(index)) = (words.next(), words.next()) else {
                panic!("malformed child report {line:?}");
            };
            let index: u64 = index.parse().expect("the child reports numbers");
            match what {
                "LOGGED" => logged_indexes.push(index),
                "FLUSHED" => last_flushed_index = Some(index),
                _ => panic!("unknown child report {line:?}"),
            }
        }
        stdout_lines.push(line);
        if let ChildEnding::KilledAfterLoggedLines(count) = scenario.ending {
            if !killed && logged_indexes.len() >= count {
                child.kill().expect("SIGKILL the child");
                killed = true;
            }
        }
    }
    let status = child.wait().expect("reap the child");
    let stderr = stderr_collector.join().expect("stderr collector");
    let expected_signal = match scenario.ending {
        ChildEnding::AbortsItselfAfter(_) => SIGABRT,
        ChildEnding::KilledAfterLoggedLines(_) => SIGKILL,
    };
    assert_eq!(
        status.signal(),
        Some(expected_signal),
        "the child must die by signal {expected_signal}, not {status}\n\
         stdout:\n{}\nstderr:\n{stderr}",
        stdout_lines.join("\n")
    );

    assert_eq!(
        logged_indexes,
        (1..=logged_indexes.len() as u64).collect::<Vec<_>>(),
        "the child logs consecutive indexes from 1"
    );
    if let ChildEnding::AbortsItselfAfter(index) = scenario.ending {
        assert_eq!(logged_indexes.last(), Some(&index));
    }
    CrashedChild {
        data_dir,
        logged_indexes,
        last_flushed_index,
    }
}

/// Reopens the files a crashed child left and checks everything a restarted member relies on.
fn recover_and_check(crashed: &CrashedChild, scenario: CrashScenario) -> Recovery {
    let log = RaftLogStore::open(
        crashed.data_dir.path().join(LOG_FILE_NAME),
        revkv_storage::LogOptions::default(),
    )
    .expect("reopen the crashed log");
    let store = MvccStore::open(
        crashed.data_dir.path().join(STATE_FILE_NAME),
        store_options(scenario.durable_commit_interval),
    )
    .expect("reopen the crashed store");

    let last_log_index = check_every_logged_entry_survived(&log, crashed);
    let applied_index_after_crash =
        check_applied_index_between_last_flush_and_log_end(&store, crashed, last_log_index);
    check_no_entry_can_be_applied_twice(&store, applied_index_after_crash);
    check_replaying_the_log_matches_a_store_that_applied_it_in_one_go(
        &log,
        &store,
        applied_index_after_crash,
        last_log_index,
    );

    let committed = log.committed().expect("read the committed id");
    assert!(
        committed.is_none_or(|committed| committed.index <= last_log_index),
        "the committed id {committed:?} is past the log's end {last_log_index}"
    );
    Recovery {
        applied_index_after_crash,
        last_log_index,
    }
}

/// (a) Every entry reported as logged is in the log, the log is contiguous from 1, and every entry
/// holds exactly the bytes the child wrote. Returns the log's last index.
fn check_every_logged_entry_survived(log: &RaftLogStore, crashed: &CrashedChild) -> u64 {
    let (last_log_index, _) = log
        .last_entry()
        .expect("read the last entry")
        .expect("the log holds entries");
    let last_reported = *crashed.logged_indexes.last().expect("the child logged");
    assert!(
        last_log_index >= last_reported,
        "entry {last_reported} was reported durable but the log ends at {last_log_index}"
    );
    // The child may die between a durable append and its report, but never gets further.
    assert!(last_log_index <= last_reported + 1);
    assert_eq!(log.first_index().unwrap(), Some(1));

    let entries = log.entries(1..last_log_index + 1).expect("read the log");
    assert_eq!(
        entries.iter().map(|(index, _)| *index).collect::<Vec<_>>(),
        (1..=last_log_index).collect::<Vec<_>>(),
        "the log is contiguous"
    );
    for (index, bytes) in &entries {
        let request = request_for_index(*index);
        assert_eq!(
            *bytes,
            codec::encode(&request).unwrap(),
            "entry {index} bytes"
        );
        assert_eq!(codec::decode::<Request>(bytes).unwrap(), request);
    }
    last_log_index
}

/// (b) The store is at or after its last reported flush, and never ahead of the log.
fn check_applied_index_between_last_flush_and_log_end(
    store: &MvccStore,
    crashed: &CrashedChild,
    last_log_index: u64,
) -> u64 {
    let applied = store.applied_state().expect("read the applied state");
    let applied_index = applied.last_applied.map_or(0, |log_id| log_id.index);
    if let Some(last_applied) = applied.last_applied {
        assert_eq!(last_applied, log_id_for_index(applied_index));
    }
    let last_flushed = crashed.last_flushed_index.unwrap_or(0);
    assert!(
        applied_index >= last_flushed,
        "the store lost a flushed entry: applied {applied_index} after flushing {last_flushed}"
    );
    assert!(
        applied_index <= last_log_index,
        "the store applied {applied_index}, past the log's end {last_log_index}"
    );
    assert_eq!(
        store.durable_applied(),
        applied.last_applied,
        "after a reopen, everything the store reports as applied is durable"
    );
    assert_eq!(applied.membership, None);
    applied_index
}

/// (d) Re-applying an applied entry stops the member (a panic), alone or at the end of a batch
/// that starts correctly, and nothing is written.
fn check_no_entry_can_be_applied_twice(store: &MvccStore, applied_index: u64) {
    if applied_index == 0 {
        return;
    }
    let hash_before = store.hash(None).expect("hash");
    let applied_before = store.applied_state().unwrap();
    let duplicate_batches = [
        vec![apply_entry_for(1, request_for_index(1))],
        vec![apply_entry_for(
            applied_index,
            request_for_index(applied_index),
        )],
        vec![
            apply_entry_for(applied_index + 1, request_for_index(applied_index + 1)),
            apply_entry_for(applied_index + 1, request_for_index(applied_index + 1)),
        ],
    ];
    for batch in duplicate_batches {
        crate::support::assert_apply_stops(store, &batch, "an entry is never applied twice");
    }
    assert_eq!(
        store.hash(None).unwrap(),
        hash_before,
        "nothing was written"
    );
    assert_eq!(store.applied_state().unwrap(), applied_before);
}

/// (c) Replaying the log after the applied index, decoded from the log's bytes, gives the same
/// state and the same answers as a fresh store that applied the whole log in one batch.
fn check_replaying_the_log_matches_a_store_that_applied_it_in_one_go(
    log: &RaftLogStore,
    store: &MvccStore,
    applied_index: u64,
    last_log_index: u64,
) {
    let replay: Vec<ApplyEntry> = log
        .entries(applied_index + 1..last_log_index + 1)
        .expect("read the entries to replay")
        .into_iter()
        .map(|(index, bytes)| {
            let request = codec::decode::<Request>(&bytes).expect("decode a log entry");
            apply_entry_for(index, request)
        })
        .collect();
    let mut replayed_outcomes = Vec::new();
    for batch in replay.chunks(4) {
        replayed_outcomes.extend(store.apply_batch(batch).expect("replay a batch"));
    }

    let reference_dir = tempfile::tempdir().unwrap();
    let reference = MvccStore::open(
        reference_dir.path().join(STATE_FILE_NAME),
        store_options(Duration::ZERO),
    )
    .unwrap();
    let whole_log: Vec<ApplyEntry> = (1..=last_log_index)
        .map(|index| apply_entry_for(index, request_for_index(index)))
        .collect();
    let reference_outcomes = reference.apply_batch(&whole_log).unwrap();

    assert_eq!(
        describe_outcomes(&replayed_outcomes),
        describe_outcomes(&reference_outcomes[applied_index as usize..]),
        "replayed entries answer as they did for the reference"
    );
    assert_eq!(store.hash(None).unwrap(), reference.hash(None).unwrap());
    assert_eq!(
        store.current_revision().unwrap(),
        reference.current_revision().unwrap()
    );
    assert_eq!(
        store.compact_revision().unwrap(),
        reference.compact_revision().unwrap()
    );
    assert_eq!(
        store.applied_state().unwrap(),
        reference.applied_state().unwrap()
    );
    assert_eq!(
        store.applied_state().unwrap().last_applied,
        Some(log_id_for_index(last_log_index))
    );
    let everything = RangeRequest::of(KeyRange::prefix(""));
    assert_eq!(
        store.range(&everything).unwrap(),
        reference.range(&everything).unwrap(),
        "the live keys match"
    );
    assert_eq!(
        store.leases().unwrap(),
        reference.leases().unwrap(),
        "the leases and their attached-key counts match"
    );
    assert_eq!(store.hash(None).unwrap(), reference.hash(None).unwrap());
    if last_log_index >= COMPACTION_INDEX {
        assert_eq!(reference.compact_revision().unwrap(), COMPACTION_REVISION);
    }
}

/// Outcomes as comparable text (errors are not `PartialEq`).
fn describe_outcomes(outcomes: &[ApplyOutcome]) -> Vec<String> {
    outcomes
        .iter()
        .map(|outcome| format!("revision {}: {:?}", outcome.revision, outcome.result))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The crash tests.
// ---------------------------------------------------------------------------------------------

#[test]
fn an_abort_with_only_explicit_flushes_durable_loses_exactly_the_unflushed_applies_and_replay_restores_them(
) {
    let scenario = CrashScenario {
        durable_commit_interval: ONLY_EXPLICIT_FLUSHES_ARE_DURABLE,
        flush_every: 7,
        ending: ChildEnding::AbortsItselfAfter(61),
    };
    let crashed = run_child_until_it_crashes(scenario);
    assert_eq!(crashed.last_flushed_index, Some(56));
    let recovery = recover_and_check(&crashed, scenario);
    assert_eq!(recovery.last_log_index, 61);
    // Proof that the child really crashed: a clean close would have kept entries 57 to 61.
    assert_eq!(
        recovery.applied_index_after_crash, 56,
        "applies after the last flush were not durable and must be lost"
    );
}

#[test]
fn an_abort_with_every_commit_durable_loses_no_applied_entry() {
    let scenario = CrashScenario {
        durable_commit_interval: Duration::ZERO,
        flush_every: 10,
        ending: ChildEnding::AbortsItselfAfter(47),
    };
    let crashed = run_child_until_it_crashes(scenario);
    let recovery = recover_and_check(&crashed, scenario);
    assert_eq!(recovery.last_log_index, 47);
    assert_eq!(recovery.applied_index_after_crash, 47);
}

#[test]
fn an_abort_with_the_default_durable_commit_interval_recovers_by_replaying_the_log() {
    let scenario = CrashScenario {
        durable_commit_interval: StoreOptions::default().durable_commit_interval,
        flush_every: 50,
        ending: ChildEnding::AbortsItselfAfter(173),
    };
    let crashed = run_child_until_it_crashes(scenario);
    assert_eq!(crashed.last_flushed_index, Some(150));
    let recovery = recover_and_check(&crashed, scenario);
    assert_eq!(recovery.last_log_index, 173);
}

#[test]
fn an_abort_with_a_short_durable_commit_interval_recovers_by_replaying_the_log() {
    // Short enough that some applies between flushes are durable by time, not only by flush.
    let scenario = CrashScenario {
        durable_commit_interval: Duration::from_millis(2),
        flush_every: 50,
        ending: ChildEnding::AbortsItselfAfter(173),
    };
    let crashed = run_child_until_it_crashes(scenario);
    let recovery = recover_and_check(&crashed, scenario);
    assert_eq!(recovery.last_log_index, 173);
}

#[test]
fn a_sigkill_while_writing_with_only_explicit_flushes_durable_recovers_by_replaying_the_log() {
    let scenario = CrashScenario {
        durable_commit_interval: ONLY_EXPLICIT_FLUSHES_ARE_DURABLE,
        flush_every: 7,
        ending: ChildEnding::KilledAfterLoggedLines(90),
    };
    let crashed = run_child_until_it_crashes(scenario);
    assert!(crashed.logged_indexes.len() >= 90);
    recover_and_check(&crashed, scenario);
}

#[test]
fn a_sigkill_while_writing_with_the_default_durable_commit_interval_recovers_by_replaying_the_log()
{
    let scenario = CrashScenario {
        durable_commit_interval: StoreOptions::default().durable_commit_interval,
        flush_every: 25,
        ending: ChildEnding::KilledAfterLoggedLines(140),
    };
    let crashed = run_child_until_it_crashes(scenario);
    assert!(crashed.logged_indexes.len() >= 140);
    recover_and_check(&crashed, scenario);
}

/// The workload the crash tests replay is only meaningful if it really mixes request kinds and its
/// compaction is accepted; this checks the generator itself.
#[test]
fn the_generated_workload_mixes_puts_deletes_txns_and_one_accepted_compaction() {
    let directory = tempfile::tempdir().unwrap();
    let store = MvccStore::open(
        directory.path().join(STATE_FILE_NAME),
        store_options(Duration::ZERO),
    )
    .unwrap();
    let entries: Vec<ApplyEntry> = (1..=90)
        .map(|index| apply_entry_for(index, request_for_index(index)))
        .collect();
    let outcomes = store.apply_batch(&entries).unwrap();

    let mut puts = 0;
    let mut deletes_that_deleted = 0;
    let mut txns_by_branch = [0, 0];
    let mut compactions = 0;
    let mut lease_requests = 0;
    for (index, outcome) in (1u64..).zip(&outcomes) {
        match outcome.result.as_ref() {
            Ok(Response::LeaseGrant(_)) => lease_requests += 1,
            Ok(Response::LeaseRevoke(revoked)) => {
                assert!(revoked.deleted > 0, "the revoke deleted lease 1's keys");
                lease_requests += 1;
            }
            Ok(Response::Put(_)) => puts += 1,
            Ok(Response::DeleteRange(deleted)) if deleted.deleted > 0 => deletes_that_deleted += 1,
            Ok(Response::DeleteRange(_)) => {}
            Ok(Response::Txn(txn)) => txns_by_branch[usize::from(txn.succeeded)] += 1,
            Ok(Response::Compact) => {
                assert_eq!(index, COMPACTION_INDEX);
                compactions += 1;
            }
            other => panic!("entry {index} was not accepted: {other:?}"),
        }
    }
    assert!(puts >= 40, "{puts} puts");
    assert!(deletes_that_deleted >= 5, "{deletes_that_deleted} deletes");
    assert!(
        txns_by_branch.iter().all(|&count| count >= 3),
        "txns that failed and succeeded: {txns_by_branch:?}"
    );
    assert_eq!(compactions, 1);
    assert_eq!(lease_requests, 4, "three grants and one revoke");
    assert_eq!(store.compact_revision().unwrap(), COMPACTION_REVISION);
}
