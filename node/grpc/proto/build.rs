//! Compiles etcd's vendored protos (the `etcd/`, `google/` and `protoc-gen-openapiv2/` folders
//! here; README.md says where they come from) into the messages, the gRPC server traits
//! revkv-grpc implements, the clients revkv-tools calls etcd with, and (pbjson) the messages'
//! JSON mapping for revkv-grpc's gateway.
//!
//! protoc comes from crates.io (`protoc-bin-vendored`), with protobuf's well-known types, which
//! the protos import (`google/protobuf/descriptor.proto` through the gateway annotations and
//! `versionpb`, `google/protobuf/struct.proto` through the OpenAPI options): so building the
//! `revkv` binary needs no system protoc, and a system protoc without its well-known types
//! (Debian's protobuf-compiler without libprotobuf-dev) cannot break it. A `PROTOC` set by the
//! user still wins, with the include directories that protoc and `PROTOC_INCLUDE` give it: a
//! compiler chosen on purpose is not handed another version's well-known types.

use std::path::PathBuf;

/// The protos compiled; what they import is in the folders of [`PROTO_FOLDERS`] or among the
/// well-known types.
const PROTOS: [&str; 5] = [
    "etcd/api/authpb/auth.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
    "etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
];

/// The vendored folders, each a root of import paths (`import "google/api/annotations.proto"`).
const PROTO_FOLDERS: [&str; 3] = ["etcd", "google", "protoc-gen-openapiv2"];

fn main() {
    for folder in PROTO_FOLDERS {
        println!("cargo:rerun-if-changed={folder}");
    }
    println!("cargo:rerun-if-env-changed=PROTOC");
    println!("cargo:rerun-if-env-changed=PROTOC_INCLUDE");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let descriptors = out_dir.join("etcd_descriptors.bin");
    let mut config = tonic_prost_build::Config::new();
    // The import root is this folder, which holds the vendored folders side by side.
    let mut includes = vec![PathBuf::from(".")];
    let protoc_chosen = std::env::var_os("PROTOC").is_some_and(|protoc| !protoc.is_empty());
    if !protoc_chosen {
        let protoc = protoc_bin_vendored::protoc_bin_path()
            .expect("a vendored protoc for this platform (or set PROTOC to one)");
        config.protoc_executable(protoc);
        includes.push(
            protoc_bin_vendored::include_path()
                .expect("the vendored protoc's well-known types for this platform"),
        );
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Without the clients' `connect` (tonic's `transport`): a user makes a channel of its
        // own, so this crate links no transport.
        .build_transport(false)
        .file_descriptor_set_path(&descriptors)
        .compile_with_config(config, &PROTOS.map(PathBuf::from), &includes[..])
        .expect("compiling etcd's protos");
    // The JSON gateway's encoding (revkv-grpc's `gateway.rs`): proto3's JSON mapping as etcd's
    // grpc-gateway writes it, with the protos' own field names (`create_revision`), 64-bit
    // integers as strings, bytes as base64 and zero values left out.
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
