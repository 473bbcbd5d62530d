//! The gRPC port while auth is enabled: it has no authentication of its own yet, so it must
//! refuse every call (etcd's `Unauthenticated`) rather than serve anyone unchecked.

mod support;

use revkv_node::KvBackend;
use revkv_storage::auth::{AuthRequest, ROOT_ROLE, ROOT_USER};
use revkv_storage::Request;
use support::{grpc_status, GrpcMember};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_refused_while_auth_is_enabled() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    client.put("k", "v", None).await.unwrap();

    let backend = member.node.backend().clone();
    for change in [
        AuthRequest::UserAdd {
            name: ROOT_USER.into(),
            password_hash: "not-a-real-hash".into(),
        },
        AuthRequest::UserGrantRole {
            user: ROOT_USER.into(),
            role: ROOT_ROLE.into(),
        },
        AuthRequest::Enable {
            token_key: vec![3; 32],
        },
    ] {
        backend.write(Request::Auth(change)).await.unwrap();
    }

    let read = client.get("k", None).await.unwrap_err();
    assert_eq!(grpc_status(read).0, Code::Unauthenticated);
    let write = client.put("k", "stolen", None).await.unwrap_err();
    assert_eq!(grpc_status(write).0, Code::Unauthenticated);
    let status = client.status().await.unwrap_err();
    assert_eq!(grpc_status(status).0, Code::Unauthenticated);

    backend
        .write(Request::Auth(AuthRequest::Disable))
        .await
        .unwrap();
    let after = client.get("k", None).await.unwrap();
    assert_eq!(
        after.kvs()[0].value(),
        b"v",
        "the refused put changed nothing"
    );
    member.stop().await;
}
