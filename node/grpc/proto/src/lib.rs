//! etcd's v3 API, generated from the protos beside this crate (build.rs): one module per proto
//! package, each with its messages, its services' server traits (`kv_server`, which revkv-grpc
//! implements) and clients (`kv_client`, which revkv-tools calls etcd with), and the messages'
//! serde implementations in proto3's JSON mapping (revkv-grpc's gateway).
//!
//! The clients come without `connect`: they run over whatever channel their user builds (tonic's
//! client `Channel` in revkv-tools), so this crate links no transport and neither user gets the
//! other's.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod mvccpb {
    tonic::include_proto!("mvccpb");
    include!(concat!(env!("OUT_DIR"), "/mvccpb.serde.rs"));
}
pub mod authpb {
    tonic::include_proto!("authpb");
    include!(concat!(env!("OUT_DIR"), "/authpb.serde.rs"));
}
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.serde.rs"));
}
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.serde.rs"));
}
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.serde.rs"));
}
