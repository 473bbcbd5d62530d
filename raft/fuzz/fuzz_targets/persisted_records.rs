//! Every record type revkv persists, decoded from arbitrary bytes (a damaged or hostile file):
//! decoding must fail cleanly or give a value that encodes and decodes back to the same bytes.
//! The first input byte picks the record type.
#![no_main]

use libfuzzer_sys::fuzz_target;
use revkv_fuzz::check_round_trip;
use revkv_raft::types::alias::{Entry, StoredMembership, Vote};
use revkv_storage::codec::{self, LeaseRecord, PageToken, VersionRecord};
use revkv_storage::{AppliedState, ApplyEntry};

fuzz_target!(|input: &[u8]| {
    let Some((&selector, bytes)) = input.split_first() else {
        return;
    };
    match selector % 10 {
        0 => check_round_trip::<VersionRecord>(bytes),
        1 => check_round_trip::<LeaseRecord>(bytes),
        2 => check_round_trip::<PageToken>(bytes),
        3 => check_round_trip::<AppliedState>(bytes),
        4 => check_round_trip::<Entry>(bytes),
        5 => check_round_trip::<Vote>(bytes),
        6 => check_round_trip::<StoredMembership>(bytes),
        7 => check_round_trip::<ApplyEntry>(bytes),
        8 => {
            if let Ok((sequence, meta)) = codec::decode_log_meta_slot(bytes) {
                let slot = codec::encode_log_meta_slot(sequence, &meta).expect("meta encodes");
                let (again_sequence, again) =
                    codec::decode_log_meta_slot(&slot).expect("an encoded slot decodes");
                assert_eq!((again_sequence, again), (sequence, meta));
            }
        }
        _ => {
            if let Ok(first_index) = codec::decode_segment_header(bytes) {
                let header = codec::encode_segment_header(first_index);
                assert_eq!(
                    codec::decode_segment_header(&header).ok(),
                    Some(first_index)
                );
            }
            let _ = codec::decode_log_record_header(bytes);
        }
    }
});
