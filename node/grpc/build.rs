//! Compiles etcd's vendored protos (proto/, see proto/README.md) into the gRPC server code this
//! crate serves, and (pbjson) their JSON mapping for the gateway. Only the server side is
//! generated: revkv's tests talk to it with the `etcd-client` crate, a separately maintained
//! client of the same protos.

fn main() {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let descriptors = out_dir.join("etcd_descriptors.bin");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .file_descriptor_set_path(&descriptors)
        .compile_protos(
            &[
                "proto/etcd/api/authpb/auth.proto",
                "proto/etcd/api/mvccpb/kv.proto",
                "proto/etcd/api/etcdserverpb/rpc.proto",
                "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
                "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
            ],
            &[proto_root],
        )
        .expect("compiling etcd's protos (is protoc installed? scripts/install-test-deps.sh)");
    // The JSON gateway's encoding (`gateway.rs`): proto3's JSON mapping as etcd's grpc-gateway
    // writes it, with the protos' own field names (`create_revision`), 64-bit integers as
    // strings, bytes as base64 and zero values left out.
    let descriptor_bytes = std::fs::read(&descriptors).expect("the descriptor set just written");
    pbjson_build::Builder::new()
        .register_descriptors(&descriptor_bytes)
        .expect("etcd's descriptors decode")
        .preserve_proto_field_names()
        .build(&[
            ".etcdserverpb",
            ".mvccpb",
            ".authpb",
            ".v3lockpb",
            ".v3electionpb",
        ])
        .expect("generating the JSON mapping of etcd's messages");
}
