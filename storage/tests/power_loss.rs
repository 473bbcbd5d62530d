//! A power cut in the middle of a write, on real files: the raft log and the state file must come
//! back with everything that was synced and nothing torn.
//!
//! A process killed by a signal keeps its writes in the page cache (`crash_recovery.rs` covers
//! that); a power cut does not. The disk switches (`DiskFaults::keep_unsynced_writes`) record
//! every change made since each file's last fsync, and `DiskFaults::crash` loses a drawn part of
//! them, tearing the first lost write, as the deterministic simulator does to whole members. Here
//! an fsync fails in the middle of an append or a durable commit (so its writes are on the disk
//! but not synced), the power goes, and the store is opened again, over many draws.

use revkv_storage::{
    CrashLoss, DiskFaults, DiskOperation, LogOptions, MvccStore, RaftLogStore, StoreOptions,
};

use crate::support::{log_entry, put_request};

/// Draws per test: each a different cut of the unsynced writes.
const TRIALS: u64 = 40;

/// A small generator for the draws (splitmix64): the test needs variety, not quality.
struct Draws(u64);

impl Draws {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (mixed ^ (mixed >> 31)) % bound
    }
}

fn entry_bytes(index: u64) -> Vec<u8> {
    format!("entry {index} ").repeat(40).into_bytes()
}

fn append(log: &RaftLogStore, indexes: std::ops::RangeInclusive<u64>) -> bool {
    let entries: Vec<(u64, Vec<u8>)> = indexes.map(|index| (index, entry_bytes(index))).collect();
    log.append(
        entries
            .iter()
            .map(|(index, bytes)| (*index, bytes.as_slice())),
    )
    .is_ok()
}

/// Cuts the power of a store whose files `faults` switches: nothing more is written, the store is
/// closed, and the unsynced writes are lost as drawn.
fn cut_power<Store>(faults: &DiskFaults, store: Store, draws: &mut Draws) -> Vec<CrashLoss> {
    faults.fail(DiskOperation::Write, true);
    faults.fail(DiskOperation::Sync, true);
    drop(store);
    faults
        .crash(&mut |bound| draws.below(bound))
        .expect("undo the lost writes")
}

#[test]
fn a_log_append_whose_fsync_failed_is_lost_or_kept_whole_never_torn() {
    let mut torn_cuts = 0;
    let mut kept_appends = 0;
    for trial in 0..TRIALS {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("raft-log");
        let faults = DiskFaults::default();
        faults.keep_unsynced_writes();
        let log = RaftLogStore::open_with_faults(&path, LogOptions::default(), faults.clone())
            .expect("open the log");
        log.save_vote(b"vote of term 3").expect("save the vote");
        for first in (1..=20).step_by(5) {
            assert!(append(&log, first..=first + 4), "a synced append");
        }
        faults.fail(DiskOperation::Sync, true);
        assert!(!append(&log, 21..=25), "the append whose fsync fails");
        let losses = cut_power(&faults, log, &mut Draws(trial));
        torn_cuts += losses
            .iter()
            .filter(|loss| loss.torn_sectors.is_some())
            .count();

        let reopened =
            RaftLogStore::open(&path, LogOptions::default()).expect("the log opens after the cut");
        let entries = reopened.entries(0..u64::MAX).expect("read the log");
        let last = entries.last().map_or(0, |(index, _)| *index);
        assert!(
            (20..=25).contains(&last),
            "trial {trial}: the log ends at {last}"
        );
        let expected: Vec<(u64, Vec<u8>)> = (1..=last)
            .map(|index| (index, entry_bytes(index)))
            .collect();
        assert_eq!(entries, expected, "trial {trial}: every entry whole");
        assert_eq!(
            reopened.vote().expect("read the vote").as_deref(),
            Some(&b"vote of term 3"[..]),
            "trial {trial}: the synced vote"
        );
        if last == 25 {
            kept_appends += 1;
        }
    }
    // The draws must reach every outcome, or the test shows less than it claims.
    assert!(torn_cuts > 0, "no trial tore a write");
    assert!(kept_appends > 0, "no trial kept the unsynced append");
    assert!(
        kept_appends < TRIALS,
        "every trial kept the unsynced append"
    );
}

#[test]
fn a_durable_commit_whose_fsync_failed_leaves_the_state_file_at_a_whole_commit() {
    let options = StoreOptions {
        // Only explicit flushes are durable, so the test decides which commit is.
        durable_commit_interval: std::time::Duration::from_secs(3600),
        cache_bytes: 4 * 1024 * 1024,
        ..StoreOptions::default()
    };
    let mut changed_files = 0;
    let mut kept_commits = 0;
    for trial in 0..TRIALS {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("state.redb");
        let faults = DiskFaults::default();
        faults.keep_unsynced_writes();
        let store = MvccStore::open_with_faults(&path, options.clone(), faults.clone())
            .expect("open the state file");
        let apply = |first: u64, last: u64| {
            let entries: Vec<_> = (first..=last)
                .map(|index| log_entry(index, put_request(&format!("key/{index}"), "value")))
                .collect();
            store.apply_batch(&entries).expect("apply");
        };
        apply(1, 10);
        store.flush().expect("a durable commit");
        apply(11, 60);
        faults.fail(DiskOperation::Sync, true);
        assert!(store.flush().is_err(), "the commit whose fsync fails");
        let losses = cut_power(&faults, store, &mut Draws(trial));
        changed_files += losses.iter().filter(|loss| loss.unsynced > 0).count();

        let reopened =
            MvccStore::open(&path, options.clone()).expect("the file opens after the cut");
        let applied = reopened
            .applied_state()
            .expect("read the applied state")
            .last_applied
            .map_or(0, |log_id| log_id.index);
        assert!(
            applied == 10 || applied == 60,
            "trial {trial}: applied {applied}, not a whole commit"
        );
        let revision = reopened.current_revision().expect("revision");
        assert_eq!(revision, applied + 1, "trial {trial}: one revision per put");
        if applied == 60 {
            kept_commits += 1;
        }
    }
    assert!(changed_files > 0, "the failed commit wrote nothing to lose");
    eprintln!("{kept_commits} of {TRIALS} trials kept the commit whose fsync failed");
}
