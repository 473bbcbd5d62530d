//! The auth records through the apply path: changes take no revision, a refused change leaves
//! the records as they were, the cache the front-ends read follows every commit and a reopen,
//! and snapshots (raft snapshots and backups alike) carry the records to another store.

use crate::support;

use revkv_storage::auth::{
    AuthRequest, AuthState, Permission, PermissionKind, ROOT_ROLE, ROOT_USER,
};
use revkv_storage::{
    inspect_snapshot, KeyRange, MvccStore, Rejection, Request, Response, SnapshotError,
    StoreOptions,
};
use support::{ok, TestStore};

fn auth(change: AuthRequest) -> Request {
    Request::Auth(change)
}

/// Root and an `app` user with read-write on `app/`, and auth enabled.
fn set_up_auth(test: &mut TestStore) {
    let changes = [
        AuthRequest::UserAdd {
            name: ROOT_USER.into(),
            password_hash: "root-hash".into(),
        },
        AuthRequest::UserGrantRole {
            user: ROOT_USER.into(),
            role: ROOT_ROLE.into(),
        },
        AuthRequest::UserAdd {
            name: "app".into(),
            password_hash: "app-hash".into(),
        },
        AuthRequest::RoleAdd { name: "rw".into() },
        AuthRequest::RoleGrantPermission {
            role: "rw".into(),
            permission: Permission {
                kind: PermissionKind::ReadWrite,
                keys: KeyRange::prefix("app/"),
            },
        },
        AuthRequest::UserGrantRole {
            user: "app".into(),
            role: "rw".into(),
        },
        AuthRequest::Enable {
            token_key: vec![1; 32],
        },
    ];
    for change in changes {
        ok(test.apply(auth(change)));
    }
}

#[test]
fn auth_changes_take_no_revision_survive_a_reopen_and_refusals_change_nothing() {
    let mut test = TestStore::new();
    test.put("a", "1");
    let revision = test.revision();
    set_up_auth(&mut test);
    assert_eq!(test.revision(), revision, "auth changes take no revision");
    let records = test.store.auth();
    assert!(records.enabled);
    assert_eq!(records.revision, 7);

    let refused = test.apply(auth(AuthRequest::UserDelete {
        name: ROOT_USER.into(),
    }));
    assert!(
        matches!(refused.result, Err(Rejection::AuthRecord(_))),
        "{refused:?}"
    );
    assert_eq!(
        *test.store.auth(),
        *records,
        "a refused change changes nothing"
    );

    let added = ok(test.apply(auth(AuthRequest::RoleAdd { name: "x".into() })));
    assert_eq!(added, Response::Auth { auth_revision: 8 });
    test.reopen(StoreOptions::default());
    let reopened = test.store.auth();
    assert_eq!(reopened.revision, 8);
    assert!(reopened.roles.contains_key("x"));
    let rules = reopened.access_rules_of("app").unwrap();
    assert!(rules.permits(
        revkv_storage::auth::Access::Write,
        &KeyRange::single("app/k")
    ));
}

#[test]
fn a_snapshot_carries_the_auth_records_to_another_store() {
    let mut test = TestStore::new();
    test.put("app/k", "v");
    set_up_auth(&mut test);
    let mut stream = Vec::new();
    test.store.export_snapshot(&mut stream).unwrap();
    inspect_snapshot(&mut stream.as_slice()).unwrap();

    let directory = tempfile::tempdir().unwrap();
    let other =
        MvccStore::open(directory.path().join("state.redb"), StoreOptions::default()).unwrap();
    assert_eq!(*other.auth(), AuthState::default());
    other.import_snapshot(&mut stream.as_slice()).unwrap();
    assert_eq!(
        *other.auth(),
        *test.store.auth(),
        "the cache follows an import"
    );
}

#[test]
fn a_stream_whose_auth_frame_enables_auth_without_root_is_refused() {
    let mut test = TestStore::new();
    test.put("k", "v");
    ok(test.apply(auth(AuthRequest::RoleAdd { name: "r".into() })));
    let mut stream = Vec::new();
    test.store.export_snapshot(&mut stream).unwrap();
    inspect_snapshot(&mut stream.as_slice()).unwrap();

    // Rewriting the frame with the same records keeps the stream valid: the rewrite plants no
    // fault of its own.
    let same = support::replace_auth_frame(&stream, &test.store.auth());
    inspect_snapshot(&mut same.as_slice()).unwrap();
    // Plant a fault: the same records, but enabled with no root user. The frame checker must
    // refuse it before anything is imported.
    let unsound = AuthState {
        enabled: true,
        token_key: vec![1; 32],
        ..(*test.store.auth()).clone()
    };
    let planted = support::replace_auth_frame(&stream, &unsound);
    let error = inspect_snapshot(&mut planted.as_slice()).unwrap_err();
    assert!(matches!(error, SnapshotError::BadSnapshot(_)), "{error}");
}
