//! Writes a seed corpus for every fuzz target: valid records, messages, tokens, a snapshot export
//! and a segment file, so the fuzzer mutates real encodings instead of discovering the format
//! from nothing. `scripts/fuzz.sh` runs it before fuzzing.
//!
//!   write_seeds CORPUS_DIRECTORY   (one subdirectory per target)

use std::fs;
use std::path::Path;

use openraft::entry::RaftEntry;
use revkv_fuzz::sample_store;
use revkv_raft::peer::{LeaseGrantCall, PeerError};
use revkv_raft::types::alias::{Entry, LeaderId, LogId as RaftLogId, StoredMembership};
use revkv_raft::ClientRequest;
use revkv_storage::codec::{self, LeaseRecord, LogMeta, PageToken, VersionRecord};
use revkv_storage::{AppliedState, LogId, LogOptions, PutRequest, RaftLogStore, Request};
use serde::Serialize;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let corpus = std::env::args()
        .nth(1)
        .ok_or("usage: write_seeds CORPUS_DIRECTORY")?;
    let corpus = Path::new(&corpus);
    persisted_records(&corpus.join("persisted_records"))?;
    peer_messages(&corpus.join("peer_messages"))?;
    continue_token(&corpus.join("continue_token"))?;
    snapshot_and_watch(corpus)?;
    log_segment(&corpus.join("log_segment"))?;
    Ok(())
}

/// Writes `selector` followed by the record, as the selector-driven targets read their input.
fn write_selected(
    directory: &Path,
    name: &str,
    selector: u8,
    record: &[u8],
) -> std::io::Result<()> {
    fs::create_dir_all(directory)?;
    let mut bytes = vec![selector];
    bytes.extend_from_slice(record);
    fs::write(directory.join(name), bytes)
}

fn encoded<T: Serialize>(value: &T) -> Vec<u8> {
    codec::encode(value).expect("a seed encodes")
}

fn sample_request() -> Request {
    Request::Put(PutRequest {
        key: b"key/1".to_vec(),
        value: b"value".to_vec(),
        lease: 0,
        prev_kv: true,
    })
}

fn sample_raft_entry() -> Entry {
    let leader = LeaderId {
        term: 2,
        node_id: 1,
    };
    let log_id = RaftLogId::new(leader, 3);
    Entry::new_normal(log_id, ClientRequest(sample_request()))
}

fn persisted_records(directory: &Path) -> std::io::Result<()> {
    let version = VersionRecord {
        key: b"key/1".to_vec(),
        value: b"value".to_vec(),
        create_revision: 2,
        version: 3,
        lease: 7,
        tombstone: false,
    };
    let applied = AppliedState {
        last_applied: Some(LogId {
            term: 2,
            node_id: 1,
            index: 9,
        }),
        membership: Some(encoded(&StoredMembership::default())),
    };
    write_selected(directory, "version", 0, &encoded(&version))?;
    write_selected(
        directory,
        "lease",
        1,
        &encoded(&LeaseRecord {
            ttl_seconds: 60,
            attached_keys: 2,
        }),
    )?;
    write_selected(directory, "token", 2, &encoded(&page_token()))?;
    write_selected(directory, "applied", 3, &encoded(&applied))?;
    write_selected(directory, "entry", 4, &encoded(&sample_raft_entry()))?;
    write_selected(
        directory,
        "membership",
        6,
        &encoded(&StoredMembership::default()),
    )?;
    let meta = LogMeta {
        vote: Some(vec![1, 2, 3]),
        committed: applied.last_applied,
        last_purged: None,
    };
    let slot = codec::encode_log_meta_slot(4, &meta).expect("a meta slot encodes");
    write_selected(directory, "meta", 8, &slot)?;
    write_selected(directory, "segment", 9, &codec::encode_segment_header(17))
}

fn peer_messages(directory: &Path) -> std::io::Result<()> {
    write_selected(
        directory,
        "client_request",
        4,
        &encoded(&ClientRequest(sample_request())),
    )?;
    let grant = LeaseGrantCall {
        id: Some(7),
        ttl_seconds: 30,
    };
    write_selected(directory, "lease_grant", 6, &encoded(&grant))?;
    write_selected(directory, "keep_alive", 7, &encoded(&7i64))?;
    let answer: Result<Option<u64>, PeerError> = Ok(Some(12));
    write_selected(directory, "admin_answer", 14, &encoded(&answer))
}

fn page_token() -> PageToken {
    PageToken {
        revision: 30,
        resume_key: b"key/3".to_vec(),
        remaining_count: 2,
    }
}

fn continue_token(directory: &Path) -> std::io::Result<()> {
    fs::create_dir_all(directory)?;
    let token = codec::encode_page_token(&page_token()).expect("a token encodes");
    fs::write(directory.join("token"), token)
}

fn snapshot_and_watch(corpus: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir()?;
    let store = sample_store(&scratch.path().join("state.redb"));
    let mut export = Vec::new();
    store.export_snapshot(&mut export)?;
    let snapshots = corpus.join("snapshot_stream");
    fs::create_dir_all(&snapshots)?;
    fs::write(snapshots.join("sample"), &export)?;
    let watches = corpus.join("watch_resume");
    fs::create_dir_all(&watches)?;
    for (name, revision) in [
        ("compacted", 3u64),
        ("inside", 12),
        ("current", 41),
        ("future", 99),
    ] {
        let mut input = revision.to_le_bytes().to_vec();
        input.extend_from_slice(&[16, 0, 1]);
        fs::write(watches.join(name), input)?;
    }
    Ok(())
}

fn log_segment(directory: &Path) -> Result<(), Box<dyn std::error::Error>> {
    fs::create_dir_all(directory)?;
    let scratch = tempfile::tempdir()?;
    let log = RaftLogStore::open(scratch.path().join("raft-log"), LogOptions::default())?;
    let entries: Vec<Vec<u8>> = (5..8).map(|_| encoded(&sample_raft_entry())).collect();
    log.append((5..8).zip(entries.iter().map(Vec::as_slice)))?;
    drop(log);
    let segment = fs::read(
        scratch
            .path()
            .join("raft-log")
            .join(format!("{:020}.seg", 5)),
    )?;
    fs::write(directory.join("three_entries"), segment)?;
    Ok(())
}
