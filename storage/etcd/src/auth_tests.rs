//! etcd's auth buckets to revkv's records and back: what goes in comes out alike, and what revkv
//! could not enforce the same way, or etcd could not check, is refused.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use revkv_storage::auth::{ROOT_ROLE, ROOT_USER};

/// A hash etcd 3.4 wrote for `alice:wonderland`.
const ETCD_BCRYPT: &str = "$2a$10$QR3YAb0LZE8/YqbeBVAo0.kP6LdHO8OGzOAziYL/f4T08xTZA0FXq";

fn user(hash: &str, roles: &[&str]) -> User {
    User {
        password_hash: hash.to_string(),
        roles: roles.iter().map(|role| role.to_string()).collect(),
    }
}

fn records() -> AuthState {
    let reader = vec![
        Permission {
            kind: PermissionKind::Read,
            keys: KeyRange {
                start: b"a".to_vec(),
                end: RangeEnd::Until(b"b".to_vec()),
            },
        },
        Permission {
            kind: PermissionKind::ReadWrite,
            keys: KeyRange {
                start: b"k".to_vec(),
                end: RangeEnd::Single,
            },
        },
        Permission {
            kind: PermissionKind::Write,
            keys: KeyRange {
                start: b"z".to_vec(),
                end: RangeEnd::Unbounded,
            },
        },
    ];
    AuthState {
        enabled: true,
        revision: 9,
        users: BTreeMap::from([
            (ROOT_USER.to_string(), user(ETCD_BCRYPT, &[ROOT_ROLE])),
            ("app".to_string(), user(ETCD_BCRYPT, &["reader"])),
            ("cn-only".to_string(), user("", &["reader"])),
        ]),
        roles: BTreeMap::from([("reader".to_string(), reader)]),
        token_key: Vec::new(),
    }
}

#[test]
fn records_go_to_etcd_buckets_and_come_back_alike() {
    let buckets = etcd_buckets_of(&records()).unwrap();
    assert_eq!(
        buckets.auth,
        vec![
            (b"authEnabled".to_vec(), vec![1]),
            (b"authRevision".to_vec(), 9u64.to_be_bytes().to_vec()),
        ]
    );
    let names: Vec<&[u8]> = buckets.users.iter().map(|(name, _)| &name[..]).collect();
    assert_eq!(names, [&b"app"[..], b"cn-only", b"root"], "name order");
    let no_password = messages::User::decode(&buckets.users[1].1[..]).unwrap();
    assert_eq!(
        no_password.options,
        Some(messages::UserAddOptions { no_password: true })
    );
    assert_eq!(auth_state_from_etcd(&buckets).unwrap(), Some(records()));
}

#[test]
fn a_token_key_stays_behind_and_nothing_at_all_comes_back_as_none() {
    let mut with_key = records();
    with_key.token_key = vec![7; 32];
    let buckets = etcd_buckets_of(&with_key).unwrap();
    assert_eq!(auth_state_from_etcd(&buckets).unwrap(), Some(records()));
    assert_eq!(
        auth_state_from_etcd(&EtcdAuthBuckets::default()).unwrap(),
        None
    );
}

#[test]
fn argon2_hashes_are_refused_on_the_way_out_naming_the_users() {
    let mut with_argon2 = records();
    with_argon2.users.insert(
        "bob".into(),
        user("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", &[]),
    );
    let refusal = etcd_refusal(&with_argon2).unwrap();
    assert!(
        refusal.contains("bob") && refusal.contains("--password-hash bcrypt"),
        "{refusal}"
    );
    assert!(!refusal.contains("app"), "{refusal}");
    assert!(matches!(
        etcd_buckets_of(&with_argon2),
        Err(EtcdSnapshotError::Unsupported(_))
    ));
    assert_eq!(etcd_refusal(&records()), None);
}

fn with_user_entry(name: &[u8], message: messages::User) -> EtcdAuthBuckets {
    let mut buckets = etcd_buckets_of(&records()).unwrap();
    buckets.users.push((name.to_vec(), message.encode_to_vec()));
    buckets.users.sort();
    buckets
}

#[test]
fn entries_revkv_could_not_enforce_alike_are_refused() {
    let sound = messages::User {
        name: b"eve".to_vec(),
        password: ETCD_BCRYPT.as_bytes().to_vec(),
        roles: vec![],
        options: None,
    };
    assert!(auth_state_from_etcd(&with_user_entry(b"eve", sound.clone())).is_ok());
    let planted = [
        with_user_entry(b"mallory", sound.clone()),
        with_user_entry(
            b"eve",
            messages::User {
                password: b"plain text".to_vec(),
                ..sound.clone()
            },
        ),
        with_user_entry(
            b"eve\x07",
            messages::User {
                name: b"eve\x07".to_vec(),
                ..sound.clone()
            },
        ),
        with_user_entry(
            b"eve",
            messages::User {
                roles: (0..=MAX_ROLES_PER_USER)
                    .map(|role| role.to_string())
                    .collect(),
                ..sound
            },
        ),
    ];
    for buckets in planted {
        assert!(
            matches!(
                auth_state_from_etcd(&buckets),
                Err(EtcdSnapshotError::BadEntry { .. } | EtcdSnapshotError::Unsupported(_))
            ),
            "{buckets:?}"
        );
    }
    let mut bad_permission = etcd_buckets_of(&records()).unwrap();
    let role = messages::Role {
        name: b"reader".to_vec(),
        key_permission: vec![messages::Permission {
            perm_type: 3,
            key: b"a".to_vec(),
            range_end: Vec::new(),
        }],
    };
    bad_permission.roles[0].1 = role.encode_to_vec();
    assert!(auth_state_from_etcd(&bad_permission).is_err());
}

#[test]
fn enabled_auth_without_root_holding_root_is_refused() {
    let mut no_root = records();
    no_root.users.get_mut(ROOT_USER).unwrap().roles = BTreeSet::new();
    let buckets = etcd_buckets_of(&no_root).unwrap();
    assert!(matches!(
        auth_state_from_etcd(&buckets),
        Err(EtcdSnapshotError::Unsupported(_))
    ));
}
