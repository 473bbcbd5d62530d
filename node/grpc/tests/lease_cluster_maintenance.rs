//! etcd's Lease, Cluster and Maintenance services through the `etcd-client` crate against one
//! real revkv member.

use crate::support;

use std::time::Duration;

use etcd_client::{LeaseTimeToLiveOptions, PutOptions};
use support::{grpc_status, GrpcMember};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_grant_keep_alive_time_to_live_and_revoke() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let granted = client.lease_grant(30, None).await.unwrap();
    assert_eq!(granted.ttl(), 30);
    let id = granted.id();
    assert!(id > 0);
    client
        .put("leased", "v", Some(PutOptions::new().with_lease(id)))
        .await
        .unwrap();

    let (mut keeper, mut answers) = client.lease_keep_alive(id).await.unwrap();
    keeper.keep_alive().await.unwrap();
    let renewed = answers.message().await.unwrap().expect("an answer");
    assert_eq!((renewed.id(), renewed.ttl()), (id, 30));

    let reading = client
        .lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    assert_eq!(reading.granted_ttl(), 30);
    assert!(reading.ttl() > 0 && reading.ttl() <= 30);
    assert_eq!(reading.keys(), [b"leased".to_vec()]);
    let listed = client.leases().await.unwrap();
    assert!(listed.leases().iter().any(|lease| lease.id() == id));

    client.lease_revoke(id).await.unwrap();
    assert!(client.get("leased", None).await.unwrap().kvs().is_empty());
    let gone = client.lease_time_to_live(id, None).await.unwrap();
    assert_eq!(
        gone.ttl(),
        -1,
        "etcd answers a lease that is gone with TTL -1"
    );
    keeper.keep_alive().await.unwrap();
    let after = answers.message().await.unwrap().expect("an answer");
    assert_eq!(after.ttl(), 0, "a keep-alive of a gone lease answers TTL 0");
    let again = client.lease_revoke(id).await.unwrap_err();
    assert_eq!(
        grpc_status(again),
        (
            Code::NotFound,
            "etcdserver: requested lease not found".into()
        )
    );
    let chosen = client
        .lease_grant(
            20,
            Some(etcd_client::LeaseGrantOptions::new().with_id(4242)),
        )
        .await
        .unwrap();
    assert_eq!(chosen.id(), 4242);
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_list_status_hash_and_alarms() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let members = client.member_list().await.unwrap();
    assert_eq!(members.members().len(), 1);
    let listed = &members.members()[0];
    assert_eq!(listed.id(), 1);
    assert!(!listed.is_learner());
    // etcd clients dial a member's client URLs, so they are its gRPC URL, not its HTTP one.
    assert_eq!(listed.client_urls(), std::slice::from_ref(&member.endpoint));

    let put = client.put("s", "1", None).await.unwrap();
    let status = client.status().await.unwrap();
    assert_eq!(status.version(), "3.5.13");
    assert_eq!(status.leader(), 1);
    assert!(status.db_size() > 0);
    // etcd 3.6's fields: the quota (etcd's default 2 GiB), no downgrade in progress (an empty
    // DowngradeInfo, as etcd sends), and no storage version, as the 3.5 reported has none.
    assert_eq!(status.db_size_quota(), 2 * 1024 * 1024 * 1024);
    let downgrade = status.downgrade_info().expect("etcd 3.6 always sends one");
    assert!(!downgrade.enabled() && downgrade.target_version().is_empty());
    assert_eq!(status.storage_version(), "");
    assert!(status.raft_index() >= status.raft_applied_index().min(status.raft_index()));
    assert_eq!(
        status.header().unwrap().revision(),
        put.header().unwrap().revision()
    );
    let first = client.hash_kv(0).await.unwrap();
    let same = client.hash_kv(0).await.unwrap();
    assert_eq!(first.hash(), same.hash());
    client.put("s", "2", None).await.unwrap();
    let changed = client.hash_kv(0).await.unwrap();
    assert_ne!(first.hash(), changed.hash());
    let at_old = client
        .hash_kv(put.header().unwrap().revision())
        .await
        .unwrap();
    assert_eq!(
        at_old.hash(),
        first.hash(),
        "a hash at a revision is stable"
    );

    let alarms = client
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert!(alarms.alarms().is_empty());
    alarm_raise_refuse_and_clear(&mut client).await;
    client.defragment().await.expect("Defragment answers");
    // MemberAdd asks the member at the peer URL for its id; nobody answers at port 1.
    let added = client.member_add(["http://127.0.0.1:1"], None).await;
    let (code, message) = grpc_status(added.expect_err("nobody to add"));
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("revkv serve --join"), "{message}");
    let two_urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"];
    let added = client.member_add(two_urls, None).await;
    let (code, message) = grpc_status(added.expect_err("one peer URL per member"));
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("exactly one peer URL"), "{message}");
    // A keep-alive of nothing in particular must not leave the member unusable.
    tokio::time::timeout(Duration::from_secs(5), client.get("s", None))
        .await
        .expect("answers in time")
        .unwrap();
    member.stop().await;
}

/// ACTIVATE raises a NOSPACE alarm through raft, a put is then refused with etcd's message, and
/// DEACTIVATE (what `etcdctl alarm disarm` sends) clears it; then the same with CORRUPT, which
/// refuses a delete too (DataLoss, "etcdserver: corrupt cluster") while reads go on.
async fn alarm_raise_refuse_and_clear(client: &mut etcd_client::Client) {
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
    let for_member = |member| {
        let mut options = AlarmOptions::new();
        options.with_member(member);
        Some(options)
    };
    let raised = client
        .alarm(AlarmAction::Activate, AlarmType::Nospace, for_member(7))
        .await
        .unwrap();
    assert_eq!(raised.alarms()[0].member_id(), 7);
    let listed = client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .unwrap();
    assert_eq!(listed.alarms().len(), 1);
    assert_eq!(listed.alarms()[0].alarm(), AlarmType::Nospace);
    let refused = client.put("grows", "v", None).await.err().map(grpc_status);
    let (code, message) = refused.expect("a put is refused while NOSPACE is raised");
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert_eq!(message, "etcdserver: mvcc: database space exceeded");
    client
        .alarm(AlarmAction::Deactivate, AlarmType::Nospace, for_member(7))
        .await
        .unwrap();
    let cleared = client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .unwrap();
    assert!(cleared.alarms().is_empty());
    client.put("grows", "v", None).await.expect("writes again");

    // CORRUPT (etcd's AlarmType 2) refuses every write with etcd 3.5's text, reads go on.
    client
        .alarm(AlarmAction::Activate, AlarmType::Corrupt, for_member(7))
        .await
        .unwrap();
    let listed = client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .unwrap();
    assert_eq!(listed.alarms()[0].alarm(), AlarmType::Corrupt);
    let refused = client.delete("grows", None).await.err().map(grpc_status);
    let (code, message) = refused.expect("a delete is refused while CORRUPT is raised");
    assert_eq!(code, Code::DataLoss, "{message}");
    assert_eq!(message, "etcdserver: corrupt cluster");
    client.get("grows", None).await.expect("reads go on");
    client
        .alarm(AlarmAction::Deactivate, AlarmType::Corrupt, for_member(7))
        .await
        .unwrap();
    client.delete("grows", None).await.expect("writes again");
}

/// All the bytes of `Maintenance.Snapshot`.
async fn snapshot_bytes(client: &mut etcd_client::Client) -> Vec<u8> {
    let mut stream = client.snapshot().await.unwrap();
    let mut bytes = Vec::new();
    while let Some(answer) = stream.message().await.unwrap() {
        bytes.extend_from_slice(answer.blob());
    }
    bytes
}

/// `Maintenance.Snapshot` streams the member's store as an etcd snapshot (a bolt file and its
/// SHA-256 trailer, what etcd's own tools read): it opens, holds the revision the member had and
/// every write, and a damaged copy is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_streams_an_etcd_snapshot_that_checks_whole() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    for index in 0..50 {
        client
            .put(format!("backup/{index}"), "v".repeat(1000), None)
            .await
            .unwrap();
    }
    let last = client.put("backup/last", "x", None).await.unwrap();
    let revision = u64::try_from(last.header().unwrap().revision()).unwrap();
    let mut bytes = snapshot_bytes(&mut client).await;
    // etcd's trailer, which `etcdctl snapshot save` checks: 32 bytes past a multiple of 512.
    assert_eq!(bytes.len() % 512, 32);
    let directory = tempfile::tempdir().unwrap();
    let saved = directory.path().join("saved.db");
    std::fs::write(&saved, &bytes).unwrap();
    let snapshot = revkv_etcd_snapshot::EtcdSnapshot::open(&saved).expect("an etcd snapshot");
    assert!(snapshot.had_trailer);
    assert_eq!(snapshot.history().unwrap().current_revision, revision);
    let mut keys = std::collections::BTreeSet::new();
    snapshot
        .feed(&mut |frame| {
            if let revkv_storage::codec::SnapshotFrame::Record { record, .. } = frame {
                keys.insert(record.key);
            }
            Ok(())
        })
        .unwrap();
    // 50 keys, the probe the harness wrote and the last one.
    assert_eq!(keys.len(), 52);
    // A damaged copy is refused: the checker is not a rubber stamp.
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&saved, &bytes).unwrap();
    assert!(revkv_etcd_snapshot::EtcdSnapshot::open(&saved).is_err());
    member.stop().await;
}

/// A store whose users have argon2 password hashes (the default), which etcd cannot check, is
/// not written in etcd's format: its snapshot is revkv's backup stream inside etcd's envelope,
/// still saved by etcdctl, still restorable by revkv. (With bcrypt hashes it goes out in etcd's
/// format: `node/bin/tests/etcd_snapshot_out.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_argon2_users_streams_revkvs_format_in_etcds_envelope() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    client.put("kept", "v", None).await.unwrap();
    client.user_add("alice", "alice-pw", None).await.unwrap();
    let bytes = snapshot_bytes(&mut client).await;
    assert_eq!(bytes.len() % 512, 32);
    let directory = tempfile::tempdir().unwrap();
    let saved = directory.path().join("saved.db");
    std::fs::write(&saved, &bytes).unwrap();
    assert!(!revkv_etcd_snapshot::is_bolt_file(&saved).unwrap());
    let mut reader = revkv_storage::open_backup_file(&saved).unwrap();
    let summary = revkv_storage::inspect_snapshot(&mut reader).expect("a whole backup");
    assert!(summary.live_keys.is_some_and(|keys| keys >= 1));
    member.stop().await;
}
