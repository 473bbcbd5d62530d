//! Every message on the peer port, decoded from arbitrary bytes, as `raft/src/peer/server.rs`
//! decodes requests and `peer/client.rs` decodes answers: anyone who reaches the peer port (or a
//! broken peer) can send any bytes, so decoding must fail cleanly or give a value that survives a
//! round trip. The first input byte picks the message type.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    VoteRequest, VoteResponse,
};
use revkv_raft::peer::{
    AdminRequest, ForwardedWrite, LeaseGrantCall, LeaseTimeToLive, LeaseTimeToLiveCall, PeerError,
};
use revkv_raft::types::alias::{SnapshotMeta, Vote};
use revkv_raft::{ClientRequest, TypeConfig};
use revkv_storage::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

fn round_trip<T: Serialize + DeserializeOwned>(bytes: &[u8]) {
    let Ok(value) = codec::decode::<T>(bytes) else {
        return;
    };
    let encoded = codec::encode(&value).expect("a decoded message encodes");
    let again: T = codec::decode(&encoded).expect("an encoded message decodes");
    assert_eq!(
        codec::encode(&again).expect("encodes"),
        encoded,
        "a message changed on a round trip"
    );
}

type Answer<T> = Result<T, PeerError>;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, bytes)) = input.split_first() else {
        return;
    };
    match selector % 16 {
        0 => round_trip::<AppendEntriesRequest<TypeConfig>>(bytes),
        1 => round_trip::<VoteRequest<TypeConfig>>(bytes),
        2 => round_trip::<(Vote, SnapshotMeta, Vec<u8>)>(bytes),
        3 => round_trip::<TransferLeaderRequest<TypeConfig>>(bytes),
        4 => round_trip::<ClientRequest>(bytes),
        5 => round_trip::<AdminRequest>(bytes),
        6 => round_trip::<LeaseGrantCall>(bytes),
        7 => round_trip::<i64>(bytes),
        8 => round_trip::<LeaseTimeToLiveCall>(bytes),
        9 => round_trip::<Answer<AppendEntriesResponse<TypeConfig>>>(bytes),
        10 => round_trip::<Answer<VoteResponse<TypeConfig>>>(bytes),
        11 => round_trip::<Answer<SnapshotResponse<TypeConfig>>>(bytes),
        12 => round_trip::<Answer<ForwardedWrite>>(bytes),
        13 => round_trip::<Answer<LeaseTimeToLive>>(bytes),
        14 => round_trip::<Answer<Option<u64>>>(bytes),
        _ => round_trip::<Answer<u64>>(bytes),
    }
});
