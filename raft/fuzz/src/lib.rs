//! What the fuzz targets share: a small store with history, leases and a compaction, built the
//! same way every time, so the snapshot and watch targets start from real data and the seed
//! writer can export it; and the round-trip check of the record and message targets.

use std::path::Path;

use revkv_storage::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use revkv_storage::{
    ApplyEntry, DeleteRangeRequest, EntryPayload, KeyRange, LogId, MvccStore, PutRequest, Request,
    StoreOptions,
};

/// Revisions the sample store reaches: enough for history below and above its compaction.
pub const SAMPLE_WRITES: u64 = 40;

/// The revision the sample store is compacted at.
pub const SAMPLE_COMPACT_REVISION: u64 = 10;

/// Opens a store at `path` and fills it with the sample history (puts, deletes, a leased key, a
/// compaction), or returns the store as it is if it was filled before.
pub fn sample_store(path: &Path) -> MvccStore {
    let store = MvccStore::open(path, StoreOptions::default()).expect("open the sample store");
    if store.current_revision().expect("revision") > 0 {
        return store;
    }
    let mut entries = vec![request_entry(
        1,
        Request::LeaseGrant {
            id: 7,
            ttl_seconds: 60,
        },
    )];
    for write in 0..SAMPLE_WRITES {
        let key = format!("key/{}", write % 6).into_bytes();
        let request = if write % 5 == 4 {
            Request::DeleteRange(DeleteRangeRequest {
                range: KeyRange::single(key),
                prev_kv: false,
            })
        } else {
            Request::Put(PutRequest {
                key,
                value: format!("value {write}").into_bytes(),
                lease: if write % 7 == 0 { 7 } else { 0 },
                prev_kv: false,
            })
        };
        entries.push(request_entry(entries.len() as u64 + 1, request));
    }
    entries.push(request_entry(
        entries.len() as u64 + 1,
        Request::Compact {
            revision: SAMPLE_COMPACT_REVISION,
        },
    ));
    store
        .apply_batch(&entries)
        .expect("apply the sample history");
    store.flush().expect("flush the sample store");
    store
}

fn request_entry(index: u64, request: Request) -> ApplyEntry {
    ApplyEntry {
        log_id: LogId {
            term: 1,
            node_id: 1,
            index,
        },
        payload: EntryPayload::Request(request),
    }
}

/// Decodes a codec record of type `T` from untrusted bytes and, when that succeeds, checks that
/// the value survives encoding and decoding again unchanged (compared by its encoding, so `T`
/// needs no `PartialEq`).
pub fn check_round_trip<T: Serialize + DeserializeOwned>(bytes: &[u8]) {
    let Ok(value) = codec::decode::<T>(bytes) else {
        return;
    };
    let encoded = codec::encode(&value).expect("a decoded value encodes");
    let again: T = codec::decode(&encoded).expect("an encoded value decodes");
    assert_eq!(
        codec::encode(&again).expect("encodes"),
        encoded,
        "a record changed on a round trip"
    );
}
