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
use revkv_fuzz::check_round_trip;
use revkv_raft::peer::{
    AdminRequest, ForwardedWrite, LeaseGrantCall, LeaseTimeToLive, LeaseTimeToLiveCall, PeerError,
};
use revkv_raft::types::alias::{SnapshotMeta, Vote};
use revkv_raft::{ClientRequest, TypeConfig};

type Answer<T> = Result<T, PeerError>;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, bytes)) = input.split_first() else {
        return;
    };
    match selector % 16 {
        0 => check_round_trip::<AppendEntriesRequest<TypeConfig>>(bytes),
        1 => check_round_trip::<VoteRequest<TypeConfig>>(bytes),
        2 => check_round_trip::<(Vote, SnapshotMeta, Vec<u8>)>(bytes),
        3 => check_round_trip::<TransferLeaderRequest<TypeConfig>>(bytes),
        4 => check_round_trip::<ClientRequest>(bytes),
        5 => check_round_trip::<AdminRequest>(bytes),
        6 => check_round_trip::<LeaseGrantCall>(bytes),
        7 => check_round_trip::<i64>(bytes),
        8 => check_round_trip::<LeaseTimeToLiveCall>(bytes),
        9 => check_round_trip::<Answer<AppendEntriesResponse<TypeConfig>>>(bytes),
        10 => check_round_trip::<Answer<VoteResponse<TypeConfig>>>(bytes),
        11 => check_round_trip::<Answer<SnapshotResponse<TypeConfig>>>(bytes),
        12 => check_round_trip::<Answer<ForwardedWrite>>(bytes),
        13 => check_round_trip::<Answer<LeaseTimeToLive>>(bytes),
        14 => check_round_trip::<Answer<Option<u64>>>(bytes),
        _ => check_round_trip::<Answer<u64>>(bytes),
    }
});
