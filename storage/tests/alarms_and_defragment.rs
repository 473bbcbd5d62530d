//! The NOSPACE and CORRUPT alarms through the apply path (raised and cleared by requests, kept
//! across a reopen, refusing exactly the writes they stop, at no revision), the key-space hash the
//! consistency check compares, and defragmentation giving compacted space back to the filesystem
//! without changing what the store holds.

use crate::support;

use revkv_storage::{
    Alarm, AlarmAction, AlarmKind, KeyRange, ReadError, Rejection, Request, Response, StoreOptions,
};
use support::{
    assert_cleared_by_quiet_snapshot_and_dropped_by_restore, ok, put_request,
    snapshot_and_a_store_that_installed_it, TestStore,
};

fn alarm(action: AlarmAction, member_id: u64) -> Request {
    Request::Alarm {
        action,
        alarm: Alarm {
            member_id,
            kind: AlarmKind::NoSpace,
        },
    }
}

#[test]
fn a_raised_no_space_alarm_refuses_growth_until_it_is_cleared_and_survives_a_reopen() {
    let mut test = TestStore::new();
    test.put("kept", "1");
    let revision = test.revision();
    let raised = ok(test.apply(alarm(AlarmAction::Activate, 2)));
    let expected = vec![Alarm {
        member_id: 2,
        kind: AlarmKind::NoSpace,
    }];
    assert_eq!(raised, Response::Alarms(expected.clone()));
    assert_eq!(test.revision(), revision, "an alarm takes no revision");
    test.reopen(StoreOptions::default());
    assert_eq!(test.store.alarms().unwrap(), expected);

    let refused = test.put("new", "2");
    assert!(
        matches!(refused.result, Err(Rejection::NoSpace)),
        "{refused:?}"
    );
    let grant = test.apply(Request::LeaseGrant {
        id: 7,
        ttl_seconds: 60,
    });
    assert!(matches!(grant.result, Err(Rejection::NoSpace)), "{grant:?}");
    assert_eq!(test.revision(), revision, "refused writes take no revision");
    assert!(test.get("new").is_none());

    // Deletes and compaction still work: they are how an operator makes room.
    ok(test.delete(KeyRange::single("kept")));
    ok(test.apply(Request::Compact {
        revision: test.revision(),
    }));

    // Clearing another member's alarm leaves this one; clearing it lets writes in again.
    ok(test.apply(alarm(AlarmAction::Deactivate, 3)));
    assert!(matches!(
        test.put("new", "2").result,
        Err(Rejection::NoSpace)
    ));
    assert_eq!(
        ok(test.apply(alarm(AlarmAction::Deactivate, 2))),
        Response::Alarms(Vec::new())
    );
    ok(test.apply(put_request("new", "2")));
    assert_eq!(test.get("new").unwrap().value, b"2".to_vec());
}

#[test]
fn a_raised_corrupt_alarm_refuses_every_change_until_it_is_cleared_and_survives_a_reopen() {
    let mut test = TestStore::new();
    test.put("kept", "1");
    let revision = test.revision();
    let corrupt = Alarm {
        member_id: 3,
        kind: AlarmKind::Corrupt,
    };
    let change = |action| Request::Alarm {
        action,
        alarm: corrupt,
    };
    ok(test.apply(change(AlarmAction::Activate)));
    test.reopen(StoreOptions::default());
    assert_eq!(test.store.alarms().unwrap(), vec![corrupt]);

    let refused = [
        put_request("new", "2"),
        Request::DeleteRange(revkv_storage::DeleteRangeRequest {
            range: KeyRange::single("kept"),
            prev_kv: false,
        }),
        Request::Compact { revision },
        Request::LeaseGrant {
            id: 7,
            ttl_seconds: 60,
        },
    ];
    for request in refused {
        let outcome = test.apply(request);
        assert!(
            matches!(outcome.result, Err(Rejection::CorruptCluster)),
            "{outcome:?}"
        );
    }
    assert_eq!(test.revision(), revision, "refused writes take no revision");
    assert_eq!(
        test.get("kept").unwrap().value,
        b"1".to_vec(),
        "reads go on"
    );

    ok(test.apply(change(AlarmAction::Deactivate)));
    ok(test.apply(put_request("new", "2")));
    assert_eq!(test.get("new").unwrap().value, b"2".to_vec());
}

#[test]
fn the_key_space_hash_follows_the_history_and_not_the_leases() {
    let mut test = TestStore::new();
    test.put("a", "1");
    let revision = test.revision();
    let before = test.store.key_space_hash(revision).unwrap();
    let whole_before = test.store.hash(Some(revision)).unwrap();
    // A lease grant takes no revision: members at one revision may differ in leases for a moment.
    ok(test.apply(Request::LeaseGrant {
        id: 7,
        ttl_seconds: 60,
    }));
    assert_eq!(test.revision(), revision);
    assert_eq!(test.store.key_space_hash(revision).unwrap(), before);
    assert_ne!(test.store.hash(Some(revision)).unwrap(), whole_before);
    // A change of the history at or below the revision changes it; one above does not.
    test.put("b", "2");
    assert_eq!(test.store.key_space_hash(revision).unwrap(), before);
    assert_ne!(
        test.store.key_space_hash(test.revision()).unwrap().hash,
        before.hash
    );
    assert!(matches!(
        test.store.key_space_hash(test.revision() + 1),
        Err(ReadError::FutureRevision { .. })
    ));
}

#[test]
fn an_alarm_of_member_zero_is_refused() {
    let mut test = TestStore::new();
    let outcome = test.apply(alarm(AlarmAction::Activate, 0));
    assert!(
        matches!(outcome.result, Err(Rejection::Invalid(_))),
        "{outcome:?}"
    );
    assert!(test.store.alarms().unwrap().is_empty());
}

#[test]
fn defragmenting_after_a_compaction_shrinks_the_file_and_keeps_the_data() {
    let mut test = TestStore::new();
    let value = "v".repeat(2_000);
    for index in 0..3_000 {
        test.put(&format!("bulk/{index:05}"), &value);
    }
    test.put("kept", "still here");
    ok(test.delete(KeyRange::prefix(b"bulk/".to_vec())));
    ok(test.apply(Request::Compact {
        revision: test.revision(),
    }));
    let hash_before = test.store.hash(None).unwrap();

    let defragmented = test.store.defragment().unwrap();
    assert!(
        defragmented.file_bytes_after * 2 < defragmented.file_bytes_before,
        "the file shrank to less than half: {defragmented:?}"
    );
    assert_eq!(
        test.store.file_bytes().unwrap(),
        defragmented.file_bytes_after
    );
    assert_eq!(test.get("kept").unwrap().value, b"still here".to_vec());
    assert_eq!(test.store.hash(None).unwrap(), hash_before);
    test.put("after", "1");
    test.reopen(StoreOptions::default());
    assert_eq!(test.get("after").unwrap().value, b"1".to_vec());
    assert_eq!(test.get("kept").unwrap().value, b"still here".to_vec());
}

#[test]
fn a_raft_snapshot_carries_the_alarms_and_a_restore_drops_them() {
    let mut leader = TestStore::new();
    leader.put("k", "v");
    ok(leader.apply(alarm(AlarmAction::Activate, 1)));

    // A follower that installs the snapshot refuses the same writes as the leader.
    let (stream, follower) = snapshot_and_a_store_that_installed_it(&leader);
    assert_eq!(
        follower.store.alarms().unwrap(),
        leader.store.alarms().unwrap()
    );
    assert_eq!(
        follower.store.hash(None).unwrap(),
        leader.store.hash(None).unwrap()
    );

    // A snapshot without alarms clears those the installing store had, and a restore starts a
    // new cluster: the old members' alarms do not come along.
    let restored =
        assert_cleared_by_quiet_snapshot_and_dropped_by_restore(&follower, &stream, |store| {
            store.alarms().unwrap()
        });
    assert_eq!(
        restored.store.hash(None).unwrap().hash,
        leader.store.hash(None).unwrap().hash
    );
}
