//! Auth on the gRPC port with etcd's own client: users, roles and permissions made through the
//! Auth service, then enabled; a client without credentials is refused (`Unauthenticated`), a
//! user reaches only its keys (`PermissionDenied` elsewhere, for reads, writes and watches) and
//! no administration, and root may do everything, including turning auth off again.

use crate::support;

use etcd_client::{
    AlarmAction, AlarmType, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions,
    Permission, Txn, TxnOp, WatchOptions,
};
use support::{grpc_status, GrpcMember};
use tonic::Code;

async fn client_as(member: &GrpcMember, user: &str, password: &str) -> Client {
    let options = ConnectOptions::new().with_user(user, password);
    Client::connect([member.endpoint.as_str()], Some(options))
        .await
        .expect("connect and authenticate")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_reaches_only_its_keys_and_root_administers() {
    let member = GrpcMember::start().await;
    let mut setup = member.client().await;
    setup.put("secret/key", "s", None).await.unwrap();
    setup.user_add("root", "root-pw", None).await.unwrap();
    setup.user_grant_role("root", "root").await.unwrap();
    setup.role_add("app-rw").await.unwrap();
    let permission = Permission::read_write("app/").with_prefix();
    setup
        .role_grant_permission("app-rw", permission)
        .await
        .unwrap();
    setup.user_add("app", "app-pw", None).await.unwrap();
    setup.user_grant_role("app", "app-rw").await.unwrap();
    setup.auth_enable().await.unwrap();

    // Without credentials: refused before anything runs, with etcd's code and text.
    let anonymous = setup.get("app/x", None).await.unwrap_err();
    let (code, message) = grpc_status(anonymous);
    assert_eq!(code, Code::InvalidArgument);
    assert_eq!(message, "etcdserver: user name is empty");
    let wrong = Client::connect(
        [member.endpoint.as_str()],
        Some(ConnectOptions::new().with_user("app", "wrong")),
    )
    .await;
    assert!(wrong.is_err(), "a wrong password authenticated");

    let mut app = client_as(&member, "app", "app-pw").await;
    app.put("app/x", "1", None).await.unwrap();
    let read = app.get("app/x", None).await.unwrap();
    assert_eq!(read.kvs()[0].value(), b"1");
    // etcd 3.7's streamed range is a read like Range: the user's keys, and no others.
    let mut streamed = app
        .kv_client()
        .get_stream("app/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("a user streams a range of its keys");
    let chunk = streamed.message().await.unwrap().expect("one chunk");
    assert_eq!(chunk.kvs()[0].value(), b"1");
    // Refused when the stream opens or with its first chunk, whichever reads first.
    let outside = match app.kv_client().get_stream("secret/key", None).await {
        Ok(mut stream) => stream.message().await.map(|_| ()),
        Err(refused) => Err(refused),
    };
    assert_eq!(grpc_status(outside.unwrap_err()).0, Code::PermissionDenied);
    // Listing alarms needs a user only, as from etcd 3.6 on; raising one needs root.
    let listed = app.alarm(AlarmAction::Get, AlarmType::None, None).await;
    assert!(listed.unwrap().alarms().is_empty());
    let raised = app
        .alarm(AlarmAction::Activate, AlarmType::Nospace, None)
        .await
        .map(|_| ());
    assert_eq!(grpc_status(raised.unwrap_err()).0, Code::PermissionDenied);
    // A txn that only reads is answered without the log, and checked as one that writes: a
    // compare or a get outside the user's keys is refused.
    let own_keys = Txn::new()
        .when([Compare::value("app/x", CompareOp::Equal, "1")])
        .and_then([TxnOp::get("app/x", None)]);
    assert!(app.txn(own_keys).await.unwrap().succeeded());
    let compares_outside = Txn::new()
        .when([Compare::value("secret/key", CompareOp::Equal, "1")])
        .and_then([TxnOp::get("app/x", None)]);
    let reads_outside = Txn::new().or_else([TxnOp::get("secret/key", None)]);
    for refused in [
        app.txn(compares_outside).await.map(|_| ()),
        app.txn(reads_outside).await.map(|_| ()),
        app.get("secret/key", None).await.map(|_| ()),
        app.put("secret/key", "stolen", None).await.map(|_| ()),
        app.compact(1, None).await.map(|_| ()),
        app.user_add("mallory", "pw", None).await.map(|_| ()),
    ] {
        assert_eq!(grpc_status(refused.unwrap_err()).0, Code::PermissionDenied);
    }
    let mut events = app
        .watch("secret/", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    // Answered created, then canceled with etcd's reason, as a refused create is.
    let mut answer = events.message().await.unwrap().expect("an answer");
    if !answer.canceled() {
        assert!(answer.events().is_empty(), "events outside the user's keys");
        answer = events.message().await.unwrap().expect("the cancel");
    }
    assert!(
        answer.canceled(),
        "a watch outside the user's keys was kept"
    );
    assert!(answer.cancel_reason().contains("permission denied"));

    let mut root = client_as(&member, "root", "root-pw").await;
    assert_eq!(
        root.get("secret/key", None).await.unwrap().kvs()[0].value(),
        b"s"
    );
    let mut events = root
        .watch("secret/", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    root.put("secret/key", "t", None).await.unwrap();
    let created = events.message().await.unwrap().expect("an answer");
    let changed = match created.events().is_empty() {
        true => events.message().await.unwrap().expect("the change"),
        false => created,
    };
    assert_eq!(changed.events()[0].event_type(), EventType::Put);
    root.auth_disable().await.unwrap();
    let after = setup.get("secret/key", None).await.unwrap();
    assert_eq!(
        after.kvs()[0].value(),
        b"t",
        "the refused put changed nothing"
    );
    member.stop().await;
}

/// Lock and Election run as their caller: a user takes a lock and campaigns under a prefix its
/// role reaches, and is refused (etcd's text, code `Unknown` as etcd's recipe servers answer)
/// under one it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_elections_reach_only_the_callers_keys() {
    let member = GrpcMember::start().await;
    let mut setup = member.client().await;
    setup.user_add("root", "root-pw", None).await.unwrap();
    setup.user_grant_role("root", "root").await.unwrap();
    setup.role_add("locker").await.unwrap();
    let permission = Permission::read_write("mine/").with_prefix();
    setup
        .role_grant_permission("locker", permission)
        .await
        .unwrap();
    setup.user_add("locker", "locker-pw", None).await.unwrap();
    setup.user_grant_role("locker", "locker").await.unwrap();
    setup.auth_enable().await.unwrap();

    let mut locker = client_as(&member, "locker", "locker-pw").await;
    let lease = locker.lease_grant(600, None).await.unwrap().id();
    let options = etcd_client::LockOptions::new().with_lease(lease);
    let held = locker.lock("mine", Some(options.clone())).await.unwrap();
    assert_eq!(held.key(), format!("mine/{lease:x}").as_bytes());
    locker.unlock(held.key()).await.unwrap();
    let refused = locker.lock("theirs", Some(options)).await.unwrap_err();
    assert_eq!(
        grpc_status(refused),
        (Code::Unknown, "etcdserver: permission denied".to_string())
    );
    let campaign = locker.campaign("mine", "v", lease).await.unwrap();
    assert_eq!(campaign.leader().unwrap().key(), held.key());
    let refused = locker.campaign("theirs", "v", lease).await.unwrap_err();
    assert_eq!(grpc_status(refused).0, Code::Unknown);
    member.stop().await;
}
