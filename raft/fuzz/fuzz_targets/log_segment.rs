//! A raft log segment file with arbitrary contents (a torn write, a bad disk, a hostile file):
//! opening the log must fail with an error or cut a damaged tail, never panic, and whatever it
//! then serves must be contiguous and accept the next append.
#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;
use revkv_storage::codec;
use revkv_storage::{LogOptions, RaftLogStore};

fuzz_target!(|input: &[u8]| {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("raft-log");
    // A log opened once writes its metadata file, as a member's log always has one.
    drop(RaftLogStore::open(&path, LogOptions::default()).expect("create an empty log"));
    let first_index = codec::decode_segment_header(input).unwrap_or(0);
    fs::write(path.join(format!("{first_index:020}.seg")), input).expect("write the segment");
    let Ok(log) = RaftLogStore::open(&path, LogOptions::default()) else {
        return;
    };
    let entries = log.entries(0..u64::MAX).expect("an opened log reads");
    for pair in entries.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + 1, "the log is not contiguous");
    }
    let last = log.last_entry().expect("the last entry reads");
    assert_eq!(
        last.map(|(index, _)| index),
        entries.last().map(|(index, _)| *index)
    );
    let Some(next) = entries
        .last()
        .map_or(Some(first_index), |(index, _)| index.checked_add(1))
    else {
        return;
    };
    if next == u64::MAX {
        return;
    }
    log.append([(next, &b"\x01next"[..])])
        .expect("an opened log takes the next append");
    let appended = log.entries(next..next + 1).expect("reads");
    assert_eq!(appended.len(), 1, "the appended entry reads back");
});
