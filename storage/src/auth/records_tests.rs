//! The auth records' rules: enabling needs root, nothing locks root out while enabled, a refused
//! change changes nothing, and limits hold.

use super::*;
use crate::auth::access::{Access, PermissionKind};

fn apply(state: &mut AuthState, change: AuthRequest) -> Result<(), Rejection> {
    state.apply(&change, &Limits::default())
}

fn add_user(name: &str) -> AuthRequest {
    AuthRequest::UserAdd {
        name: name.into(),
        password_hash: format!("hash-of-{name}"),
    }
}

fn grant(user: &str, role: &str) -> AuthRequest {
    AuthRequest::UserGrantRole {
        user: user.into(),
        role: role.into(),
    }
}

fn enable() -> AuthRequest {
    AuthRequest::Enable {
        token_key: vec![7; 32],
    }
}

/// Root with the root role, and auth enabled.
fn enabled_state() -> AuthState {
    let mut state = AuthState::default();
    apply(&mut state, add_user(ROOT_USER)).unwrap();
    apply(&mut state, grant(ROOT_USER, ROOT_ROLE)).unwrap();
    apply(&mut state, enable()).unwrap();
    state
}

#[test]
fn enabling_needs_a_root_user_holding_the_root_role() {
    let mut state = AuthState::default();
    assert!(apply(&mut state, enable()).is_err());
    apply(&mut state, add_user(ROOT_USER)).unwrap();
    assert!(
        apply(&mut state, enable()).is_err(),
        "root without the root role"
    );
    apply(&mut state, grant(ROOT_USER, ROOT_ROLE)).unwrap();
    apply(&mut state, enable()).unwrap();
    assert!(state.enabled);
    assert_eq!(state.token_key, vec![7; 32]);
    assert_eq!(state.revision, 3, "every applied change bumps the revision");
}

#[test]
fn a_repeated_enable_keeps_the_key_and_the_revision_but_fills_a_missing_key() {
    let mut state = enabled_state();
    let before = state.clone();
    let another_key = AuthRequest::Enable {
        token_key: vec![8; 32],
    };
    apply(&mut state, another_key.clone()).unwrap();
    assert_eq!(state, before, "etcd ignores an enable of an enabled store");

    // As restored from an etcd snapshot: enabled, no key yet.
    state.token_key.clear();
    assert!(state.holds_invariants());
    apply(&mut state, another_key).unwrap();
    assert_eq!(state.token_key, vec![8; 32]);
    assert_eq!(state.revision, before.revision);
    apply(&mut state, enable()).unwrap();
    assert_eq!(
        state.token_key,
        vec![8; 32],
        "the first key filled in stays"
    );

    apply(&mut state, AuthRequest::Disable).unwrap();
    let disabled = state.clone();
    apply(&mut state, AuthRequest::Disable).unwrap();
    assert_eq!(
        state, disabled,
        "etcd ignores a disable of a disabled store"
    );
}

#[test]
fn permissions_are_kept_in_key_order_as_etcd_keeps_them() {
    let mut state = AuthState::default();
    apply(&mut state, AuthRequest::RoleAdd { name: "r".into() }).unwrap();
    for key in ["m", "z", "a", "m"] {
        let permission = Permission {
            kind: PermissionKind::Read,
            keys: KeyRange {
                start: key.as_bytes().to_vec(),
                end: if state.roles["r"]
                    .iter()
                    .any(|p| p.keys.start == key.as_bytes())
                {
                    crate::types::RangeEnd::Unbounded
                } else {
                    crate::types::RangeEnd::Single
                },
            },
        };
        let change = AuthRequest::RoleGrantPermission {
            role: "r".into(),
            permission,
        };
        apply(&mut state, change).unwrap();
    }
    let starts: Vec<&[u8]> = state.roles["r"]
        .iter()
        .map(|permission| permission.keys.start.as_slice())
        .collect();
    assert_eq!(starts, [&b"a"[..], b"m", b"m", b"z"]);
}

#[test]
fn while_enabled_root_cannot_be_deleted_demoted_or_its_role_removed_and_nothing_changes() {
    let mut state = enabled_state();
    let before = state.clone();
    let lockouts = [
        AuthRequest::UserDelete {
            name: ROOT_USER.into(),
        },
        AuthRequest::UserRevokeRole {
            user: ROOT_USER.into(),
            role: ROOT_ROLE.into(),
        },
        AuthRequest::RoleDelete {
            name: ROOT_ROLE.into(),
        },
    ];
    for lockout in lockouts {
        assert!(matches!(
            apply(&mut state, lockout),
            Err(Rejection::AuthRecord(_) | Rejection::AuthRecordNotFound(_))
        ));
        assert_eq!(state, before, "a refused change changes nothing");
    }
    apply(&mut state, AuthRequest::Disable).unwrap();
    assert!(state.token_key.is_empty());
    apply(
        &mut state,
        AuthRequest::UserDelete {
            name: ROOT_USER.into(),
        },
    )
    .unwrap();
}

#[test]
fn deleting_a_role_takes_it_from_every_user_and_its_permissions_with_it() {
    let mut state = AuthState::default();
    apply(&mut state, add_user("app")).unwrap();
    apply(&mut state, AuthRequest::RoleAdd { name: "rw".into() }).unwrap();
    let permission = Permission {
        kind: PermissionKind::ReadWrite,
        keys: KeyRange::prefix("app/"),
    };
    let grant_permission = AuthRequest::RoleGrantPermission {
        role: "rw".into(),
        permission,
    };
    apply(&mut state, grant_permission).unwrap();
    apply(&mut state, grant("app", "rw")).unwrap();
    let rules = state.access_rules_of("app").unwrap();
    assert!(rules.permits(Access::Write, &KeyRange::single("app/x")));
    assert!(!rules.permits(Access::Read, &KeyRange::single("other")));

    apply(&mut state, AuthRequest::RoleDelete { name: "rw".into() }).unwrap();
    assert!(state.users["app"].roles.is_empty());
    let rules = state.access_rules_of("app").unwrap();
    assert!(!rules.permits(Access::Write, &KeyRange::single("app/x")));
    assert!(state.access_rules_of("nobody").is_none());
}

#[test]
fn granting_the_same_keys_again_replaces_the_kind_and_revoking_needs_the_exact_range() {
    let mut state = AuthState::default();
    apply(&mut state, AuthRequest::RoleAdd { name: "r".into() }).unwrap();
    for kind in [PermissionKind::Read, PermissionKind::Write] {
        let change = AuthRequest::RoleGrantPermission {
            role: "r".into(),
            permission: Permission {
                kind,
                keys: KeyRange::prefix("a/"),
            },
        };
        apply(&mut state, change).unwrap();
    }
    assert_eq!(state.roles["r"].len(), 1);
    assert_eq!(state.roles["r"][0].kind, PermissionKind::Write);
    let revoke = |keys| AuthRequest::RoleRevokePermission {
        role: "r".into(),
        keys,
    };
    assert!(apply(&mut state, revoke(KeyRange::single("a/"))).is_err());
    apply(&mut state, revoke(KeyRange::prefix("a/"))).unwrap();
    assert!(state.roles["r"].is_empty());
}

#[test]
fn names_duplicates_and_limits_are_refused() {
    let mut state = AuthState::default();
    assert!(matches!(
        apply(&mut state, add_user("")),
        Err(Rejection::Invalid(_))
    ));
    assert!(apply(&mut state, add_user(&"n".repeat(MAX_NAME_BYTES + 1))).is_err());
    assert!(apply(&mut state, add_user("tab\there")).is_err());
    apply(&mut state, add_user("a")).unwrap();
    assert!(matches!(
        apply(&mut state, add_user("a")),
        Err(Rejection::AuthRecord(_))
    ));
    assert!(matches!(
        apply(&mut state, grant("a", "missing")),
        Err(Rejection::AuthRecordNotFound(_))
    ));
    for index in 1..MAX_USERS {
        apply(&mut state, add_user(&format!("user-{index}"))).unwrap();
    }
    assert!(matches!(
        apply(&mut state, add_user("one-too-many")),
        Err(Rejection::Invalid(_))
    ));
    assert!(state.holds_invariants());
}
