//! Compiles etcd's vendored protos (proto/, see proto/README.md) into the gRPC server code this
//! crate serves. Only the server side is generated: revkv's tests talk to it with the
//! `etcd-client` crate, a separately maintained client of the same protos.

fn main() {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_protos(
            &[
                "proto/etcd/api/authpb/auth.proto",
                "proto/etcd/api/mvccpb/kv.proto",
                "proto/etcd/api/etcdserverpb/rpc.proto",
            ],
            &[proto_root],
        )
        .expect("compiling etcd's protos (is protoc installed? scripts/install-test-deps.sh)");
}
